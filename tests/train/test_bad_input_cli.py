"""Issue 21's bad input through the commands a user runs, where tests/train/test_reliability.py,
test_dataset_task.py, test_prompts.py and test_export.py do not already: a missing column and a bad
message row under ``trinity train``, bad data, a failing reward function and a failing template under
``trinity eval``, and a reward function that fails mid-run. Each is one line naming the key, the row or
the function, exit code 1, no traceback, and nothing already written lost.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from rollout_support import TINY_MODEL

from trinity_core import registry
from trinity_core.cli.main import main

ROWS = [{"q": f"{a}+{b}=", "answer": str((a + b) % 10)} for a in range(3) for b in range(3)]
CALLS: list[int] = []


def fails_on_the_second_step(completions: list[str], **kwargs: Any) -> list[float]:
    """Scores the first step's completions, then raises (a bug hit at step 2)."""
    CALLS.append(len(completions))
    if len(CALLS) > 1:
        raise KeyError("score")
    return [float(len(c)) for c in completions]


@pytest.fixture(autouse=True)
def _datasets_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    CALLS.clear()


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def config_file(tmp_path: Path, **tasks: Any) -> Path:
    config = {
        "trainer": {"total_steps": 2, "checkpoint_every": 1, "progress": False, "threads": 1},
        "rollout": {"prompts_per_step": 2},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "kl_loss_fn": "none"},
        "tasks": {
            "name": "dataset",
            "eval_size": 2,
            "eval_k": 1,
            "args": {"path": str(jsonl(tmp_path / "d.jsonl", ROWS)), "prompt_key": "q"},
            **tasks,
        },
        "model": TINY_MODEL,
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_train_names_a_missing_column_and_a_bad_message_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = config_file(tmp_path)
    data = tmp_path / "d.jsonl"
    code, err = run_cli(
        capsys,
        "train",
        "--config",
        config,
        "--run-dir",
        tmp_path / "run",
        "--set",
        "tasks.args.prompt_key=question",
    )
    assert code == 1
    assert one_line(err) == (
        f"trinity: error: tasks: tasks.args.prompt_key: dataset '{data}' split 'train' has no column "
        "'question'; columns: ['q', 'answer']"
    )
    chat = jsonl(tmp_path / "chat.jsonl", [{"m": [{"role": "user", "content": "1+1="}]}, {"m": "1+2="}])
    code, err = run_cli(
        capsys, "train", "--config", config, "--run-dir", tmp_path / "run",
        "--set", f"tasks.args.path={chat}", "--set", "tasks.args.messages_key=m",
    )  # fmt: skip
    assert code == 1
    assert one_line(err).startswith(
        f"trinity: error: tasks: tasks.args.messages_key: row 1 of dataset '{chat}' split 'train' has m = "
        "'1+2='; every row must hold a non-empty list"
    )
    assert not (tmp_path / "run").exists()


def test_a_reward_function_failing_at_step_2_keeps_step_1_and_the_run_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    registry.register("reward_fn", "fails_on_the_second_step", fails_on_the_second_step)
    config = config_file(tmp_path, reward_fns=["fails_on_the_second_step"], eval_size=0)
    run = tmp_path / "run"
    code, err = run_cli(capsys, "train", "--config", config, "--run-dir", run)
    assert code == 1
    assert one_line(err).startswith(
        "trinity train: error: reward function 'fails_on_the_second_step' raised KeyError: 'score'; fix the "
        "function (trinity train --debug shows the traceback)"
    )
    assert (run / "checkpoints" / "step-000001" / "model.safetensors").exists()
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1]
    CALLS.clear()  # "fixed": the next call scores again
    code, err = run_cli(capsys, "train", "--resume", run)
    assert code == 0, err
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]


@pytest.fixture
def trained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    run = tmp_path / "run"
    code, err = run_cli(capsys, "train", "--config", config_file(tmp_path), "--run-dir", run)
    assert code == 0, err
    (run / "eval.json").write_text('{"figures": "earlier"}', encoding="utf-8")
    return run


