"""Worker for tests/train/test_checkpoint_accelerate.py, run under torchrun with 2 CPU (gloo) ranks.

``worker.py OUT PHASE``: ``straight`` trains an uninterrupted 4-step run into ``OUT/straight``; ``first``
trains 2 steps into ``OUT/resumed`` and ``resume`` continues it to step 4 (checkpoints every 2 steps).
One phase per launch: a run's end destroys the process group (``accelerator.end_training``). In
``first`` rank 1 looks at the run directory slowly: it must not take the files rank 0 writes for the new
run for another run's (a race that once failed a launch now and then).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from reliability_driver import register_length_reward

CONFIG: dict[str, Any] = {
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none"},
    "rollout": {"prompts_per_step": 4},
    # Rewards that vary between responses, so that every step changes the weights.
    "tasks": {"eval_size": 0, "reward_fns": ["length_reward"]},
    "trainer": {
        "total_steps": 4,
        "checkpoint_every": 2,
        "keep_checkpoints": 2,
        "progress": False,
        "threads": 1,
        "micro_batch_size": 2,
    },
    "model": {
        "config": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "num_hidden_layers": 1,
        }
    },
}


def main(out: Path, phase: str) -> None:
    from trinity_core.train import train

    register_length_reward()
    if phase == "straight":
        train(CONFIG, run_dir=out / "straight")
    elif phase == "first":
        if os.environ.get("RANK") == "1":
            _look_slowly()
        train(CONFIG, overrides=["trainer.total_steps=2"], run_dir=out / "resumed")
    else:
        train(None, resume=out / "resumed", overrides=["trainer.total_steps=4"])


def _look_slowly() -> None:
    """Make this rank's checks of the run directory late, after rank 0 has had time to write into it."""
    from trinity_core.train.checkpoints import run_dir as checks

    holds_files = checks.holds_files

    def late(run_dir: Path) -> bool:
        time.sleep(1.0)
        return holds_files(run_dir)

    checks.holds_files = late  # type: ignore[assignment]


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
