"""Issue 33, point 8: bad configuration input through the commands a user runs.

One row per bad input (a config file, ``--set`` values, or both). ``trinity config validate FILE`` and
``trinity train --config FILE`` must refuse each one alike: one line that names the config path, says
what is wrong and what to do, exit code 1, no traceback; ``trinity train`` before any model is built and
before ``--overwrite`` touches the run directory. Ranges of the numeric keys are property-tested in
tests/test_config_ranges.py, the YAML reader in tests/test_config_yaml.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from trinity_core.cli.main import main


def bomb(levels: int, width: int) -> str:
    """``model.config`` holding a "billion laughs": level 0 is ``width`` scalars, each next level
    ``width`` aliases of the previous one, so level k expands to 1 + width * (level k-1) values."""
    lines = ["model:", "  config:", f"    a0: &a0 [{', '.join(['0'] * width)}]"]
    lines += [f"    a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * width)}]" for k in range(1, levels)]
    return "\n".join(lines) + "\n"


def flow_bomb(levels: int, width: int) -> str:
    """The same bomb as one flow mapping, for ``--set model.config=...``."""
    items = [f"a0: &a0 [{', '.join(['0'] * width)}]"]
    items += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * width)}]" for k in range(1, levels)]
    return "{" + ", ".join(items) + "}"


@dataclass(frozen=True)
class Case:
    """A bad input: the config file's text, ``--set`` values, and a fragment of the one line expected."""

    name: str
    text: str
    expected: str
    sets: tuple[str, ...] = ()


# Level k of a width-10 bomb expands to 1 + 10 + ... + 10**(k+1) values: 11, 111, ..., and level 4,
# 111,111, is the first past the limit of 100,000. Ten levels are 11,111,111,111 values in 584 bytes.
BOMB_LINE = "model.config.a4: expands to 111,111 values through its aliases"

