"""The clock of ``benchmarks/bench_e2e.py``: a step's span is cut into contiguous phases that add up to
it, at the boundaries its docstring names, and the wrapping is undone afterwards."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from e2e_phases import PHASES, PhaseClock, instrument_trinity


class FakeTime:
    """A clock that moves only when told: wall and CPU time advance by ``(wall, cpu)`` per call of
    :meth:`tick`."""

    def __init__(self) -> None:
        self.wall, self.cpu = 0.0, 0.0

    def tick(self, wall: float, cpu: float) -> None:
        self.wall += wall
        self.cpu += cpu


def test_phases_are_contiguous_and_add_up_to_the_span() -> None:
    t = FakeTime()
    clock = PhaseClock(wall=lambda: t.wall, cpu=lambda: t.cpu)
    generate = clock.generates(lambda: t.tick(2.0, 1.0))
    no_grad_logprobs = clock.logprobs(lambda: t.tick(0.5, 0.25))
    grad_logprobs = clock.logprobs(lambda: t.tick(3.0, 1.5))
    clip = clock.clips(lambda: t.tick(0.1, 0.1))

    clock.begin_step()
    t.tick(1.0, 0.5)  # fetching and encoding the prompts: generation
    generate()  # generation ends when generate returns
    t.tick(0.25, 0.25)  # rewards, advantages: reward_advantage
    with torch.no_grad():
        no_grad_logprobs()  # a no-grad pass: logprobs, then back to reward_advantage
    t.tick(0.25, 0.25)
    grad_logprobs()  # the first forward with autograd: forward_backward
    t.tick(1.0, 0.5)  # backward
    grad_logprobs()  # a second micro-batch stays in forward_backward
    clip()  # optimizer
    t.tick(0.4, 0.4)  # optimizer.step()
    clock.end_step()
    t.tick(5.0, 5.0)  # logging after the step: outside every span

    [step] = clock.steps
    assert step["phases"] == {
        "generation": [3.0, 1.5],
        "reward_advantage": [0.5, 0.5],
        "logprobs": [0.5, 0.25],
        "forward_backward": [7.0, 3.5],
        "optimizer": [0.5, 0.5],
    }
    assert step["wall"] == pytest.approx(sum(p[0] for p in step["phases"].values())) == 11.5
    assert step["cpu"] == pytest.approx(sum(p[1] for p in step["phases"].values())) == 6.25


def test_calls_outside_a_step_are_not_counted_and_before_step_runs_first() -> None:
    t = FakeTime()
    clock = PhaseClock(wall=lambda: t.wall, cpu=lambda: t.cpu)
    seen: list[str | None] = []
    clock.before_step = lambda: seen.append(clock.phase)
    clock.generates(lambda: t.tick(1.0, 1.0))()  # evaluation before training: no step open
    clock.end_step()
    assert clock.steps == []
    assert clock.phase is None
    clock.starts_step(lambda: t.tick(1.0, 1.0))()
    assert seen == [None]
    assert clock.phase == "generation"


@pytest.mark.parametrize("kl_loss_fn", ["none", "k3"])
def test_a_trinity_run_is_cut_into_phases_and_the_wrapping_undone(tmp_path: Path, kl_loss_fn: str) -> None:
    pytest.importorskip("transformers", reason="a trinity train run (train extra)")
    from transformers.generation.utils import GenerationMixin

    from trinity_core.train import train
    from trinity_core.train.learner import update

    before = (GenerationMixin.generate, update.response_logprobs)
    clock = PhaseClock()
    patches = instrument_trinity(clock)
    try:
        config = {
            "rollout": {"prompts_per_step": 2},
            "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "kl_loss_fn": kl_loss_fn},
            "trainer": {"total_steps": 2, "checkpoint_every": 0, "progress": False, "trackers": []},
            "tasks": {"eval_size": 0},
        }
        train(config, run_dir=tmp_path / "run")
    finally:
        patches.restore()
    assert (GenerationMixin.generate, update.response_logprobs) == before
    assert len(clock.steps) == 2
    for step in clock.steps:
        phases = step["phases"]
        assert set(phases) == set(PHASES)
        assert step["wall"] == pytest.approx(sum(p[0] for p in phases.values()))
        for name in ("generation", "reward_advantage", "forward_backward", "optimizer"):
            assert phases[name][0] > 0, name
        if kl_loss_fn == "none":  # one optimizer step per step, no reference: no no-grad pass
            assert phases["logprobs"] == [0.0, 0.0]
        else:  # the reference model's no-grad pass
            assert phases["logprobs"][0] > 0
