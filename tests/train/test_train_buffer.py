"""The buffer pillar in ``trinity train``: operators with over-sampling rounds, the hooks as an operator,
a mixture with replay resumed bit-identically, and bad input as one line, exit 1, nothing written lost."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from reliability_driver import register_length_reward
from rollout_support import TINY_MODEL
from safetensors.torch import load_file
from torch import Tensor

from trinity_core import registry
from trinity_core.batch import ExperienceBatch
from trinity_core.cli.main import main
from trinity_core.components import ExperienceOperator, TaskSelector
from trinity_core.hooks import HookCallError, get_plugin_manager
from trinity_core.hookspecs import hookimpl
from trinity_core.testing.crash import CrashAfter
from trinity_core.train import train
from trinity_core.train.data.tasks import LastDigitTask


def flat_on_odd_operands(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """1 for every response to a prompt whose first operand is odd (no signal there), else the length."""
    return [
        1.0 if int(p.split("+")[0]) % 2 else len(c) / 8 for p, c in zip(prompts, completions, strict=True)
    ]


def constant(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """The same reward for everything: no group ever has signal."""
    return [0.5] * len(completions)


@pytest.fixture(autouse=True)
def _rewards() -> None:
    register_length_reward()
    registry.register("reward_fn", "flat_on_odd_operands", flat_on_odd_operands, replace=True)
    registry.register("reward_fn", "constant", constant, replace=True)


def config(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none"},
        "rollout": {"prompts_per_step": 4},
        "tasks": {"eval_size": 0, "reward_fns": ["length_reward"]},
        "trainer": {"total_steps": 3, "progress": False, "threads": 1, "checkpoint_every": 1},
        "model": TINY_MODEL,
    }
    for section, values in overrides.items():
        base[section] = {**base.get(section, {}), **values}
    return base


def rows(run: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_dynamic_sampling_tops_each_step_up_to_prompts_per_step_groups_with_signal(tmp_path: Path) -> None:
    pipeline = [{"name": "dynamic_sampling", "args": {"max_extra_rounds": 6}}]
    tasks = {"reward_fns": ["flat_on_odd_operands"]}
    result = train(config(rollout={"experience_pipeline": pipeline}, tasks=tasks), run_dir=tmp_path / "r")
    for row in result.history:
        assert row["buffer/groups"] == 4.0  # exactly prompts_per_step groups were written
        assert row["buffer/zero_variance_groups"] == 0.0  # none without signal
        assert row["buffer/prompts_sampled"] == 4.0 * (1 + row["buffer/extra_rounds"])
    # About half the prompts have an odd first operand: the first round alone rarely keeps all four.
    assert sum(row["buffer/extra_rounds"] for row in result.history) >= 1


def test_async_mode_over_samples_in_the_explorer_process_and_replays_in_the_learner(tmp_path: Path) -> None:
    cfg = config(
        rollout={"experience_pipeline": [{"name": "dynamic_sampling", "args": {"max_extra_rounds": 6}}]},
        tasks={"reward_fns": ["flat_on_odd_operands"]},
        buffer={"replay": {"groups_per_step": 1, "max_reuse": 2}},
    )
    result = train({**cfg, "mode": "async"}, run_dir=tmp_path / "run")
    for row in result.history:
        assert row["buffer/groups"] == 4.0
        assert row["buffer/zero_variance_groups"] == 0.0
    assert [row["buffer/replay/drawn_groups"] for row in result.history] == [0.0, 1.0, 1.0]


class Recorder:
    """A trinity_process_experiences hook that records the rewards it sees."""

    def __init__(self) -> None:
        self.seen: list[list[float]] = []

    @hookimpl
    def trinity_process_experiences(self, experiences: list[Any], step: int) -> None:
        self.seen.append([e.reward for e in experiences])


def test_the_hooks_run_where_the_pipeline_lists_them(tmp_path: Path) -> None:
    recorder, pm = Recorder(), get_plugin_manager()
    pm.register(recorder, name="recorder")
    try:
        pipeline = [{"name": "reward_scale", "args": {"scale": 10.0}}, "hooks"]
        train(
            config(rollout={"experience_pipeline": pipeline}, trainer={"total_steps": 1}),
            run_dir=tmp_path / "a",
        )
        after = recorder.seen.pop()
        pipeline = [{"name": "reward_scale", "args": {"scale": 10.0}}]  # hooks first by default
        train(
            config(rollout={"experience_pipeline": pipeline}, trainer={"total_steps": 1}),
            run_dir=tmp_path / "b",
        )
        before = recorder.seen.pop()
    finally:
        pm.unregister(name="recorder")
    assert max(after) > 1.0 >= max(before)  # length / 8 <= 1 before scaling


MIXED = {
    "tasks": {
        "mix": [
            {"name": "last_digit", "pool_size": 12, "weight": [[0, 3.0], [4, 1.0]], "selector": "sequential"},
            {"name": "copy", "pool_size": 8, "weight": 1.0, "selector": "random"},
        ],
        "reward_fns": ["length_reward"],
    },
    "buffer": {"replay": {"groups_per_step": 2, "max_reuse": 3, "capacity": 6}},
    "trainer": {"total_steps": 5, "checkpoint_every": 2, "keep_checkpoints": 5},
}


def test_a_mixture_with_selectors_and_replay_resumes_bit_identically(tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    train(config(**MIXED), run_dir=straight)
    killed, pm = tmp_path / "killed", get_plugin_manager()
    pm.register(CrashAfter(3), name="crash-after-3")
    try:
        with pytest.raises(HookCallError, match="crash-after-3"):
            train(config(**MIXED), run_dir=killed)
    finally:
        pm.unregister(name="crash-after-3")
    assert (killed / "checkpoints" / "latest").read_text() == "step-000002"
    train(resume=killed)
    a = load_file(str(straight / "checkpoints" / "step-000005" / "model.safetensors"))
    b = load_file(str(killed / "checkpoints" / "step-000005" / "model.safetensors"))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=0, msg=name)
    for x, y in zip(rows(straight), rows(killed), strict=True):
        keys = [k for k in x if k.startswith(("buffer/", "reward/", "actor/loss")) and not k.endswith("_s")]
        assert {k: x[k] for k in keys} == {k: y[k] for k in keys}
    assert rows(straight)[-1]["buffer/replay/drawn_groups"] == 2.0
    assert rows(straight)[-1]["buffer/taskset/copy/prompts"] == 2.0  # weights 1 : 1 from step 4


def test_operators_ahead_of_the_learner_resume_bit_for_bit(tmp_path: Path) -> None:
    """With the explorer a step ahead, a checkpoint keeps what the operators kept of the next step (every
    round's): the resumed run is the uninterrupted one."""
    pipeline = [{"name": "dynamic_sampling", "args": {"max_extra_rounds": 6}}]
    cfg = config(
        rollout={"experience_pipeline": pipeline},
        tasks={"reward_fns": ["flat_on_odd_operands"]},
        trainer={"total_steps": 4, "checkpoint_every": 1, "keep_checkpoints": 5},
        synchronizer={"sync_offset": 1},
    )
    straight = tmp_path / "straight"
    train(cfg, run_dir=straight)
    killed, pm = tmp_path / "killed", get_plugin_manager()
    pm.register(CrashAfter(1), name="crash-after-1")
    try:
        with pytest.raises(HookCallError, match="crash-after-1"):
            train(cfg, run_dir=killed)
    finally:
        pm.unregister(name="crash-after-1")
    train(resume=killed)
    a = load_file(str(straight / "checkpoints" / "step-000004" / "model.safetensors"))
    b = load_file(str(killed / "checkpoints" / "step-000004" / "model.safetensors"))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=0, msg=name)
    keys = ("buffer/groups", "buffer/extra_rounds", "reward/mean", "actor/loss")
    assert [[r[k] for k in keys] for r in rows(straight)] == [[r[k] for k in keys] for r in rows(killed)]