def test_eval_names_bad_data_a_failing_reward_and_a_failing_template_and_keeps_eval_json(
    trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    template = tmp_path / "broken.jinja"
    template.write_text("{{ raise_exception('this template is broken') }}")
    registry.register("reward_fn", "fails_on_the_second_step", fails_on_the_second_step)
    CALLS.append(0)  # every call fails
    cases = [
        (
            ["--set", "tasks.args.prompt_key=question"],
            "tasks.args.prompt_key: dataset '",
            "has no column 'question'",
        ),
        (
            ["--set", f"tasks.args.path={empty}"],
            f"tasks.args.path: dataset '{empty}' is empty",
            "at least one row",
        ),
        (
            ["--set", "tasks.reward_fns=[fails_on_the_second_step]"],
            "trinity eval: error: reward function 'fails_on_the_second_step' raised KeyError",
            "fix the function",
        ),
        (
            ["--set", f"model.chat_template={template}"],
            "trinity eval: error: model.chat_template: the chat template fails on the prompt",
            "this template is broken",
        ),
    ]
    for args, start, part in cases:
        code, err = run_cli(capsys, "eval", trained, *args)
        assert code == 1, args
        line = one_line(err)
        assert start in line, line
        assert part in line, line
        assert (trained / "eval.json").read_text(encoding="utf-8") == '{"figures": "earlier"}'


def test_a_null_answer_is_one_line_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = jsonl(tmp_path / "null.jsonl", [*ROWS[:3], {"q": "1+1=", "answer": None}])
    code, err = run_cli(
        capsys, "train", "--config", config_file(tmp_path), "--run-dir", tmp_path / "run",
        "--set", f"tasks.args.path={data}",
    )  # fmt: skip
    assert code == 1
    assert one_line(err) == (
        f"trinity: error: tasks: tasks.args.answer_key: row 3 of dataset '{data}' split 'train' has answer "
        "= None; every answer must be given: fix or drop the row"
    )
    assert not (tmp_path / "run").exists()


def test_an_unreadable_dataset_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    data = tmp_path / "d.jsonl"
    real_open = Path.open

    def refuse(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == data:  # as a file without read permission does for a user who is not root
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    config = config_file(tmp_path)
    monkeypatch.setattr(Path, "open", refuse)
    code, err = run_cli(capsys, "train", "--config", config, "--run-dir", tmp_path / "run")
    assert code == 1
    assert one_line(err) == (
        f"trinity: error: tasks: tasks.args.path: cannot read '{data}' (Permission denied); make it readable "
        "or give another path"
    )


def test_a_run_dir_name_longer_than_the_file_system_allows_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long = tmp_path / ("r" * 300)
    code, err = run_cli(capsys, "train", "--config", config_file(tmp_path), "--run-dir", long)
    assert code == 1
    assert one_line(err).startswith("trinity train: error: run directory name ")
    assert one_line(err).endswith(
        "is longer than the file system allows; choose a shorter --run-dir (or trainer.run_dir)"
    )


def test_overwrite_never_deletes_a_directory_that_is_not_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "thesis"
    folder.mkdir()
    (folder / "thesis.tex").write_text("my work")
    code, err = run_cli(
        capsys, "train", "--config", config_file(tmp_path), "--run-dir", folder, "--overwrite"
    )
    assert code == 1
    assert one_line(err) == (
        f"trinity train: error: run directory {folder} holds files but no config.yaml: it does not look like "
        "a trinity run, so --overwrite will not delete them; choose another --run-dir"
    )
    assert sorted(p.name for p in folder.iterdir()) == ["thesis.tex"]
    assert (folder / "thesis.tex").read_text() == "my work"


def test_overwrite_of_a_run_removes_only_what_a_run_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, run = config_file(tmp_path), tmp_path / "run"
    assert run_cli(capsys, "train", "--config", config, "--run-dir", run)[0] == 0
    (run / "notes.txt").write_text("keep me")
    code, err = run_cli(capsys, "train", "--config", config, "--run-dir", run, "--overwrite")
    assert code == 0, err
    assert (run / "notes.txt").read_text() == "keep me"
    assert (run / "summary.json").is_file()
