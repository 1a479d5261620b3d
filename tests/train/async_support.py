"""Reward functions for the mode-async fault tests: each misbehaves at its second call (explorer step 1).

They are registered in the test process; mode ``async`` carries picklable registrations to the explorer
process, where they run, so the faults happen in the explorer process.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

_calls: dict[str, int] = {}


def _second_call(name: str) -> bool:
    _calls[name] = _calls.get(name, 0) + 1
    return _calls[name] == 2


def failing_reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """Raises at its second call, as a reward service that goes down."""
    if _second_call("failing"):
        raise ValueError("the reward service is down")
    return [len(c) / 8 for c in completions]


def killed_reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """``kill -9`` of its own process at its second call."""
    if _second_call("killed"):
        os.kill(os.getpid(), signal.SIGKILL)
    return [len(c) / 8 for c in completions]


def stalling_reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """Hangs at its second call, as a reward service that never answers."""
    if _second_call("stalling"):
        time.sleep(3600)
    return [len(c) / 8 for c in completions]


def register_fault_rewards() -> None:
    """Make the four rewards available to ``tasks.reward_fns`` in this process."""
    from trinity_core import registry

    for fn in (failing_reward, killed_reward, stalling_reward, killed_once_reward):
        registry.register("reward_fn", fn.__name__, fn, replace=True)


def killed_once_reward(
    prompts: list[str], completions: list[str], *, marker: str, **kwargs: Any
) -> list[float]:
    """``kill -9`` of its own process at its second call, once in the whole run: the first process to get
    there creates the file ``marker`` (``tasks.reward_fn_args``); a restarted explorer finds it and
    carries on."""
    if _second_call("killed_once"):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            os.kill(os.getpid(), signal.SIGKILL)
    return [len(c) / 8 for c in completions]
