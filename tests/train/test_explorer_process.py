"""Mode both with ``synchronizer.explorer_process``: the explorer in a process of its own, kept exactly
``sync_offset`` steps ahead, so each rollout gets the weight version the explorer thread gives it."""

from __future__ import annotations

import asyncio
import copy
import json
import multiprocessing
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from async_support import register_fault_rewards
from real_stack import build_chat_model, run_config, word_problems, write_dataset
from reliability_driver import register_length_reward
from rollout_support import TINY_MODEL
from safetensors.torch import load_file

from trinity_core.buffer import make_buffer
from trinity_core.config import ConfigError, resolve_config
from trinity_core.train import train
from trinity_core.train.models.policy import load_policy, prepare_policy
from trinity_core.train.modes.async_mode import ExplorerFailed
from trinity_core.train.modes.explorer_process import build_explorer
from trinity_core.train.modes.explorers import death_message
from trinity_core.train.modes.step_gate import StepGate

pytestmark = pytest.mark.processes  # starts processes: tox env train-processes

CONFIG: dict[str, Any] = {
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none"},
    "rollout": {"prompts_per_step": 4},
    "tasks": {"eval_size": 0, "reward_fns": ["length_reward"]},
    "trainer": {"total_steps": 4, "checkpoint_every": 0, "progress": False, "threads": 1, "seed": 1},
    "model": TINY_MODEL,
}
LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


def _with(reward: str = "length_reward", **sync: Any) -> dict[str, Any]:
    config = copy.deepcopy(CONFIG)
    config["tasks"]["reward_fns"] = [reward]
    config["synchronizer"] = sync
    return config


def _weights(run: Path) -> dict[str, torch.Tensor]:
    last = sorted((run / "checkpoints").glob("step-*"))[-1]
    return load_file(str(last / "model.safetensors"))


@pytest.fixture(autouse=True)
def _rewards() -> None:
    register_length_reward()
    register_fault_rewards()


@pytest.mark.parametrize(
    ("offset", "interval", "staleness"),
    [
        # The explorer thread's schedule (docs/modes.md): rollout t uses the newest weights published
        # when the learner finished step t - offset - 1 (only versions that are multiples of the interval
        # are published); the learner trains step t at version t, so its staleness is t minus that.
        (1, 2, [0.0, 1.0, 2.0, 1.0]),  # versions 0, 0, 0 (version 1 is not published), 2
        (2, 1, [0.0, 1.0, 2.0, 2.0]),  # versions 0, 0, 0, 1
    ],
)
def test_each_rollout_gets_the_weight_version_of_the_threads_schedule(
    tmp_path: Path, offset: int, interval: int, staleness: list[float]
) -> None:
    config = _with(sync_offset=offset, sync_interval=interval, explorer_process=True)
    history = train(config, run_dir=tmp_path / "run").history
    assert [row["staleness/mean"] for row in history] == staleness
    assert [row["staleness/max"] for row in history] == staleness
    for row in history:
        assert 0.0 <= row["explorer/idle_fraction"] <= 1.0
        assert 0.0 <= row["learner/idle_fraction"] <= 1.0
        assert row["throughput/experiences_per_s"] > 0
    assert not multiprocessing.active_children()  # the explorer process is gone


def test_an_explorer_process_run_is_reproducible_and_one_version_stale(tmp_path: Path) -> None:
    config = _with(sync_offset=1, explorer_process=True)
    config["trainer"]["log_samples_every"] = 2
    first = train(config, run_dir=tmp_path / "a")
    second = train(config, run_dir=tmp_path / "b")
    # Rollouts with versions 0, 0, 1, 2, as the thread's (test_train_modes), whatever the timing.
    assert [r["staleness/max"] for r in first.history] == [0.0, 1.0, 1.0, 1.0]
    # Timing differs between the runs; the versions, samples and updates do not.
    assert [r["actor/loss"] for r in first.history] == [r["actor/loss"] for r in second.history]
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)
    # The learner logs sample rows from the experiences it receives: one response of each of the 4
    # prompts at steps 2 and 4, the same in both runs.
    rows_a, rows_b = ((tmp_path / run / "samples.jsonl").read_text().splitlines() for run in "ab")
    rows = [json.loads(line) for line in rows_a]
    assert [r["step"] for r in rows] == [2] * 4 + [4] * 4
    assert all(r["prompt"] and isinstance(r["completion"], str) for r in rows)
    assert all(isinstance(r["reward"], float) for r in rows)
    assert rows_a == rows_b


def test_one_step_off_policy_in_a_process_learns_to_copy(tmp_path: Path) -> None:
    config = {
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 8, "kl_loss_fn": "none"},
        "tasks": {"name": "copy", "args": {"length": 2, "letters": "abc"}, "eval_size": 0},
        "rollout": {"prompts_per_step": 16},
        "trainer": {"total_steps": 150, "lr": 5e-4, "checkpoint_every": 0, "progress": False, "seed": 0},
        "synchronizer": {"sync_offset": 1, "explorer_process": True},
    }
    result = train(config, run_dir=tmp_path / "copy")
    rewards = [row["reward/mean"] for row in result.history]
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last >= first + 0.3, f"first 10 steps {first:.3f}, last 10 {last:.3f}; curve {result.reward_curve}"
    assert all(row["staleness/mean"] == 1.0 for row in result.history[1:])


