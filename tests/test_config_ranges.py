"""Ranges of the numeric config keys (trinity_core/config/models.py, sections.py, checks.py): each value
is accepted exactly when it lies in the documented range, and every documented config still loads."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trinity_core.config import MAX_SEED, MAX_THREADS, MIN_TEMPERATURE, ConfigError, load_config
from trinity_core.config.loading import read_yaml_mapping
from trinity_core.config.yaml_text import load_yaml_text

ROOT = Path(__file__).resolve().parents[1]


def nested(path: str, value: Any) -> dict[str, Any]:
    """``"model.lora.dropout", 0.5`` -> ``{"model": {"lora": {"dropout": 0.5}}}``."""
    out: Any = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return dict(out)


def accepted(data: dict[str, Any]) -> bool:
    try:
        load_config(data)
    except ConfigError:
        return False
    return True


# Every float key and its range; each must also be finite.
FLOAT_RANGES: dict[str, Callable[[float], bool]] = {
    "trainer.lr": lambda v: v > 0,
    "trainer.weight_decay": lambda v: v >= 0,
    "trainer.grad_clip": lambda v: v > 0,
    "critic.lr": lambda v: v > 0,
    "critic.grad_clip": lambda v: v > 0,
    "rollout.temperature": lambda v: v >= MIN_TEMPERATURE,
    "rollout.top_p": lambda v: 0 < v <= 1,
    "tasks.eval_success": lambda v: True,
    "synchronizer.timeout": lambda v: v > 0,
    "model.lora.dropout": lambda v: 0 <= v < 1,
}

# Every integer key and its lower bound (and upper, where one exists).
INT_RANGES: dict[str, tuple[int, int | None]] = {
    "algorithm.repeat_times": (1, None),
    "model.lora.r": (1, None),
    "model.lora.alpha": (1, None),
    "tasks.eval_size": (0, None),
    "tasks.eval_k": (0, None),
    "tasks.pool_size": (1, None),
    "rollout.prompts_per_step": (1, None),
    "rollout.top_k": (0, None),
    "rollout.min_new_tokens": (0, None),
    "rollout.max_new_tokens": (1, None),
    "rollout.workflow_max_calls": (1, None),
    "trainer.total_steps": (1, None),
    "trainer.seed": (0, MAX_SEED),
    "trainer.warmup_steps": (0, None),
    "trainer.minibatches": (1, None),
    "trainer.epochs": (1, None),
    "trainer.micro_batch_size": (1, None),
    "trainer.max_tokens_per_micro_batch": (1, None),
    "trainer.threads": (1, MAX_THREADS),
    "trainer.checkpoint_every": (0, None),
    "trainer.keep_checkpoints": (1, None),
    "trainer.export_every": (0, None),
    "trainer.eval_every": (0, None),
    "trainer.log_samples_every": (0, None),
    "critic.warmup_steps": (0, None),
    "data.batch_size": (1, None),
    "data.epochs": (1, None),
    "synchronizer.sync_interval": (1, None),
    "synchronizer.sync_offset": (0, None),
    "synchronizer.max_staleness": (0, None),
    "synchronizer.explorer_threads": (1, MAX_THREADS),
    "synchronizer.learner_threads": (1, MAX_THREADS),
    "synchronizer.explorers": (1, None),
    "synchronizer.explorer_restarts": (0, None),
    "buffer.replay.groups_per_step": (0, None),
    "buffer.replay.capacity": (1, None),
    "buffer.replay.max_reuse": (1, None),
    "buffer.replay.max_staleness": (0, None),
}

edge_floats = st.one_of(
    st.floats(),  # nan and the infinities included
    st.sampled_from([0.0, -0.0, 1.0, MIN_TEMPERATURE, math.nextafter(MIN_TEMPERATURE, 0), 1e-300, 1e300]),
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(FLOAT_RANGES)), edge_floats)
def test_a_float_key_takes_exactly_the_finite_values_of_its_range(path: str, value: float) -> None:
    expected = math.isfinite(value) and FLOAT_RANGES[path](value)
    assert accepted(nested(path, value)) == expected


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(INT_RANGES)), st.integers(-5, 2**70) | st.sampled_from([2**31, 2**32, 2**64]))
def test_an_integer_key_takes_exactly_its_range(path: str, value: int) -> None:
    low, high = INT_RANGES[path]
    assert accepted(nested(path, value)) == (value >= low and (high is None or value <= high))


def test_every_numeric_field_of_every_section_has_its_range_listed_here() -> None:
    from trinity_core.config import RunConfig

    found = set()

    def walk(model: Any, prefix: str) -> None:
        for name, info in model.model_fields.items():
            text = str(info.annotation)
            sub = info.annotation
            candidates = getattr(sub, "__args__", (sub,))
            for c in candidates:
                if isinstance(c, type) and hasattr(c, "model_fields"):
                    walk(c, f"{prefix}{name}.")
            if re.search(r"\b(int|float)\b", text) and "dict" not in text and "list" not in text:
                found.add(f"{prefix}{name}")

    walk(RunConfig, "")
    assert found - {"trainer.betas"} == set(FLOAT_RANGES) | set(INT_RANGES)


beta = st.floats(-0.5, 1.5) | st.sampled_from([0.0, 1.0, math.nan, math.inf])


@settings(max_examples=200, deadline=None)
@given(beta, beta)
def test_adam_betas_lie_in_zero_to_one(b1: float, b2: float) -> None:
    assert accepted(nested("trainer.betas", [b1, b2])) == all(0 <= b < 1 for b in (b1, b2))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(), max_size=3))
def test_reward_weights_are_finite(weights: list[float]) -> None:
    data = nested("tasks.reward_weights", weights)
    assert accepted(data) == all(math.isfinite(w) for w in weights)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(-2, 64),
    st.integers(-2, 16),
    st.one_of(st.none(), st.integers(-2, 16)),
    st.one_of(st.none(), st.integers(1, 8)),
)
def test_a_model_shape_is_accepted_when_the_heads_split_it_evenly(
    hidden: int, heads: int, kv_heads: int | None, head_dim: int | None
) -> None:
    shape: dict[str, Any] = {
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
    }
    if head_dim is not None:
        shape["head_dim"] = head_dim
    positive = hidden >= 1 and heads >= 1 and (kv_heads is None or kv_heads >= 1)
    expected = (
        positive
        and (head_dim is not None or hidden % heads == 0)  # the heads split the hidden state evenly
        and (kv_heads is None or heads % kv_heads == 0)  # each key/value head serves as many query heads
    )
    assert accepted(nested("model.config", shape)) == expected


def test_other_model_config_keys_pass_untouched() -> None:
    config = {"model_type": "llama", "rope_theta": 1e6, "torch_dtype": "bfloat16", "num_hidden_layers": 2}
    assert load_config(nested("model.config", config)).model.config == config


FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SECTIONS = {"mode", "algorithm", "model", "tasks", "rollout", "trainer", "data", "synchronizer", "critic"}


def documented_configs() -> list[tuple[str, str]]:
    """Every run configuration in the docs (YAML blocks whose top level is config sections) and in
    examples/."""
    out = []
    pages = [*sorted(ROOT.glob("docs/*.md")), ROOT / "README.md", *sorted(ROOT.glob("plugins/*/README.md"))]
    for page in pages:
        for n, (lang, body) in enumerate(FENCE.findall(page.read_text(encoding="utf-8"))):
            if lang in ("yaml", "yml"):
                data = load_yaml_text(body)
                if isinstance(data, dict) and data and set(data) <= SECTIONS:
                    out.append((f"{page.relative_to(ROOT)}#{n}", body))
    return out


@pytest.mark.parametrize(("where", "text"), documented_configs(), ids=lambda v: v if "#" in v else "")
def test_every_documented_config_is_within_the_ranges(where: str, text: str) -> None:
    load_config(load_yaml_text(text))


@pytest.mark.parametrize("path", sorted(ROOT.glob("examples/*.yaml")), ids=lambda p: p.name)
def test_every_example_config_is_within_the_ranges(path: Path) -> None:
    load_config(read_yaml_mapping(path))