# ---------------------------------------------------------------- bad input through the CLI


class NotASubset(ExperienceOperator):
    """Repeats the first row, from the second step on."""

    def __call__(self, batch: ExperienceBatch, step: int) -> tuple[ExperienceBatch, dict[str, Any]]:
        if step == 0:
            return batch, {}
        return batch.select(torch.cat([torch.zeros(1, dtype=torch.int64), torch.arange(len(batch))])), {}


class WrongShape(ExperienceOperator):
    """Gives one reward too many."""

    def __call__(self, batch: ExperienceBatch, step: int) -> tuple[ExperienceBatch, dict[str, Any]]:
        batch.rewards = torch.cat([batch.rewards, batch.rewards[:1]])
        return batch, {}


class PastTheEnd(TaskSelector):
    """The row after the last."""

    def get_indices(self, batch_size: int) -> Tensor:
        return torch.full((batch_size,), self.size)


def run_cli(capsys: pytest.CaptureFixture[str], path: Path, run: Path) -> str:
    capsys.readouterr()
    code = main(["train", "--config", str(path), "--run-dir", str(run)])
    err = capsys.readouterr().err.strip("\n")
    assert code == 1, err
    assert len(err.split("\n")) == 1, err
    assert "Traceback" not in err
    return err


def write(tmp_path: Path, cfg: dict[str, Any]) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("name", "cls", "words"),
    [
        ("not_a_subset", NotASubset, "that are not a subset of the 16 it was given"),
        ("wrong_shape", WrongShape, "changed the shape of the batch at step 0: rewards has shape (17,)"),
    ],
)
def test_an_operator_breaking_its_contract_stops_the_run_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, cls: type, words: str
) -> None:
    registry.register("operator", name, cls, replace=True)
    run = tmp_path / "run"
    err = run_cli(capsys, write(tmp_path, config(rollout={"experience_pipeline": [name]})), run)
    assert err.startswith(f"trinity: error: experience operator {name!r} (<in-process>")
    assert words in err
    assert "return the batch itself (a mapper) or batch.select(rows) (a filter)" in err
    if cls is NotASubset:  # step 1 was written before step 2 failed: kept
        assert [r["step"] for r in rows(run)] == [1.0]
        assert (run / "checkpoints" / "step-000001" / "model.safetensors").exists()


