"""Issue 19: bad input, a failing environment and damaged checkpoints end in one line and exit code 1 (or
a warning and a fallback), and nothing already written is lost.

In-process through the ``trinity`` entry point; each run is a two-step run of a one-layer model.
"""

from __future__ import annotations

import errno
import json
import math
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import filelock
import pytest
import torch
import yaml
from reliability_driver import register_length_reward
from rollout_support import TINY_MODEL
from safetensors.torch import load_file

from trinity_core import registry
from trinity_core.cli.main import main
from trinity_core.hooks import get_plugin_manager
from trinity_core.hookspecs import hookimpl
from trinity_core.train.run import lock_run_dir

CONFIG: dict[str, Any] = {
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none"},
    "rollout": {"prompts_per_step": 2},
    "tasks": {"eval_size": 0, "reward_fns": ["length_reward"]},  # rewards that vary: every step updates
    "trainer": {
        "total_steps": 2,
        "checkpoint_every": 1,
        "keep_checkpoints": 5,
        "progress": False,
        "threads": 1,
    },
    "model": TINY_MODEL,
}


@pytest.fixture(scope="module", autouse=True)
def _length_reward() -> None:
    register_length_reward()


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(CONFIG), encoding="utf-8")
    return path


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str]]:
    """Run ``trinity train ARGS`` in-process; return the exit code and stderr."""

    def run(*args: str | Path) -> tuple[int, str]:
        capsys.readouterr()
        code = main(["train", *map(str, args)])
        return code, capsys.readouterr().err

    return run


def one_line(err: str) -> str:
    """``err`` when it is exactly one line (no traceback)."""
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1, err
    return lines[0]


def weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"step-{step:06d}" / "model.safetensors"))


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def metric_steps(run: Path) -> list[float]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory, _length_reward: None) -> Path:
    """A finished two-step run (checkpoints at steps 1 and 2); tests copy it before changing it."""
    root = tmp_path_factory.mktemp("finished")
    (root / "tiny.yaml").write_text(yaml.safe_dump(CONFIG), encoding="utf-8")
    assert main(["train", "--config", str(root / "tiny.yaml"), "--run-dir", str(root / "run")]) == 0
    first, second = weights(root / "run", 1), weights(root / "run", 2)
    assert any(not torch.equal(first[k], second[k]) for k in first)  # the steps do train
    return root / "run"


