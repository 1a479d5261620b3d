"""The PPO critic: the ``ppo`` preset learns the embedded default task with GAE on the critic's values."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from trinity_core.cli.main import main
from trinity_core.config import ConfigError, resolve_config
from trinity_core.train import train
from trinity_core.train.learner.critic import critic_model, explained_variance, response_values
from trinity_core.train.models.policy import tiny_model

SMALL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
}

# The embedded default task (last digit of a+b, exact_match) with a smaller model and batch.
PPO: dict[str, Any] = {
    "algorithm": {"algorithm_type": "ppo", "repeat_times": 8},
    "tasks": {"name": "last_digit", "reward_fns": ["exact_match"], "eval_size": 0},
    "rollout": {"prompts_per_step": 16},
    "critic": {"lr": 5e-3},
    "trainer": {"total_steps": 40, "lr": 5e-3, "checkpoint_every": 0, "progress": False, "threads": 1},
    "model": {"config": SMALL},
}


def _mean(xs: list[float]) -> float:
    kept = [x for x in xs if not math.isnan(x)]
    assert kept, "no defined value"
    return sum(kept) / len(kept)


def test_ppo_learns_the_default_task_and_its_critic_explains_more(tmp_path: Path) -> None:
    result = train(PPO, run_dir=tmp_path / "ppo")
    rewards = [row["reward/mean"] for row in result.history]
    ev = [row["critic/explained_variance"] for row in result.history]
    assert _mean(rewards[:10]) < 0.02  # a random policy almost never answers right
    assert _mean(rewards[-10:]) > _mean(rewards[:10]) + 0.05, result.reward_curve
    # The value head starts random, worse than a constant (negative EV), and is fitted to the returns:
    # -0.009 over the first 20 steps, +0.001 over the last 20. On this task the return is hardly
    # predictable from the state until the policy knows the sum, so a critic reaches about 0 (the mean
    # return) early on; NaN steps (every reward 0, nothing to explain) are left out.
    early, late = _mean(ev[:20]), _mean(ev[20:])
    assert early < -0.005, ev
    assert late > early + 0.005, ev
    for key in ("critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm"):
        assert all(math.isfinite(row[key]) for row in result.history), key


def test_warmup_trains_only_the_critic_and_export_is_the_policy(tmp_path: Path) -> None:
    config = {**PPO, "critic": {"warmup_steps": 2}, "trainer": {**PPO["trainer"], "total_steps": 2}}
    result = train(config, run_dir=tmp_path / "warm")
    assert all("actor/loss" not in row and "critic/vf_loss" in row for row in result.history)
    step = tmp_path / "warm" / "checkpoints" / "step-000002"
    policy = load_file(str(step / "model.safetensors"))
    initial = tiny_model(len(policy["model.embed_tokens.weight"]), SMALL, seed=0).state_dict()
    for name, tensor in policy.items():
        torch.testing.assert_close(tensor, initial[name], rtol=0, atol=0, msg=name)
    critic = load_file(str(step / "model_1.safetensors"))  # Accelerate's name for the second model
    assert critic["score.weight"].shape == (1, SMALL["hidden_size"])
    assert not torch.equal(critic["model.embed_tokens.weight"], initial["model.embed_tokens.weight"])
    assert main(["export", str(tmp_path / "warm"), str(tmp_path / "exported")]) == 0
    for out in (tmp_path / "warm" / "model", tmp_path / "exported"):  # model/ and trinity export
        exported = load_file(str(out / "model.safetensors"))
        assert exported.keys() == policy.keys()  # the policy only: no value head, no critic
        for name, tensor in exported.items():
            torch.testing.assert_close(tensor, policy[name], rtol=0, atol=0, msg=name)


def test_default_critic_is_the_policy_with_a_value_head() -> None:
    policy = tiny_model(16, SMALL, seed=3)
    critic = critic_model(policy, None, seed=0)
    for name, tensor in policy.model.state_dict().items():
        assert torch.equal(critic.model.state_dict()[name], tensor), name
    ids = torch.randint(3, 16, (2, 7))
    values = response_values(critic, ids, None, 4)
    assert values.shape == (2, 3)
    assert values.dtype == torch.float32
    again = critic_model(policy, None, seed=0)
    assert torch.equal(again.score.weight, critic.score.weight)  # seeded head, same run after run


def test_critic_path_loads_a_saved_value_model(tmp_path: Path) -> None:
    saved = critic_model(tiny_model(16, SMALL, seed=1), None, seed=5)
    saved.save_pretrained(tmp_path / "critic")
    loaded = critic_model(tiny_model(16, SMALL, seed=2), str(tmp_path / "critic"), seed=0)
    assert torch.equal(loaded.score.weight, saved.score.weight)
    with pytest.raises(ValueError, match=r"model.critic_path: cannot load .*unset critic_path"):
        critic_model(saved, str(tmp_path / "missing"), seed=0)


def test_explained_variance_golden() -> None:
    g = torch.tensor([[1.0, 2.0, 3.0, 99.0]])
    mask = torch.tensor([[True, True, True, False]])
    # Var(G) = 1 (unbiased); V = G - [0, 1, 2] -> G - V = [0, 1, 2], Var = 1: EV = 0.
    assert explained_variance(g - torch.tensor([[0.0, 1.0, 2.0, 0.0]]), g, mask).item() == 0.0
    assert explained_variance(g, g, mask).item() == 1.0
    # V = 0.5 G: Var(0.5 G) = 0.25 -> EV 0.75.
    assert explained_variance(0.5 * g, g, mask).item() == pytest.approx(0.75)
    assert math.isnan(explained_variance(g, torch.ones_like(g), mask).item())  # nothing to explain


def test_value_loss_defaults_follow_use_critic() -> None:
    assert resolve_config({"algorithm": {"algorithm_type": "ppo"}}).algorithm.value_loss_fn == "clipped"
    assert resolve_config({"algorithm": {"algorithm_type": "grpo"}}).algorithm.value_loss_fn is None
    chosen = resolve_config({"algorithm": {"algorithm_type": "ppo", "value_loss_fn": "mse"}})
    assert chosen.algorithm.value_loss_fn == "mse"
    bad = {"algorithm_type": "ppo", "value_loss_fn_args": {"cliprange_value": -1}}
    with pytest.raises(ConfigError, match=r"algorithm\.value_loss_fn_args\.cliprange_value"):
        resolve_config({"algorithm": bad})


def test_a_critic_without_a_value_loss_or_trainer_side_advantage_is_refused() -> None:
    # Unreachable from a config file (resolution fills both in); a preset's check_config could clear them.
    from trinity_core.buffer import make_buffer
    from trinity_core.train.build import build_components

    writer = make_buffer("memory").writer
    resolved = resolve_config({"algorithm": {"algorithm_type": "ppo"}})
    assert build_components(resolved, writer).value_loss is not None
    resolved.algorithm.value_loss_fn = None
    with pytest.raises(ConfigError, match=r"algorithm\.value_loss_fn: .* needs a value loss"):
        build_components(resolved, writer)
    resolved = resolve_config({"algorithm": {"algorithm_type": "ppo"}})
    resolved.algorithm.advantage_fn, resolved.algorithm.add_strategy = None, "grpo"
    with pytest.raises(ConfigError, match=r"algorithm\.advantage_fn: .* trains a critic"):
        build_components(resolved, writer)
    assert build_components(resolved, writer, offline=True).value_loss is None  # mode train: no critic


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_critic_update_does_not_depend_on_micro_batches(mode: str) -> None:
    # One SGD step on 6 rows: the whole minibatch, or micro-batches of 2 under the step's global
    # normalizers, give the same critic.
    from accelerate import Accelerator

    from trinity_core import registry
    from trinity_core.train.learner.critic import Critic
    from trinity_core.train.report.profile import StepProfiler

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 16, (6, 9), generator=gen)
    mask = torch.rand((6, 5), generator=gen) > 0.3
    columns = {
        "action_mask": mask,
        "values": torch.randn((6, 5), generator=gen),
        "returns": torch.randn((6, 5), generator=gen),
    }
    critics = []
    for micro in (None, 2):
        config = resolve_config(
            {
                "algorithm": {"algorithm_type": "ppo", "loss_agg_mode": mode},
                "trainer": {"optimizer": "sgd", "lr": 0.1, "micro_batch_size": micro},
                "critic": {"grad_clip": None},
            }
        )
        loss = registry.create("value_loss", "clipped", {"cliprange_value": 0.2})
        model = critic_model(tiny_model(16, SMALL, seed=0), None, seed=0)
        critic = Critic(config, Accelerator(cpu=True), model, loss, StepProfiler(False, torch.device("cpu")))
        metrics = critic.update(ids, None, 4, columns, 6)
        assert math.isfinite(float(metrics["critic/vf_loss"]))
        critics.append(critic.module.state_dict())
    initial = critic_model(tiny_model(16, SMALL, seed=0), None, seed=0).state_dict()
    assert not torch.equal(critics[0]["score.weight"], initial["score.weight"])  # the step moved it
    for name, tensor in critics[0].items():
        torch.testing.assert_close(critics[1][name], tensor, rtol=1e-5, atol=1e-7, msg=name)
