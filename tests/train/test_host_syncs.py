"""The loss and advantage path reads no tensor value on the host (``trinity_core.testing.host_syncs``).

On CPU nothing synchronises, but the usual ways a sync creeps in (``item``, ``tolist``, ``bool()``,
``float()``) are refused inside the guarded methods, so that a regression fails here before a GPU run
(``benchmarks/gpu_sync_check.py``) would catch it.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from trinity_core.testing.host_syncs import HOST_READS, HostSyncError, strict_loss_path, strict_step


def one_step(algorithm: str) -> tuple[list[str], dict[str, Any]]:
    """One step of the tiny default run of ``algorithm`` (k3 KL and entropy losses on) under the strict
    loss path; the guarded methods and the step's metrics."""
    return strict_step(
        {
            "algorithm": {"algorithm_type": algorithm, "kl_loss_fn": "k3", "entropy_loss_fn": "default"},
            "rollout": {"prompts_per_step": 2},
            "tasks": {"eval_size": 0},
            "trainer": {"progress": False, "threads": 1, "checkpoint_every": 0, "total_steps": 1},
        }
    )


@pytest.mark.parametrize(
    ("algorithm", "guarded"),
    [
        # GRPO's advantages are computed in the explorer on host-side experiences: not guarded.
        ("grpo", ["PPOPolicyLossFn.__call__", "K3Fn.calculate_kl_loss", "DefaultEntropyLossFn.__call__"]),
        (
            "ppo",
            [
                "PPOPolicyLossFn.__call__",
                "K3Fn.calculate_kl_loss",
                "DefaultEntropyLossFn.__call__",
                "PPOAdvantageFn.__call__",
            ],
        ),
    ],
)
def test_a_training_step_reads_no_tensor_on_the_host_in_losses_and_advantages(
    algorithm: str, guarded: list[str]
) -> None:
    names, metrics = one_step(algorithm)
    assert names == guarded
    assert torch.isfinite(torch.as_tensor(metrics["actor/loss"]))
    # The guards are gone after the block.
    assert torch.ones(()).item() == 1.0


class ReadsOnHost:
    """A policy loss that syncs: it turns its mean into a Python float."""

    def __call__(self, logprob: torch.Tensor) -> float:
        return float(logprob.mean())


@pytest.mark.parametrize("read", ["item", "tolist", "bool", "float"])
def test_a_host_read_in_a_guarded_loss_is_an_error_naming_it(read: str) -> None:
    calls = {
        "item": lambda t: t.sum().item(),
        "tolist": lambda t: t.tolist(),
        "bool": lambda t: bool(t.sum() > 0),
        "float": lambda t: float(t.sum()),
    }

    class Loss:
        def __call__(self, logprob: torch.Tensor) -> Any:
            return calls[read](logprob)

    comps = SimpleNamespace(
        policy_loss=Loss(), kl_loss=None, entropy=None, advantage=ReadsOnHost(), advantage_in_trainer=False
    )
    x = torch.ones(3)
    with strict_loss_path(comps) as names, pytest.raises(HostSyncError, match=r"Loss\.__call__"):
        comps.policy_loss(x)
    assert names == ["Loss.__call__"]  # an explorer-side advantage is not guarded
    assert calls[read](x) is not None  # restored afterwards
    assert all(getattr(torch.Tensor, name) is not None for name in HOST_READS)
