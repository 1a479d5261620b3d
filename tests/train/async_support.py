"""Reward functions for the mode-async fault tests: each misbehaves at its second call (explorer step 1);
and the two ranks of the weights-broadcast test.

They are registered in the test process; mode ``async`` carries picklable registrations to the explorer
process, where they run, so the faults happen in the explorer process.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import torch

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


def broadcast_weights() -> dict[str, torch.Tensor]:
    """Weights of several dtypes and shapes (an empty one too) for the broadcast test."""
    gen = torch.Generator().manual_seed(5)
    return {
        "embed.weight": torch.randn(5, 3, generator=gen),
        "norm.weight": torch.randn(4, generator=gen).to(torch.bfloat16),
        "layer.bias": torch.randn(3, generator=gen),
        "steps": torch.tensor([7], dtype=torch.int64),
        "empty": torch.zeros(0, 2),
    }


def broadcast_rank(rank: int, store: str, out: str) -> None:
    """Rank ``rank`` of a 2-process gloo group: rank 0 sends :func:`broadcast_weights`, rank 1 saves what
    arrives in ``out``."""
    import torch.distributed as dist
    from safetensors.torch import save_file

    from trinity_core.train.modes.groups import broadcast_state

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        got = broadcast_state(
            broadcast_weights() if rank == 0 else None, dist.group.WORLD, torch.device("cpu")
        )
        if rank == 1:
            save_file({k: v.contiguous() for k, v in got.items()}, out)
    finally:
        dist.destroy_process_group()