@pytest.mark.parametrize(
    ("mode", "sync", "says"),
    [
        ("both", {"explorer_process": True}, "this run has sync_offset 0"),
        ("async", {"explorer_process": True, "sync_offset": 1}, "this run has mode async"),
        ("explore", {"explorer_process": True, "sync_offset": 1}, "this run has mode explore"),
    ],
)
def test_an_explorer_process_where_none_can_run_is_refused(
    tmp_path: Path, mode: str, sync: dict[str, Any], says: str
) -> None:
    config = _with(**sync)
    config["mode"] = mode
    with pytest.raises(ConfigError, match=r"synchronizer\.explorer_process") as caught:
        train(config, run_dir=tmp_path / "run")
    assert says in str(caught.value)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_killed_explorer_process_stops_the_learner(tmp_path: Path) -> None:
    with pytest.raises(
        ExplorerFailed, match=r"the explorer process \(pid \d+\) ended .*: killed by signal SIGKILL"
    ):
        train(_with("killed_reward", sync_offset=1, explorer_process=True), run_dir=tmp_path / "run")
    assert not multiprocessing.active_children()


def test_a_stuck_explorer_process_is_a_bounded_wait_for_the_learner(tmp_path: Path) -> None:
    # Offset 2: after step 1 the learner may publish only once rollout 3 has started; the explorer hangs
    # in rollout 2 (its reward's second call), so the learner's wait ends at synchronizer.timeout.
    config = _with("stalling_reward", sync_offset=2, explorer_process=True, timeout=5)
    with pytest.raises(
        ExplorerFailed, match=r"is stuck: waited 5s for the explorer to start step 3 \(learner step 1\)"
    ):
        train(config, run_dir=tmp_path / "run")
    assert not multiprocessing.active_children()


def test_the_explorer_process_builds_its_policy_and_prompts_as_the_learner_does(tmp_path: Path) -> None:
    rows = word_problems(300, seed=0)  # run_config trains on the first 240, evaluates on the rest
    jsonl, _ = write_dataset(tmp_path, rows)
    model_dir = build_chat_model(tmp_path / "model", rows, format_steps=0)
    config_dict = run_config(model_dir, jsonl)
    config_dict["mode"] = "async"
    config_dict["model"]["lora"] = LORA
    config = resolve_config(config_dict)
    loop = asyncio.new_event_loop()
    try:
        explorer = build_explorer(config, 0, make_buffer("memory").writer, loop)
    finally:
        loop.close()
    # The chat template renders its prompts, as in the learner process.
    assert explorer.prompter.templated
    assert explorer.prompter.texts([{"prompt": "Hi"}]) == [
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    ]
    # Its policy has the learner's LoRA adapters: the published weights load into it by name.
    learner, _ = load_policy(str(model_dir), None, {}, "", seed=0)
    learner = prepare_policy(learner, config)
    explorer.policy.load_state_dict(learner.state_dict())
    assert not any(p.requires_grad for p in explorer.policy.parameters())


def test_the_gate_keeps_the_explorer_offset_steps_ahead_and_the_weights_behind_its_rollouts() -> None:
    gate = StepGate(multiprocessing.get_context("spawn"), offset=2, start_step=5)
    # Rollouts 5 to 7 may start at once: up to offset steps ahead of the rollout the learner trains first.
    assert [gate.explorer_may_start(t) for t in (5, 6, 7, 8)] == [True, True, True, False]
    gate.mark_learned(5)
    assert gate.explorer_may_start(8)
    assert not gate.explorer_may_start(9)
    # Step 5's weights may go out only once rollout 7 has started with the older ones.
    gate.mark_started(6)
    assert not gate.learner_may_publish(5)
    gate.mark_started(7)
    assert gate.learner_may_publish(5)
    assert not gate.learner_may_publish(6)


def test_a_gate_wait_checks_the_other_side_and_ends_at_its_timeout() -> None:
    gate = StepGate(multiprocessing.get_context("spawn"), offset=1, start_step=0)
    checks = []
    with pytest.raises(TimeoutError, match=r"waited 0\.3s for the learner's step 2"):
        gate.wait(
            lambda: gate.explorer_may_start(3),
            lambda: checks.append(1),
            timeout=0.3,
            poll_s=0.05,
            what="the learner's step 2",
        )
    assert len(checks) >= 2  # the other side was checked between slices of the wait
    waker = threading.Timer(0.1, gate.mark_learned, args=(1,))
    waker.start()
    waited = gate.wait(lambda: gate.explorer_may_start(3), lambda: None, timeout=5, poll_s=5, what="")
    assert waited < 4  # woken by the notification, not by the end of the 5 s slice


def test_a_resumed_run_restarts_the_explorer_process_at_its_step(tmp_path: Path) -> None:
    config = _with(sync_offset=1, explorer_process=True)
    config["trainer"].update(total_steps=2, checkpoint_every=2)
    train(config, run_dir=tmp_path / "run")
    resumed = train(resume=tmp_path / "run", overrides=["trainer.total_steps=4"])
    # The explorer starts again from the learner's weights (version 2): rollout 2 is fresh, rollout 3 is
    # made with them while the learner trains step 2.
    assert [row["step"] for row in resumed.history] == [3.0, 4.0]
    assert [row["staleness/mean"] for row in resumed.history] == [0.0, 1.0]
    assert not multiprocessing.active_children()


def test_an_explorer_that_dies_before_its_code_runs_points_at_the_main_guard() -> None:
    ctx = multiprocessing.get_context("spawn")
    spec = SimpleNamespace(errors=ctx.Queue())  # no traceback was sent
    process = SimpleNamespace(pid=4242, exitcode=1, join=lambda timeout: None)
    message = death_message("the explorer process (pid 4242)", spec, process, step=0)
    assert message.startswith("the explorer process (pid 4242) ended before learner step 1 with exit code 1")
    assert 'guard its top level with `if __name__ == "__main__":`' in message