def test_when_empty_keep_trains_on_the_first_round_unfiltered(tmp_path: Path) -> None:
    op = {"name": "dynamic_sampling", "args": {"max_extra_rounds": 1, "when_empty": "keep"}}
    cfg = config(rollout={"experience_pipeline": [op]}, tasks={"reward_fns": ["constant"]})
    result = train(cfg, run_dir=tmp_path / "run")
    for row in result.history:
        assert row["buffer/unfiltered_steps"] == 1.0
        assert row["buffer/groups"] == 4.0  # the first round, whole
        assert row["buffer/zero_variance_groups"] == 1.0
        assert row["buffer/extra_rounds"] == 1.0


def test_a_step_left_empty_after_every_extra_round_names_the_operator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config(
        rollout={"experience_pipeline": [{"name": "dynamic_sampling", "args": {"max_extra_rounds": 2}}]},
        tasks={"reward_fns": ["constant"]},
    )
    err = run_cli(capsys, write(tmp_path, cfg), tmp_path / "run")
    assert err == (
        "trinity: error: step 0: experience operator 'dynamic_sampling' (trinity-plugin-buffer 0.1.0) left "
        "no experience of the step's 3 round(s) of prompts; check that the rewards vary within a task group, "
        "raise the operator's max_extra_rounds, set its when_empty: keep, or remove it from "
        "rollout.experience_pipeline"
    )


class EmptyTask(LastDigitTask):
    """A task set whose sampling gives nothing."""

    def sample(self, n: int, generator: torch.Generator) -> list[dict[str, Any]]:
        return []


@pytest.mark.parametrize(
    ("tasks", "words"),
    [
        (
            {"mix": [{"name": "last_digit", "weight": 0}, {"name": "copy", "weight": 0.0}]},
            "trinity: error: tasks.mix: the task sets' weights sum to 0.0 at step 0",
        ),
        (
            {"pool_size": 5, "selector": "past_the_end"},
            "trinity: error: task selector 'past_the_end' (<in-process>) returned row 5 of task set "
            "'last_digit'",
        ),
        ({"name": "empty_task", "pool_size": 3}, "trinity: error: tasks: task set 'empty_task' has no rows"),
    ],
)
def test_bad_tasks_stop_the_run_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tasks: dict[str, Any], words: str
) -> None:
    registry.register("task_selector", "past_the_end", PastTheEnd, replace=True)
    registry.register("task", "empty_task", EmptyTask, replace=True)
    err = run_cli(capsys, write(tmp_path, config(tasks=tasks)), tmp_path / "run")
    assert err.startswith(words), err


def test_a_run_that_failed_in_a_step_resumes_once_the_plugin_is_fixed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    registry.register("operator", "not_a_subset", NotASubset, replace=True)
    run = tmp_path / "run"
    run_cli(capsys, write(tmp_path, config(rollout={"experience_pipeline": ["not_a_subset"]})), run)

    class Fixed(NotASubset):
        """Leaves the batch as it is."""

        def __call__(self, batch: ExperienceBatch, step: int) -> tuple[ExperienceBatch, dict[str, Any]]:
            return batch, {}

    registry.register("operator", "not_a_subset", Fixed, replace=True)
    shutil.rmtree(run / "checkpoints" / ".tmp-step-000002", ignore_errors=True)
    assert main(["train", "--resume", str(run)]) == 0
    assert [r["step"] for r in rows(run)] == [1.0, 2.0, 3.0]
