"""A fault inside a plugin's component or hook ends the run with one line naming the component (or hook)
and what it did, exit 1, and the last checkpoint intact.

Each fault fires at step 2 of a three-step run with a checkpoint every step, through the ``trinity``
entry point in-process; the components are registered in-process, so the line says so.
"""

from __future__ import annotations

import math
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from reliability_driver import register_length_reward
from rollout_support import TINY_MODEL
from trinity_plugin_grpo.advantage import GRPOGroupedAdvantage
from trinity_plugin_ppo.policy_loss import PPOPolicyLossFn

from trinity_core import registry
from trinity_core.cli.main import main
from trinity_core.hooks import get_plugin_manager
from trinity_core.hookspecs import hookimpl
from trinity_core.train.checkpoints.commit import verify_checkpoint

CONFIG: dict[str, Any] = {
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none"},
    "rollout": {"prompts_per_step": 2},
    "tasks": {"eval_size": 0, "reward_fns": ["length_reward"]},
    "trainer": {"total_steps": 3, "checkpoint_every": 1, "progress": False, "threads": 1},
    "model": TINY_MODEL,
}

CALLS = {"n": 0}
"""Calls of the faulty component in this run: it misbehaves on the second."""


def _second(fault: Callable[[], Any], normal: Callable[[], Any]) -> Any:
    CALLS["n"] += 1
    return fault() if CALLS["n"] == 2 else normal()


def _loss_with(fault: Callable[[Any], Any]) -> type:
    class FaultyLoss(PPOPolicyLossFn):
        def __call__(  # type: ignore[override]
            self,
            logprob: torch.Tensor,
            old_logprob: torch.Tensor | None,
            action_mask: torch.Tensor,
            advantages: torch.Tensor,
            **kwargs: Any,
        ) -> Any:
            result = super().__call__(logprob, old_logprob, action_mask, advantages, **kwargs)
            return _second(lambda: fault(result), lambda: result)

    return FaultyLoss


def _advantage_with(fault: Callable[[Any], Any]) -> type:
    class FaultyAdvantage(GRPOGroupedAdvantage):
        def process_batch(self, batch: Any) -> Any:
            result = super().process_batch(batch)
            return _second(lambda: fault(result), lambda: result)

    return FaultyAdvantage


def _raise(exc: BaseException) -> Callable[[Any], Any]:
    def fault(result: Any) -> Any:
        raise exc

    return fault


LOSS = "policy loss 'faulty' (registered in this process)"
ADVANTAGE = "advantage function 'faulty' (registered in this process)"
LOSS_FAULTS = {
    "raises": (_raise(ValueError("boom")), f"{LOSS} raised ValueError: boom"),
    "nan": (lambda r: (r[0] * math.nan, r[1]), f"step 2: {LOSS} produced non-finite loss (NaN or inf)"),
    "inf": (lambda r: (r[0] + math.inf, r[1]), f"step 2: {LOSS} produced non-finite loss (NaN or inf)"),
    "wrong-shape": (
        lambda r: (r[0].expand(3), r[1]),
        f"{LOSS} returned a loss of shape (3,); return a 0-d tensor",
    ),
    "detached": (lambda r: (r[0].detach(), r[1]), f"{LOSS} returned a loss without a gradient"),
    "not-a-tuple": (lambda r: r[0], f"{LOSS} returned Tensor; return (loss, metrics)"),
    "sys-exit": (_raise(SystemExit(3)), f"{LOSS} called sys.exit(3)"),
}
ADVANTAGE_FAULTS = {
    "raises": (_raise(RuntimeError("no groups")), f"{ADVANTAGE} raised RuntimeError: no groups"),
    "nan": (
        lambda r: (r[0] * math.nan, *r[1:]),
        f"step 2: {ADVANTAGE} produced non-finite advantages (NaN or inf)",
    ),
    "wrong-shape": (
        lambda r: (r[0][:1], *r[1:]),
        f"{ADVANTAGE} raised ValueError: advantages of shape (1,)",
    ),
    "sys-exit": (_raise(SystemExit(0)), f"{ADVANTAGE} called sys.exit(0)"),
}


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    register_length_reward()
    CALLS["n"] = 0
    yield
    for kind in ("policy_loss", "advantage_fn"):
        if "faulty" in {r.name for r in registry.list_components(kind)}:
            registry.unregister(kind, "faulty")
    pm = get_plugin_manager()
    for name in ("faulty-hook",):
        if pm.get_plugin(name) is not None:
            pm.unregister(name=name)


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], **algorithm: str) -> tuple[int, str, Path]:
    config = {**CONFIG, "algorithm": {**CONFIG["algorithm"], **algorithm}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    capsys.readouterr()
    code = main(["train", "--config", str(path), "--run-dir", str(tmp_path / "run")])
    return code, capsys.readouterr().err, tmp_path / "run"


def _assert_one_line_and_checkpoint_1_intact(code: int, err: str, run: Path, expected: str) -> None:
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("trinity train: error: ")
    assert expected in lines[0]
    assert lines[0].endswith(f"checkpoint step-000001 is intact: continue with trinity train --resume {run}")
    checkpoints = sorted(p.name for p in (run / "checkpoints").glob("step-*"))
    assert checkpoints == ["step-000001"]
    assert verify_checkpoint(run / "checkpoints" / "step-000001") is None


@pytest.mark.parametrize("fault", LOSS_FAULTS, ids=LOSS_FAULTS.keys())
def test_a_faulty_policy_loss_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fault: str
) -> None:
    make, expected = LOSS_FAULTS[fault]
    registry.register("policy_loss", "faulty", _loss_with(make))
    code, err, run = _run(tmp_path, capsys, policy_loss_fn="faulty")
    _assert_one_line_and_checkpoint_1_intact(code, err, run, expected)


@pytest.mark.parametrize("fault", ADVANTAGE_FAULTS, ids=ADVANTAGE_FAULTS.keys())
def test_a_faulty_advantage_function_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fault: str
) -> None:
    make, expected = ADVANTAGE_FAULTS[fault]
    registry.register("advantage_fn", "faulty", _advantage_with(make))
    code, err, run = _run(tmp_path, capsys, advantage_fn="faulty")
    _assert_one_line_and_checkpoint_1_intact(code, err, run, expected)


HOOK_FAULTS = {
    "empty": (
        "trinity_process_experiences",
        lambda experiences, step: [] if step == 1 else None,
        "trinity_process_experiences of plugin 'faulty-hook' at step 1 dropped every experience of the step",
    ),
    "none-items": (
        "trinity_process_experiences",
        lambda experiences, step: [None] if step == 1 else None,
        "trinity_process_experiences of plugin 'faulty-hook' at step 1 returned a list whose item 0 is "
        "NoneType",
    ),
    "exit-0-in-observer": (
        "trinity_on_metrics",
        lambda step, metrics: sys.exit(0) if step == 2 else None,
        "trinity_on_metrics of plugin 'faulty-hook' after step 2 called sys.exit(0)",
    ),
}


@pytest.mark.parametrize("fault", HOOK_FAULTS, ids=HOOK_FAULTS.keys())
def test_a_faulty_hook_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], fault: str) -> None:
    hook, body, expected = HOOK_FAULTS[fault]
    get_plugin_manager().register(types.SimpleNamespace(**{hook: hookimpl(body)}), name="faulty-hook")
    code, err, run = _run(tmp_path, capsys)
    assert code == 1, err
    line = err.strip()
    assert "\n" not in line
    assert expected in line
    assert (run / "checkpoints" / "step-000001").is_dir()
    assert not (run / "model").exists()  # the run did not end as if it had finished