CASES = [
    Case(
        "a section given twice",
        "trainer:\n  lr: 0.001\ntrainer:\n  seed: 1\n",
        "trainer: given twice in one mapping (lines 1 and 3); YAML would keep only the last and drop the "
        "first without a word; write it once",
    ),
    Case(
        "a key given twice",
        "trainer:\n  lr: 0.001\n  seed: 1\n  lr: 0.002\n",
        "trainer.lr: given twice in one mapping (lines 2 and 4)",
    ),
    Case("yes and true are one key", "model:\n  config:\n    yes: 1\n    true: 2\n", "(lines 3 and 4)"),
    Case(
        "a key given twice in --set",
        "",
        "trainer.lr: given twice in one mapping (both on line 1)",
        ("trainer={lr: 0.1, lr: 0.2}",),
    ),
    Case(
        "an infinite learning rate", "trainer:\n  lr: .inf\n", "trainer.lr: Input should be a finite number"
    ),
    Case(
        "a NaN learning rate in --set",
        "",
        "trainer.lr: Input should be a finite number",
        ("trainer.lr=.nan",),
    ),
    Case(
        "a seed over torch's range",
        "trainer:\n  seed: 18446744073709551616\n",
        "trainer.seed: Input should be less than or equal to 4294967295 (got 18446744073709551616)",
    ),
    Case(
        "a negative seed",
        "trainer:\n  seed: -1\n",
        "trainer.seed: Input should be greater than or equal to 0",
    ),
    Case(
        "beta1 over 1", "trainer:\n  betas: [1.5, 0.999]\n", "trainer.betas[0]: Input should be less than 1"
    ),
    Case("beta2 of 1", "trainer:\n  betas: [0.9, 1.0]\n", "trainer.betas[1]: Input should be less than 1"),
    Case("a negative beta", "trainer:\n  betas: [-0.1, 0.9]\n", "trainer.betas[0]: Input should be greater"),
    Case(
        "-1 layers",
        "model:\n  config:\n    num_hidden_layers: -1\n",
        "model.config.num_hidden_layers: Input should be greater than or equal to 1 (got -1)",
    ),
    Case(
        "hidden size 7 with 4 heads",
        "model:\n  config:\n    hidden_size: 7\n    num_attention_heads: 4\n",
        "model.config.hidden_size: 7 is not divisible by model.config.num_attention_heads (4)",
    ),
    Case(
        "6 query heads over 4 key/value heads",
        "model:\n  config:\n    num_attention_heads: 6\n    num_key_value_heads: 4\n",
        "model.config.num_key_value_heads: model.config.num_attention_heads (6) is not divisible by 4",
    ),
    Case(
        "a fractional hidden size",
        "model:\n  config:\n    hidden_size: 64.0\n",
        "model.config.hidden_size: Input should be a valid integer",
    ),
    Case(
        "a NaN reward weight",
        "tasks:\n  reward_fns: [exact_match]\n  reward_weights: [.nan]\n",
        "tasks.reward_weights[0]: Input should be a finite number",
    ),
    Case(
        "two weights for one reward function",
        "tasks:\n  reward_fns: [exact_match]\n  reward_weights: [1.0, 0.5]\n",
        "tasks.reward_weights: 2 weights for 1 reward function ['exact_match']; give one weight per entry",
    ),
    Case("temperature 0", "rollout:\n  temperature: 0\n", "rollout.temperature: Input should be greater"),
    Case(
        "threads past a C int",
        "trainer:\n  threads: 2147483648\n",
        "trainer.threads: Input should be less than or equal to 2147483647",
    ),
    Case(
        "an endless timeout",
        "synchronizer:\n  timeout: .inf\n",
        "synchronizer.timeout: Input should be a finite",
    ),
    Case("a critic lr of -inf", "critic:\n  lr: -.inf\n", "critic.lr: Input should be a finite number"),
    Case(
        "LoRA dropout 1",
        "model:\n  lora:\n    dropout: 1.0\n",
        "model.lora.dropout: Input should be less than 1",
    ),
    Case(
        "a NaN success threshold",
        "tasks:\n  eval_success: .nan\n",
        "tasks.eval_success: Input should be a finite",
    ),
    Case("a billion laughs in the file", bomb(10, 10), BOMB_LINE),
    Case("a billion laughs in --set", "", BOMB_LINE, (f"model.config={flow_bomb(10, 10)}",)),
    Case(
        "a recursive alias",
        "model:\n  config:\n    loop: &loop [*loop]\n",
        "model.config.loop[0]: the alias here repeats the value anchored on line 3, which contains it",
    ),
    Case(
        "nesting deeper than the reader follows",
        "model:\n  config:\n    deep: " + "[" * 5000 + "]" * 5000 + "\n",
        "nested deeper than the YAML reader can follow",
    ),
    Case(
        "a YAML syntax error",
        "trainer:\n  betas: [0.9, 0.99\n",
        "not valid YAML: line 3, column 1: expected ',' or ']', but got '<stream end>' (while parsing a flow "
        "sequence at line 2, column 10); fix the syntax there",
    ),
]


def one_line(err: str) -> str:
    """The single line of ``err`` (no traceback, nothing else)."""
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def config_file(tmp_path: Path, case: Case) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(case.text, encoding="utf-8")
    return path


def set_args(case: Case) -> list[str]:
    return [arg for value in case.sets for arg in ("--set", value)]


def test_the_bomb_rows_are_real_bombs() -> None:
    """The table's bomb is the issue's size (a few hundred bytes) and would expand past 10**10 values."""
    text = bomb(10, 10)
    assert len(text.encode()) < 650
    size = 11  # level 0: the list and its 10 scalars
    for _ in range(1, 10):
        size = 1 + 10 * size
    assert size == 11_111_111_111


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_config_validate_refuses_bad_input_in_one_line(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, case)
    assert main(["config", "validate", str(path), *set_args(case)]) == 1
    captured = capsys.readouterr()
    line = one_line(captured.err)
    assert line.startswith("trinity: invalid config: ")
    assert case.expected in line
    assert captured.out == ""


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building or loading a causal LM fails the test: bad input must stop ``trinity train`` first."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("trinity_core.train.run")  # the train extra

    def built(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was built before the bad input was refused")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_config", built)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", built)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.usefixtures("no_model")
def test_train_refuses_bad_input_alike_before_building_and_before_overwriting(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, case)
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("the user's own file", encoding="utf-8")
    args = ["train", "--config", str(path), "--run-dir", str(run), "--overwrite", *set_args(case)]
    assert main(args) == 1
    line = one_line(capsys.readouterr().err)
    assert line.startswith("trinity: error: ")
    assert case.expected in line
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]
    assert (run / "notes.txt").read_text(encoding="utf-8") == "the user's own file"