@pytest.fixture
def run_copy(finished_run: Path, tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(finished_run, target)
    return target


# ------------------------------------------------------------------------------------- run directory


def test_a_second_run_into_a_locked_run_dir_is_refused(
    cli: Callable[..., tuple[int, str]], config_file: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    lock = lock_run_dir(run)  # stands in for a run in progress (the process test runs two processes)
    try:
        code, err = cli("--config", config_file, "--run-dir", run)
    finally:
        lock.release()
    assert code == 1
    assert one_line(err) == (
        f"trinity train: error: run directory {run} is in use by another trinity train (it holds "
        f"{run / '.lock'}); wait for that run to end, or choose another --run-dir"
    )
    assert [p.name for p in run.iterdir()] == [".lock"]  # the refused run wrote nothing


def test_a_read_only_run_dir_is_one_line(
    cli: Callable[..., tuple[int, str]], config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    run.mkdir()

    def refuse(self: filelock.FileLock, *args: Any, **kwargs: Any) -> None:
        # What opening the lock file in a read-only directory raises (chmod does not stop root).
        raise PermissionError(errno.EACCES, "Permission denied", str(run / ".lock"))

    monkeypatch.setattr(filelock.FileLock, "acquire", refuse)
    code, err = cli("--config", config_file, "--run-dir", run)
    assert code == 1
    assert one_line(err) == (
        f"trinity train: error: run directory {run} cannot be written (Permission denied); make it "
        "writable or choose another --run-dir"
    )


def test_a_run_dir_under_a_file_is_one_line(
    cli: Callable[..., tuple[int, str]], config_file: Path, tmp_path: Path
) -> None:
    (tmp_path / "afile").write_text("x")
    run = tmp_path / "afile" / "run"
    code, err = cli("--config", config_file, "--run-dir", run)
    assert code == 1
    assert one_line(err) == (
        f"trinity train: error: run directory {run} cannot be created: {tmp_path / 'afile'} is a file, not "
        "a directory; choose another --run-dir"
    )


def test_disk_full_while_saving_keeps_the_last_checkpoint(
    cli: Callable[..., tuple[int, str]], config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import accelerate.utils.other as writer  # Accelerate's binding of safetensors' save_file

    real = writer.safe_save_file

    def full_at_step_2(tensors: Any, filename: str, *args: Any, **kwargs: Any) -> None:
        if ".tmp-step-000002" in str(filename):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(tensors, filename, *args, **kwargs)

    run = tmp_path / "run"
    monkeypatch.setattr(writer, "safe_save_file", full_at_step_2)
    code, err = cli("--config", config_file, "--run-dir", run)
    assert code == 1
    assert one_line(err) == (
        f"trinity train: error: No space left on device while writing run directory {run}; free disk "
        f"space, then resume: checkpoint step-000001 is intact: continue with trinity train --resume {run}"
    )
    assert metric_steps(run) == [1.0, 2.0]  # written before the failing save, kept
    monkeypatch.setattr(writer, "safe_save_file", real)
    code, err = cli("--resume", run)
    assert code == 0, err
    assert metric_steps(run) == [1.0, 2.0]
    assert (run / "checkpoints" / "latest").read_text() == "step-000002"


class _RaisingObserver:
    @hookimpl
    def trinity_on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        raise KeyError("reward/mean")


def test_a_metrics_hook_that_raises_is_one_line(
    cli: Callable[..., tuple[int, str]], config_file: Path, tmp_path: Path
) -> None:
    pm = get_plugin_manager()
    pm.register(_RaisingObserver(), name="raising-observer")
    try:
        code, err = cli("--config", config_file, "--run-dir", tmp_path / "run")
    finally:
        pm.unregister(name="raising-observer")
    assert code == 1
    assert one_line(err) == (
        "trinity train: error: trinity_on_metrics of plugin 'raising-observer' after step 1 raised "
        "KeyError('reward/mean'); fix or uninstall the plugin, then resume: checkpoint step-000001 is "
        f"intact: continue with trinity train --resume {tmp_path / 'run'}"
    )


# ------------------------------------------------------------------------------------- configs


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"trainer:\n  lr: 1e-4 \xff\xfe\n", "not UTF-8 text (byte 0xff at offset 20); save it as UTF-8"),
        (
            b"- trainer\n- model\n",
            "the top level must be a mapping of sections (algorithm:, trainer:, ...), got a list",
        ),
        (b"42\n", "the top level must be a mapping of sections (algorithm:, trainer:, ...), got a int"),
    ],
    ids=["not-utf8", "list", "scalar"],
)
def test_config_files_that_are_not_a_mapping_are_one_line(
    cli: Callable[..., tuple[int, str]], tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    code, err = cli("--config", path, "--run-dir", tmp_path / "run")
    assert code == 1
    assert one_line(err) == f"trinity: error: {path}: {message}"
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------- data and rewards


def _dataset(path: Path, prompts: list[Any]) -> Path:
    import datasets

    datasets.Dataset.from_dict({"prompt": prompts, "answer": ["a"] * len(prompts)}).save_to_disk(str(path))
    return path


@pytest.mark.parametrize(
    ("prompts", "row", "shown"),
    [
        (["a=", ""], 1, "'' (str)"),
        (["a=", None], 1, "None (NoneType)"),
        ([1, 2], 0, "1 (int)"),  # a dataset column has one type: every row is bad
        ([["a"], ["b", "a"]], 0, "['a'] (list)"),
    ],
    ids=["empty", "none", "int", "list"],
)
def test_prompts_that_are_not_text_are_refused_with_the_row(
    cli: Callable[..., tuple[int, str]],
    config_file: Path,
    tmp_path: Path,
    prompts: list[Any],
    row: int,
    shown: str,
) -> None:
    data = _dataset(tmp_path / "data", prompts)
    code, err = cli(
        "--config", config_file, "--run-dir", tmp_path / "run", "--set", "tasks.name=dataset",
        "--set", f"tasks.args.path={data}",
    )  # fmt: skip
    assert code == 1
    assert one_line(err) == (
        f"trinity: error: tasks: tasks.args.prompt_key: row {row} of dataset '{data}' split 'train' has "
        f"prompt = {shown}; every prompt must be a non-empty string: fix or drop the row"
    )
    assert not (tmp_path / "run").exists()


def test_an_empty_dataset_is_one_line(
    cli: Callable[..., tuple[int, str]], config_file: Path, tmp_path: Path
) -> None:
    data = _dataset(tmp_path / "data", [])
    code, err = cli(
        "--config", config_file, "--run-dir", tmp_path / "run", "--set", "tasks.name=dataset",
        "--set", f"tasks.args.path={data}",
    )  # fmt: skip
    assert code == 1
    assert one_line(err) == (
        f"trinity: error: tasks: tasks.args.path: dataset '{data}' is empty; give it at least one row"
    )


def _nan(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    return [math.nan] * len(completions)


def _inf(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    return [math.inf] * len(completions)


def _short(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    return [1.0]


def _text(prompts: list[str], completions: list[str], **kwargs: Any) -> list[str]:
    return ["1.0"] * len(completions)


def _raises(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    raise ZeroDivisionError("division by zero")


def _one_number(prompts: list[str], completions: list[str], **kwargs: Any) -> float:
    return 1.0


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_nan, "returned nan for completion 0 ({c} for prompt {p}); return a finite float, or None"),
        (_inf, "returned inf for completion 0 ({c} for prompt {p}); return a finite float, or None"),
        (_short, "returned 1 values for 8 completions; return one value per completion"),
        (_text, "returned '1.0' (str) for completion 0 ({c} for prompt {p}); return a float, or None"),
        (_raises, "raised ZeroDivisionError: division by zero; fix the function (trinity train --debug"),
        (_one_number, "returned float 1.0; return a list with one float (or None) per completion"),
    ],
    ids=["nan", "inf", "wrong-length", "string", "raises", "not-a-list"],
)
def test_bad_reward_functions_are_one_line(
    cli: Callable[..., tuple[int, str]],
    config_file: Path,
    tmp_path: Path,
    fn: Callable[..., Any],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trinity_core.train.data import rewards

    seen: dict[str, Any] = {}
    real = rewards.combine_rewards

    def spy(
        fns: Any,
        weights: Any,
        names: Any,
        prompts: list[str],
        completions: list[str],
        fields: Any,
        **kwargs: Any,
    ) -> Any:
        seen.update(p=prompts[0], c=completions[0])
        return real(fns, weights, names, prompts, completions, fields, **kwargs)

    monkeypatch.setattr("trinity_core.train.explorer.explorer.combine_rewards", spy)
    registry.register("reward_fn", "bad_reward", fn)
    try:
        code, err = cli(
            "--config", config_file, "--run-dir", tmp_path / "run", "--set", "tasks.reward_fns=[bad_reward]"
        )
    finally:
        registry.unregister("reward_fn", "bad_reward")
    assert code == 1
    expected = "trinity train: error: reward function 'bad_reward' " + message.format(
        c=repr(seen["c"]), p=repr(seen["p"])
    )
    assert one_line(err).startswith(expected), err


# ------------------------------------------------------------------------------------- resume


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _alter_state(path: Path) -> None:  # same size, other bytes
    path.write_text(path.read_text().replace('"step": 2', '"step": 9'))


@pytest.mark.parametrize(
    ("name", "damage", "problem"),
    [
        ("model.safetensors", _truncate, "model.safetensors has 100 bytes, {size} were written"),
        ("optimizer.bin", Path.unlink, "optimizer.bin is missing"),
        (
            "state.json",
            lambda p: p.write_text('{"step": 2, "wor'),
            "state.json has 16 bytes, {size} were written",
        ),
        ("state.json", _alter_state, "state.json does not match its recorded sha256"),
    ],
    ids=["truncated-model", "missing-optimizer", "corrupt-state", "altered-state"],
)
def test_resume_falls_back_to_the_newest_intact_checkpoint(
    cli: Callable[..., tuple[int, str]],
    run_copy: Path,
    finished_run: Path,
    name: str,
    damage: Callable[[Path], Any],
    problem: str,
) -> None:
    step2 = run_copy / "checkpoints" / "step-000002"
    size = (step2 / name).stat().st_size
    damage(step2 / name)
    code, err = cli("--resume", run_copy)
    assert code == 0, err
    assert one_line(err) == (
        f"trinity train: warning: checkpoint {step2} is damaged: {problem.format(size=size)}; resuming "
        "from step-000001 instead"
    )
    assert metric_steps(run_copy) == [1.0, 2.0]  # step 2 replayed, its old row replaced
    assert_same_weights(weights(run_copy, 2), weights(finished_run, 2))  # bit for bit


def test_resume_with_no_intact_checkpoint_is_one_line(
    cli: Callable[..., tuple[int, str]], run_copy: Path
) -> None:
    for step in (1, 2):
        (run_copy / "checkpoints" / f"step-{step:06d}" / "optimizer.bin").unlink()
    code, err = cli("--resume", run_copy)
    root = run_copy / "checkpoints"
    assert code == 1
    assert one_line(err) == (
        f"trinity train: error: checkpoint {root / 'step-000002'} is damaged: optimizer.bin is missing; "
        f"checkpoint {root / 'step-000001'} is damaged: optimizer.bin is missing; no intact checkpoint is "
        f"left in {root}: start a new run (--overwrite)"
    )


def test_a_checkpoint_from_before_manifests_resumes_with_a_warning(
    cli: Callable[..., tuple[int, str]], run_copy: Path, finished_run: Path
) -> None:
    step2 = run_copy / "checkpoints" / "step-000002"
    (step2 / "manifest.json").unlink()  # as written by trinity-core before checkpoints had manifests
    code, err = cli("--resume", run_copy, "--set", "trainer.total_steps=3")
    assert code == 0, err
    assert one_line(err) == (
        f"trinity train: warning: checkpoint {step2} has no manifest.json (written by an older "
        "trinity-core): not verified"
    )
    assert metric_steps(run_copy) == [1.0, 2.0, 3.0]


def test_a_truncated_last_metrics_line_is_cut_back(
    cli: Callable[..., tuple[int, str]], run_copy: Path
) -> None:
    with (run_copy / "metrics.jsonl").open("a") as f:
        f.write('{"reward/mean": 0.5, "ste')  # a kill while step 3's row was written
    code, err = cli("--resume", run_copy, "--set", "trainer.total_steps=3")
    assert code == 0, err
    assert err == ""
    assert metric_steps(run_copy) == [1.0, 2.0, 3.0]


def test_resuming_a_finished_run_changes_nothing(cli: Callable[..., tuple[int, str]], run_copy: Path) -> None:
    before = {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file() and p.name != ".lock"}
    stamp = (run_copy / "summary.json").stat().st_mtime_ns
    code, err = cli("--resume", run_copy)
    assert code == 0
    assert one_line(err) == (
        f"trinity train: run {run_copy} already trained 2 of trainer.total_steps = 2 steps: nothing to do; "
        "to train further, add --set trainer.total_steps=N with a larger N"
    )
    after = {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before
    assert (run_copy / "summary.json").stat().st_mtime_ns == stamp


def test_extending_a_finished_run_continues_from_its_last_checkpoint(
    cli: Callable[..., tuple[int, str]], run_copy: Path, config_file: Path, tmp_path: Path
) -> None:
    code, err = cli("--resume", run_copy, "--set", "trainer.total_steps=3")
    assert code == 0, err
    assert metric_steps(run_copy) == [1.0, 2.0, 3.0]
    assert yaml.safe_load((run_copy / "config.yaml").read_text())["trainer"]["total_steps"] == 3
    straight = tmp_path / "straight"
    assert cli("--config", config_file, "--run-dir", straight, "--set", "trainer.total_steps=3")[0] == 0
    assert_same_weights(weights(run_copy, 3), weights(straight, 3))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--run-dir", "{tmp}/elsewhere"],
            "trinity train: error: --resume {run} continues that run in its own directory; drop --run-dir "
            "{tmp}/elsewhere",
        ),
        (
            ["--set", "trainer.lr=0.1"],
            "trinity: error: trainer.lr: a resumed run keeps its saved config.yaml: changing this key would "
            "change the run already trained; on --resume, --set accepts only trainer.total_steps, "
            "trainer.checkpoint_every, trainer.keep_checkpoints, trainer.progress, trainer.progress_metrics, "
            "trainer.threads, "
            "synchronizer.explorer_threads, synchronizer.learner_threads, synchronizer.explorer_process, "
            "synchronizer.explorer_restarts",
        ),
    ],
    ids=["run-dir", "set-lr"],
)
def test_resume_refuses_what_it_would_ignore_or_change(
    cli: Callable[..., tuple[int, str]], run_copy: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    before = (run_copy / "config.yaml").read_bytes()
    code, err = cli("--resume", run_copy, *(a.format(tmp=tmp_path) for a in args))
    assert code == 1
    assert one_line(err) == message.format(run=run_copy, tmp=tmp_path)
    assert (run_copy / "config.yaml").read_bytes() == before
    assert not (tmp_path / "elsewhere").exists()


def test_debug_shows_the_traceback(cli: Callable[..., tuple[int, str]], run_copy: Path) -> None:
    from trinity_core.train.checkpoints.commit import CheckpointError

    shutil.rmtree(run_copy / "checkpoints")
    code, err = cli("--resume", run_copy)
    assert code == 1
    assert one_line(err).startswith(f"trinity train: error: --resume {run_copy}: no complete checkpoint")
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        main(["train", "--resume", str(run_copy), "--debug"])


# ------------------------------------------------------------------------------------- damaged run dirs


@pytest.mark.parametrize(
    ("damage", "cause"),
    [
        (lambda p: p.write_bytes(b"\xff\xfe step"), "UnicodeDecodeError"),
        (lambda p: (p.unlink(), p.mkdir()), "IsADirectoryError"),
    ],
    ids=["not-utf8", "a-directory"],
)
def test_an_unreadable_latest_pointer_falls_back_to_the_newest_intact_checkpoint(
    cli: Callable[..., tuple[int, str]], run_copy: Path, damage: Callable[[Path], Any], cause: str
) -> None:
    pointer = run_copy / "checkpoints" / "latest"
    damage(pointer)
    code, err = cli("--resume", run_copy, "--set", "trainer.total_steps=3")
    assert code == 0, err
    assert one_line(err) == (
        f"trinity train: warning: {pointer} is unreadable ({cause}); resuming from the newest intact "
        "checkpoint"
    )
    assert metric_steps(run_copy) == [1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        ({"model.safetensors": 5}, "the record of model.safetensors is a int"),
        (
            {"model.safetensors": {"size": "5", "sha256": "x"}},
            "the record of model.safetensors has no integer",
        ),
        ([1, 2], "'files' is a list, not an object"),
    ],
    ids=["a-number", "size-as-text", "a-list"],
)
def test_a_malformed_manifest_is_a_damaged_checkpoint(
    cli: Callable[..., tuple[int, str]], run_copy: Path, finished_run: Path, files: Any, problem: str
) -> None:
    step2 = run_copy / "checkpoints" / "step-000002"
    (step2 / "manifest.json").write_text(json.dumps({"files": files}))
    code, err = cli("--resume", run_copy)
    assert code == 0, err
    line = one_line(err)
    assert line.startswith(
        f"trinity train: warning: checkpoint {step2} is damaged: manifest.json is malformed"
    )
    assert problem in line
    assert line.endswith("; resuming from step-000001 instead")
    assert_same_weights(weights(run_copy, 2), weights(finished_run, 2))


@pytest.mark.parametrize(
    "row", ['{"reward/mean": 0.5}', "[1, 2, 3]", '{"step": "two"}'], ids=["no-step", "a-list", "step-text"]
)
def test_a_metrics_row_that_is_not_a_row_is_one_line_and_nothing_is_lost(
    cli: Callable[..., tuple[int, str]], run_copy: Path, row: str
) -> None:
    metrics = run_copy / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    metrics.write_text("\n".join([lines[0], row, *lines[1:]]) + "\n")
    before = {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file() and p.name != ".lock"}
    code, err = cli("--resume", run_copy, "--set", "trainer.total_steps=3")
    assert code == 1
    assert one_line(err) == (
        f"trinity train: error: {metrics}: line 2 is not a metrics row (a JSON object with a numeric "
        "'step'); delete the line (or the file) and resume again"
    )
    after = {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before


def test_a_manifest_less_checkpoint_that_does_not_load_falls_back(
    cli: Callable[..., tuple[int, str]], run_copy: Path, finished_run: Path
) -> None:
    step2 = run_copy / "checkpoints" / "step-000002"
    (step2 / "manifest.json").unlink()  # written before manifests: only its files' presence is checked
    optimizer = step2 / "optimizer.bin"
    optimizer.write_bytes(optimizer.read_bytes()[:200])
    code, err = cli("--resume", run_copy)
    assert code == 0, err
    lines = err.strip().splitlines()
    assert lines[0] == (
        f"trinity train: warning: checkpoint {step2} has no manifest.json (written by an older "
        "trinity-core): not verified"
    )
    assert lines[-1].startswith(
        f"trinity train: warning: checkpoint {step2} (no manifest.json) does not load"
    )
    assert lines[-1].endswith("; resumed from step-000001 instead")
    assert metric_steps(run_copy) == [1.0, 2.0]
    assert_same_weights(weights(run_copy, 2), weights(finished_run, 2))


def test_a_run_killed_after_its_last_checkpoint_is_ended_by_resume(
    cli: Callable[..., tuple[int, str]], run_copy: Path, finished_run: Path
) -> None:
    for name in ("summary.json", "plot.png"):
        (run_copy / name).unlink(missing_ok=True)
    shutil.rmtree(run_copy / "model")
    metrics = (run_copy / "metrics.jsonl").read_bytes()
    code, err = cli("--resume", run_copy)
    assert code == 0, err
    assert err == ""
    summary = json.loads((run_copy / "summary.json").read_text())
    assert summary["steps"] == 2
    assert summary["reward_curve"] == json.loads((finished_run / "summary.json").read_text())["reward_curve"]
    assert (run_copy / "model" / "config.json").is_file()
    assert (run_copy / "metrics.jsonl").read_bytes() == metrics  # no step was trained again
    assert_same_weights(load_file(str(run_copy / "model" / "model.safetensors")), weights(finished_run, 2))
    # Now it has ended: a second resume has nothing to do.
    code, err = cli("--resume", run_copy)
    assert code == 0
    assert "nothing to do" in one_line(err)


def test_a_checkpoint_of_tied_weights_logs_no_note(
    cli: Callable[..., tuple[int, str]], run_copy: Path, caplog: pytest.LogCaptureFixture
) -> None:
    code, err = cli("--resume", run_copy, "--set", "trainer.total_steps=3")
    assert code == 0, err
    assert (run_copy / "checkpoints" / "step-000003").is_dir()
    assert not [r for r in caplog.records if "Removed shared tensor" in r.getMessage()]


def test_non_finite_weights_are_never_checkpointed(run_copy: Path, tmp_path: Path) -> None:
    from trinity_core.config import resolve_config
    from trinity_core.train.checkpoints.commit import CheckpointError
    from trinity_core.train.modes.runner import Runner
    from trinity_core.train.run import make_accelerator

    config = resolve_config(yaml.safe_load((run_copy / "config.yaml").read_text()))
    runner = Runner(config, run_copy, accelerator=make_accelerator(config, run_copy), resume=True)
    try:
        with torch.no_grad():
            next(iter(runner.learner.policy.parameters())).view(-1)[0] = math.nan
        with pytest.raises(CheckpointError) as caught:
            runner.save_checkpoint(3)
    finally:
        runner.event_loop.close()
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith("step 3: the policy has 1 non-finite weight tensor(s) (")
    assert f"The last good checkpoint is step-000002 (trinity train --resume {run_copy})" in str(caught.value)
    assert sorted(p.name for p in (run_copy / "checkpoints").iterdir()) == [
        "latest",
        "step-000001",
        "step-000002",
    ]


# ------------------------------------------------------------------------------------- RNG restore


def _drawn_after_resume(run: Path, tmp_path: Path, draw: Callable[[Any], Any]) -> tuple[Any, Any]:
    """What ``draw(trainer)`` gives right after the checkpoint of step 1 is saved, and right after it is
    restored in a fresh trainer."""
    from trinity_core.config import resolve_config
    from trinity_core.train.modes.runner import Runner
    from trinity_core.train.run import make_accelerator

    config = resolve_config(yaml.safe_load((run / "config.yaml").read_text()))
    acc = make_accelerator(config, run)
    fresh = Runner(config, tmp_path / "fresh", accelerator=acc)
    fresh.step(0)
    fresh.run_dir.mkdir()
    fresh.save_checkpoint(1)
    expected = draw(fresh)
    fresh.event_loop.close()
    resumed = Runner(config, fresh.run_dir, accelerator=acc, resume=True)
    resumed.event_loop.close()
    return draw(resumed), expected


def test_resume_restores_the_torch_rng(run_copy: Path, tmp_path: Path) -> None:
    got, expected = _drawn_after_resume(run_copy, tmp_path, lambda t: torch.rand(8))
    assert torch.equal(got, expected)


def test_resume_restores_the_task_generator(run_copy: Path, tmp_path: Path) -> None:
    got, expected = _drawn_after_resume(run_copy, tmp_path, lambda t: t.task.sample(8, t.task_gen))
    assert got == expected


@pytest.fixture(autouse=True)
def _no_leftover_registrations() -> Iterator[None]:
    yield
    assert get_plugin_manager().get_plugin("raising-observer") is None
