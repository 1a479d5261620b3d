"""The YAML reader of run configurations (trinity_core/config/yaml_text.py): safe_load's result for every
valid document, duplicate keys refused with their lines, alias expansions bounded, all on one line."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from trinity_core.config import ConfigError
from trinity_core.config.layers import apply_overrides
from trinity_core.config.yaml_text import MAX_CONFIG_NODES, describe_yaml_error, load_yaml_text

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None)
@given(documents)
def test_every_valid_document_reads_as_safe_load_reads_it(data: Any) -> None:
    for text in (yaml.safe_dump(data), yaml.safe_dump(data, default_flow_style=True)):
        assert load_yaml_text(text) == yaml.safe_load(text)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["lr", "seed", "betas", "LR", "lr2"]), min_size=1, max_size=8))
def test_a_key_written_twice_is_refused_with_both_lines(keys: list[str]) -> None:
    text = "trainer:\n" + "".join(f"  {key}: {i}\n" for i, key in enumerate(keys))
    first: dict[str, int] = {}
    expected = []
    for line, key in enumerate(keys, start=2):
        if key in first:
            expected.append(f"trainer.{key}: given twice in one mapping (lines {first[key]} and {line})")
        first.setdefault(key, line)
    if not expected:
        assert load_yaml_text(text) == {"trainer": {key: i for i, key in enumerate(keys)}}
        return
    with pytest.raises(ConfigError) as caught:
        load_yaml_text(text)
    assert [str(p).split(";")[0] for p in caught.value.problems] == expected


def test_keys_that_construct_alike_are_one_key_and_merges_may_override() -> None:
    for twice in ("a:\n  1: x\n  0x1: y\n", "a:\n  null: x\n  ~: y\n", "a:\n  on: x\n  true: y\n"):
        with pytest.raises(ConfigError, match="given twice in one mapping"):
            load_yaml_text(twice)
    merged = "base: &base {lr: 0.1, seed: 1}\ntrainer:\n  <<: *base\n  lr: 0.2\n"
    assert load_yaml_text(merged)["trainer"] == {"lr": 0.2, "seed": 1}  # an override, not a duplicate
    assert load_yaml_text("a: &x [1, 2]\nb: *x\n") == {"a": [1, 2], "b": [1, 2]}  # aliases under the limit


def level_sizes(levels: int, width: int) -> list[int]:
    """Values each level of ``{a0: &a0 [0]*width, a1: &a1 [*a0]*width, ...}`` expands to: level 0 is the
    list and its scalars, level k the list and ``width`` copies of level k-1."""
    sizes = [1 + width]
    for _ in range(1, levels):
        sizes.append(1 + width * sizes[-1])
    return sizes


def expansion(levels: int, width: int) -> tuple[int, str]:
    """What the reader reports: the first value past the limit in the order it reads them (depth
    first) and its path, or the whole document's size and the root path when nothing passes it."""
    sizes = level_sizes(levels, width)
    for k, size in enumerate(sizes):
        if size > MAX_CONFIG_NODES:
            return size, f"a{k}"
    return 1 + sum(1 + size for size in sizes), ""  # the mapping, each key and each value


def bomb_text(levels: int, width: int) -> str:
    lines = [f"a0: &a0 [{', '.join(['0'] * width)}]"]
    lines += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * width)}]" for k in range(1, levels)]
    return "\n".join(lines) + "\n"


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.integers(1, 12))
def test_an_alias_expansion_is_refused_exactly_past_the_limit(levels: int, width: int) -> None:
    size, path = expansion(levels, width)
    text = bomb_text(levels, width)
    if size <= MAX_CONFIG_NODES:
        assert load_yaml_text(text) == yaml.safe_load(text)
        return
    with pytest.raises(ConfigError) as caught:
        load_yaml_text(text)
    (problem,) = caught.value.problems
    assert problem.path == path
    assert problem.message.startswith(f"expands to {size:,} values through its aliases")


def test_a_bomb_of_10_to_the_40_values_is_refused_in_little_memory() -> None:
    text = bomb_text(40, 10)
    assert isinstance(yaml.safe_load(text), dict)  # plain safe_load accepts it: shared lists, not copies
    assert level_sizes(40, 10)[-1] > 10**40
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=r"a4: expands to 111,111 values"):
            load_yaml_text(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000  # the check walks each distinct node once; the expansion is never built


def test_a_recursive_alias_and_a_deep_nesting_are_one_problem_each() -> None:
    with pytest.raises(ConfigError) as caught:
        load_yaml_text("a: &x\n  b: *x\n")
    assert [str(p) for p in caught.value.problems] == [
        "a.b: the alias here repeats the value anchored on line 1, which contains it (a recursive "
        "structure); write the value out instead of the alias"
    ]
    with pytest.raises(ConfigError, match="nested deeper than the YAML reader can follow"):
        load_yaml_text("[" * 5000 + "]" * 5000, prefix="model.config")


def test_set_values_are_read_alike_and_named_by_their_key() -> None:
    with pytest.raises(ConfigError) as caught:
        apply_overrides(
            {}, ["tasks.args={a: 1, a: 2}", f"model.config={{{bomb_text(6, 10).replace(chr(10), ', ')}}}"]
        )
    assert [p.path for p in caught.value.problems] == ["tasks.args.a", "model.config.a4"]
    assert apply_overrides({}, ["trainer.lr=1e-4", "tasks.name=nan"]) == {
        "trainer": {"lr": 1e-4},
        "tasks": {"name": "nan"},  # a word stays a string: only YAML 1.1's dotless exponents become floats
    }


def test_a_syntax_error_is_one_line_with_its_place() -> None:
    with pytest.raises(yaml.YAMLError) as caught:
        load_yaml_text("trainer:\n\tlr: 1\n")
    assert describe_yaml_error(caught.value) == (
        "line 2, column 1: found character '\\t' that cannot start any token (while scanning for the next "
        "token)"
    )
