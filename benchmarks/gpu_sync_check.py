"""One training step per preset on a GPU with host syncs made errors in the loss and advantage path.

Run: ``python benchmarks/gpu_sync_check.py`` (four one-step runs of the tiny default; not yet timed).
For each of ``grpo`` (advantages in the explorer) and ``ppo`` (GAE in the trainer, a critic), with a k3
KL loss and the entropy loss on, each with ``trainer.mixed_precision`` ``no`` and ``bf16``, it builds
the tiny default run on ``cuda`` and runs one step with
:func:`~trinity_core.testing.host_syncs.strict_loss_path` active: the policy loss, the KL and
entropy losses and the trainer-side advantage run under ``torch.cuda.set_sync_debug_mode("error")`` and with
``Tensor.item`` / ``tolist`` / ``bool()`` / ... refused. Prints ``PASS`` and exits 0 when every step
passed; exits 1 with the first sync's message otherwise. Without a GPU it says so and exits 0 (the CPU
test ``tests/train/test_host_syncs.py`` covers the host reads there).
"""

from __future__ import annotations

import sys

PRESETS = ("grpo", "ppo")


def step_strictly(algorithm: str, mixed_precision: str) -> list[str]:
    """One step of ``algorithm`` on CUDA under the strict loss path; the guarded methods' names."""
    from trinity_core.testing.host_syncs import strict_step

    names, _ = strict_step(
        {
            "algorithm": {"algorithm_type": algorithm, "kl_loss_fn": "k3", "entropy_loss_fn": "default"},
            "rollout": {"prompts_per_step": 4},
            "tasks": {"eval_size": 0},
            "trainer": {
                "device": "cuda",
                "mixed_precision": mixed_precision,
                "progress": False,
                "checkpoint_every": 0,
                "total_steps": 1,
            },
        }
    )
    return names


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print(
            "no CUDA device: nothing to check here (tests/train/test_host_syncs.py checks host reads on CPU)"
        )
        return 0
    from trinity_core.testing.host_syncs import HostSyncError

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for algorithm in PRESETS:
        for precision in ("no", "bf16"):
            try:
                names = step_strictly(algorithm, precision)
            except (HostSyncError, RuntimeError) as exc:
                print(f"FAIL {algorithm} mixed_precision={precision}: {exc}")
                return 1
            print(f"PASS {algorithm} mixed_precision={precision}: no host sync in {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
