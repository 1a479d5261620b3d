"""RL really learns: GRPO on the copy task reaches a mean reward of 0.8 within 200 steps (threshold).

The config is chosen to learn on every seed, measured with one torch thread (load 8-11 on 2 shared
cores; the held-out greedy accuracy on 50 prompts, the first step whose 10-step mean reward reaches 0.8):

| config | seed 0 | seed 1 | seed 2 | seed 3 | seed 4 |
|---|---|---|---|---|---|
| 8 responses, lr 5e-4, 200 steps (before) | 1.0, step 102 | 0.58, 149 | 0.42, 119 | 1.0, 93 | 0.62, never |
| 16 responses, lr 3e-4, 300 steps | 1.0, 83 | 0.74, 84 | 1.0, 82 | 1.0, 88 | 1.0, 95 |
| 16 responses, lr 5e-4, 200 steps (this test) | 1.0, 69 | 1.0, 68 | 1.0, 69 | 1.0, 90 | 1.0, 106 |

Seeds 5-9 of this test's config: 1.0 at step 65, 1.0 / 66, 1.0 / 68, 1.0 / 69, 0.98 / 67. With 8
responses a group of one prompt often agrees (all right or all wrong: no gradient), and a prompt whose
sampled answers collapse onto a wrong one (``ab=`` -> ``a``) stays there: the reward rises to ~0.8, then
falls back (seed 2: 0.81 at step 125, 0.48 at 200). 16 responses keep a wrong answer's group mixed for
longer; at lr 3e-4 a late collapse still happened (seed 1). About 90 s on one thread at load 9.
"""

from __future__ import annotations

from pathlib import Path

from trinity_core.train import train

COPY = {
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 16, "kl_loss_fn": "none"},
    "tasks": {"name": "copy", "args": {"length": 2, "letters": "abc"}, "eval_size": 50},
    "rollout": {"prompts_per_step": 16},
    "trainer": {"total_steps": 200, "lr": 5e-4, "checkpoint_every": 0, "progress": False, "seed": 2},
}


def test_grpo_learns_to_copy(tmp_path: Path) -> None:
    result = train(COPY, run_dir=tmp_path / "copy")
    rewards = [row["reward/mean"] for row in result.history]
    assert sum(rewards[:10]) / 10 < 0.3  # it starts out unable to copy
    best = max(sum(rewards[i : i + 10]) / 10 for i in range(len(rewards) - 9))
    assert best >= 0.8, f"best 10-step mean reward {best:.3f}; curve {result.reward_curve}"
    assert result.eval_accuracy is not None
    assert result.eval_accuracy >= 0.8
