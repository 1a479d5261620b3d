"""Tests of the component contracts (trinity_core.components): args, algorithm types, advantages, add
strategies, policy losses, KL and entropy losses. Concrete components here are tiny test-local examples;
the real ones are plugins."""

from __future__ import annotations

import asyncio
import math
import typing
from typing import Any

import pydantic
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from trinity_core.buffer import make_buffer
from trinity_core.components import (
    KIND_BASES,
    AdvantageFn,
    AlgorithmType,
    ComponentArgs,
    EntropyLossFn,
    GroupAdvantage,
    GroupAdvantageStrategy,
    KLFn,
    LossAggArgs,
    LossAggMode,
    PolicyLossFn,
    aggregate_metrics,
    materialize_metrics,
)
from trinity_core.experience import EID, Experience
from trinity_core.ops import LOSS_AGG_MODES, global_normalizers

# ---------------------------------------------------------------------------------------------------
# helpers and test-local components


def make_exp(task: int | str, run: int, reward: float, response: int = 3, batch: int = 0) -> Experience:
    return Experience(
        eid=EID(batch=batch, task=task, run=run),
        tokens=list(range(2 + response)),
        prompt_length=2,
        reward=reward,
        logprobs=[-0.5] * response,
    )


class SeedStyleGRPO(GroupAdvantage):
    """GRPO written purely against trinity-rft's per-group API: A_i = (r_i - mean) / (std_u + eps)."""

    class Args(ComponentArgs):
        epsilon: float = Field(1e-6, gt=0, description="Added to the std.")

    epsilon: float

    def calculate_group_advantage(self, group_id, exps, precomputed_std=None):
        rewards = torch.tensor([e.reward for e in exps], dtype=torch.float64)
        mean = rewards.mean()
        std = rewards.std() if len(exps) > 1 else torch.tensor(1.0, dtype=torch.float64)
        for exp, r in zip(exps, rewards, strict=True):
            score = float((r - mean) / (std + self.epsilon))
            exp.advantages = score * exp.action_mask.float()
            exp.returns = exp.advantages.clone()
        return exps, {"reward_mean": mean, "reward_std": std}


class VectorGRPO(SeedStyleGRPO):
    """The same GRPO with a vectorized path; drops groups whose reward std is <= drop_std_below."""

    class Args(SeedStyleGRPO.Args):
        drop_std_below: float = Field(-1.0, description="Drop groups with std <= this.")

    drop_std_below: float

    def calculate_group_advantage(self, group_id, exps, precomputed_std=None):
        kept, metrics = super().calculate_group_advantage(group_id, exps)
        if float(metrics["reward_std"]) <= self.drop_std_below:
            return [], metrics
        return kept, metrics

    def process_batch(self, batch):
        index = batch.group_index["task"]
        groups = batch.num_groups["task"]
        counts = torch.bincount(index, minlength=groups).to(torch.float64)
        mean = torch.zeros(groups, dtype=torch.float64).index_add_(0, index, batch.rewards) / counts
        dev = batch.rewards - mean[index]
        var = torch.zeros(groups, dtype=torch.float64).index_add_(0, index, dev * dev) / (
            counts - 1
        ).clamp_min(1)
        std = torch.where(counts > 1, var.sqrt(), torch.ones_like(var))
        scores = dev / (std[index] + self.epsilon)
        keep = std[index] > self.drop_std_below
        metrics = {
            "group_advantages/reward_mean/mean": mean.mean(),
            "group_advantages/reward_mean/max": mean.max(),
            "group_advantages/reward_mean/min": mean.min(),
            "group_advantages/reward_std/mean": std.mean(),
            "group_advantages/reward_std/max": std.max(),
            "group_advantages/reward_std/min": std.min(),
        }
        return scores, metrics, keep


class PPOLike(PolicyLossFn):
    """PPO-clip: L = max(-A r, -A clip(r, 1-eps, 1+eps)), r = exp(logp - old)."""

    class Args(LossAggArgs):
        clip_range: float = Field(0.2, gt=0, description="Clip epsilon.")

    clip_range: float

    def __call__(self, logprob, old_logprob, action_mask, advantages, **kwargs):
        ratio = torch.exp((logprob - old_logprob).clamp(-20, 20))
        clipped = ratio.clamp(1 - self.clip_range, 1 + self.clip_range)
        per_token = torch.maximum(-advantages * ratio, -advantages * clipped)
        loss = self.aggregate(per_token, action_mask)
        return loss, {"pg_loss": loss, "ratio_mean": ratio.mean()}


class WideClipPPO(PPOLike):
    """Inherits __call__; only changes a default (the reference requires ``__call__`` in every subclass
    body: reference-differences.md#policy-loss-inputs)."""

    class Args(PPOLike.Args):
        clip_range: float = Field(0.5, gt=0, description="Clip epsilon.")


class MixLike(PPOLike):
    """Adds a tensor the trainer must provide."""

    def __call__(self, logprob, old_logprob, action_mask, advantages, expert_mask, **kwargs):
        loss, metrics = super().__call__(logprob, old_logprob, action_mask, advantages)
        return loss + 0.0 * expert_mask.sum(), metrics


class K1(KLFn):
    """k1 = logp - ref."""

    def calculate_kl(self, logprob, ref_logprob, old_logprob=None):
        return logprob - ref_logprob


class SimpleEntropy(EntropyLossFn):
    """entropy_coef * agg(H)."""

    def __call__(self, entropy, action_mask, **kwargs):
        value = self.aggregate(entropy, action_mask)
        return value * self.entropy_coef, {"entropy_loss": value}


class GroupWriter(GroupAdvantageStrategy):
    """Add strategy version of :class:`SeedStyleGRPO` (trinity-rft's per-group API)."""

    def calculate_group_advantage(self, group_id, exps):
        return SeedStyleGRPO().calculate_group_advantage(group_id, exps)


def toy_algorithm(**overrides: Any) -> type[AlgorithmType]:
    body: dict[str, Any] = {
        "__doc__": "Toy algorithm.\n\nMore text.",
        "use_critic": False,
        "use_reference": True,
        "compute_advantage_in_trainer": False,
        "can_balance_batch": True,
        "schema": "experience",
        "default_config": classmethod(lambda cls: {"repeat_times": 4, "advantage_fn": "grpo"}),
    }
    body.update(overrides)
    return type("ToyAlgorithm", (AlgorithmType,), body)


# ---------------------------------------------------------------------------------------------------
# algorithm types


def test_algorithm_flags_and_write_once_constants():
    algo = toy_algorithm()
    assert (algo.use_critic, algo.use_reference, algo.schema) == (False, True, "experience")
    assert algo.default_config() == {"repeat_times": 4, "advantage_fn": "grpo"}
    assert algo.check_config(object()) is None
    assert algo.summary() == "Toy algorithm."
    with pytest.raises(AttributeError, match="cannot be reassigned"):
        algo.use_critic = True
    with pytest.raises(AttributeError):
        del algo.schema
    assert algo.use_critic is False


def test_algorithm_name_is_registered_name_not_inherited():
    algo = toy_algorithm()
    assert algo.name() == "ToyAlgorithm"
    algo._name = "toy"
    algo._name = "toy2"  # the registry may re-register (private names are not constants)
    assert algo.name() == "toy2"
    child = type("Child", (algo,), {})
    assert child.name() == "Child"


def test_algorithm_missing_flag_or_unknown_config_key_is_rejected_at_definition():
    body = {
        "use_reference": True,
        "compute_advantage_in_trainer": False,
        "can_balance_batch": True,
        "schema": "experience",
        "default_config": classmethod(lambda cls: {}),
    }
    with pytest.raises(TypeError, match="missing class constant use_critic"):
        type("NoCritic", (AlgorithmType,), body)
    with pytest.raises(TypeError, match="schema must be a str"):
        toy_algorithm(schema=3)
    with pytest.raises(TypeError, match=r"unknown keys \['sample_strategy'\]"):
        toy_algorithm(default_config=classmethod(lambda cls: {"sample_strategy": "warmup"}))


def test_kind_bases_cover_contract():
    assert set(KIND_BASES) == {
        "algorithm",
        "advantage_fn",
        "add_strategy",
        "policy_loss",
        "kl_fn",
        "entropy_loss",
        "value_loss",
        "workflow",
        "task_selector",
        "operator",
        "priority_fn",
        "tool_parser",
    }
    for kind, bases in KIND_BASES.items():
        for base in bases:
            assert base.kind == kind


# ---------------------------------------------------------------------------------------------------
# args


def test_default_args_derive_from_args_model():
    assert PPOLike.default_args() == {"loss_agg_mode": "token-mean", "clip_range": 0.2}
    assert WideClipPPO.default_args() == {"loss_agg_mode": "token-mean", "clip_range": 0.5}
    assert K1.default_args() == {
        "adaptive": False,
        "kl_coef": 0.001,
        "target_kl": None,
        "horizon": None,
        "loss_agg_mode": None,
    }
    assert SimpleEntropy.default_args() == {"entropy_coef": 0.0, "loss_agg_mode": None}
    assert GroupAdvantage.default_args() == {}


def test_unknown_keys_and_bad_values_are_rejected():
    with pytest.raises(pydantic.ValidationError, match="clip_rnage"):
        PPOLike.validate_args({"clip_rnage": 0.3})
    with pytest.raises(pydantic.ValidationError, match="clip_rnage"):
        PPOLike(clip_rnage=0.3)
    with pytest.raises(pydantic.ValidationError, match="clip_range"):
        PPOLike.validate_args({"clip_range": -1})
    with pytest.raises(pydantic.ValidationError, match="loss_agg_mode"):
        PPOLike.validate_args({"loss_agg_mode": "token_sum"})


def test_user_args_merge_per_key_over_defaults():
    args = PPOLike.validate_args({"loss_agg_mode": "seq-mean-token-mean"})
    assert args.model_dump() == {"loss_agg_mode": "seq-mean-token-mean", "clip_range": 0.2}
    loss = PPOLike.from_args({"clip_range": 0.3}, backend="tinker")
    assert (loss.clip_range, loss.loss_agg_mode, loss.backend) == (0.3, "token-mean", "tinker")
    assert loss.args.clip_range == 0.3


def test_seed_style_component_with_hand_written_default_args():
    class LegacyAdvantage(GroupAdvantage):
        def __init__(self, epsilon: float = 1e-6, tau: float = 1.0, **kwargs):
            super().__init__(epsilon=epsilon, tau=tau, **kwargs)

        @classmethod
        def default_args(cls):
            return {"epsilon": 1e-6, "tau": 1.0}

        def calculate_group_advantage(self, group_id, exps, precomputed_std=None):
            return exps, {}

    assert LegacyAdvantage.validate_args({"tau": 2.0}).model_dump() == {"epsilon": 1e-6, "tau": 2.0}
    with pytest.raises(pydantic.ValidationError, match="typo"):
        LegacyAdvantage.validate_args({"typo": 1})
    built = LegacyAdvantage.from_args({"tau": 0.5})
    assert (built.epsilon, built.tau) == (1e-6, 0.5)


def test_name_and_summary():
    assert PPOLike.name() == "PPOLike"
    assert PPOLike.summary().startswith("PPO-clip")
    PPOLike._name = "ppo_like"
    try:
        assert PPOLike.name() == "ppo_like"
        assert WideClipPPO.name() == "WideClipPPO"
    finally:
        del PPOLike._name


# ---------------------------------------------------------------------------------------------------
# group advantages


def test_seed_per_group_subclass_works_through_process():
    exps = [
        make_exp(0, 0, 1.0),
        make_exp(1, 0, 5.0),
        make_exp(0, 1, 3.0),
        make_exp(1, 1, 5.0),
        make_exp(2, 0, 2.0),
    ]
    fn = SeedStyleGRPO()
    assert fn.compute_in_trainer() is False
    assert fn.supports_batch is False
    out, metrics = fn(exps)
    # grouped by task, groups in first-appearance order
    assert [(e.eid.task, e.eid.run) for e in out] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
    std0 = math.sqrt(2.0)  # rewards 1, 3: mean 2, unbiased std sqrt(2)
    expected = [-1 / (std0 + 1e-6), 1 / (std0 + 1e-6), 0.0, 0.0, 0.0]  # singleton: r - mean = 0
    for exp, value in zip(out, expected, strict=True):
        torch.testing.assert_close(exp.advantages, torch.full((3,), value, dtype=torch.float32))
        torch.testing.assert_close(exp.returns, exp.advantages)
    values = materialize_metrics(metrics)
    assert values["group_advantages/reward_mean/mean"] == pytest.approx((2 + 5 + 2) / 3)
    assert values["group_advantages/reward_mean/max"] == 5.0
    assert values["group_advantages/reward_std/min"] == 0.0
    assert fn.process([]) == ([], {})


def test_vectorized_path_matches_per_group_path_with_filtering():
    def build():
        return [
            make_exp(t, r, 1.0 if t == 1 else float((t * 7 + r * 3) % 4), response=2 + r)
            for r in range(3)
            for t in range(3)
        ]

    vec = VectorGRPO(drop_std_below=0.0)
    per_group = VectorGRPO(drop_std_below=0.0)
    assert vec.supports_batch is True
    a, ma = vec.process(build())
    b, mb = per_group.process_per_group(build())
    assert [(e.eid.task, e.eid.run) for e in a] == [(e.eid.task, e.eid.run) for e in b]
    assert [e.eid.task for e in a] == [0, 0, 0, 2, 2, 2]  # the zero-variance group 1 was dropped
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x.advantages, y.advantages)
    fa, fb = materialize_metrics(ma), materialize_metrics(mb)
    assert fa.keys() == fb.keys()
    for key in fa:
        assert fa[key] == pytest.approx(fb[key])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.floats(-5, 5, allow_nan=False), st.integers(1, 4)),
        min_size=1,
        max_size=12,
    )
)
def test_vectorized_and_per_group_agree(rows):
    def build():
        return [
            make_exp(task, run, reward, response=length) for run, (task, reward, length) in enumerate(rows)
        ]

    a, _ = VectorGRPO().process(build())
    b, _ = VectorGRPO().process_per_group(build())
    assert [(e.eid.task, e.eid.run) for e in a] == [(e.eid.task, e.eid.run) for e in b]
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x.advantages, y.advantages, rtol=1e-5, atol=1e-5)
        assert x.advantages.shape == (x.response_length,)


def test_multi_turn_mask_zeroes_non_action_tokens():
    exps = [
        Experience(
            eid=EID(task=0, run=0), tokens=[1, 2, 3, 4], prompt_length=1, reward=1.0, action_mask=[1, 0, 1]
        ),
        Experience(
            eid=EID(task=0, run=1), tokens=[1, 2, 3, 4], prompt_length=1, reward=0.0, action_mask=[0, 1, 1]
        ),
    ]
    out, _ = VectorGRPO().process(exps)
    score = 0.5 / (math.sqrt(0.5) + 1e-6)
    torch.testing.assert_close(out[0].advantages, torch.tensor([score, 0.0, score]))
    torch.testing.assert_close(out[1].advantages, torch.tensor([0.0, -score, -score]))


def test_advantage_fn_base_defaults():
    class TrainerSide(AdvantageFn):
        def __call__(self, exps, **kwargs):
            return exps, {}

    assert TrainerSide.compute_in_trainer() is True
    assert TrainerSide.required_fields == ("reward",)


def test_aggregate_metrics_suffixes():
    metrics = aggregate_metrics(
        [
            {"a": 1.0, "n:sum": 2, "x:last": 1.0, "text": "skip"},
            {"a": torch.tensor(3.0), "n:sum": 5, "x:last": 7.0},
        ],
        "p",
    )
    assert materialize_metrics(metrics) == {
        "p/a/mean": 2.0,
        "p/a/max": 3.0,
        "p/a/min": 1.0,
        "p/n/sum": 7.0,
        "p/x/last": 7.0,
    }
    assert aggregate_metrics([], "p") == {}
    with pytest.raises(ValueError, match="median"):
        aggregate_metrics([{"a:median": 1.0}], "p")


# ---------------------------------------------------------------------------------------------------
# add strategies


def test_group_add_strategy_writes_through_writer():
    writer, reader = make_buffer("memory")
    strategy = GroupWriter.from_args({}, writer=writer)
    exps = [make_exp(t, r, float(r)) for t in range(3) for r in range(5)]
    count, metrics = asyncio.run(strategy.add(exps, step=1))
    assert count == 15
    values = materialize_metrics(metrics)
    assert values["group_advantages/reward_mean/mean"] == pytest.approx(2.0)
    assert values["group_advantages/reward_std/mean"] == pytest.approx(torch.arange(5.0).std().item())
    stored = asyncio.run(reader.read())
    assert [(e.eid.task, e.eid.run) for e in stored] == [(t, r) for t in range(3) for r in range(5)]
    assert all(e.advantages is not None for e in stored)
    assert asyncio.run(strategy.add([], step=2)) == (0, {})


# ---------------------------------------------------------------------------------------------------
# policy losses


def loss_inputs(batch: int = 3, width: int = 5, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, width, generator=gen) > 0.3
    mask[:, 0] = True
    return {
        "logprob": -torch.rand(batch, width, generator=gen),
        "old_log_probs": -torch.rand(batch, width, generator=gen),
        "response_mask": mask,
        "advantages": torch.randn(batch, width, generator=gen),
    }


def test_loss_agg_mode_literal_matches_ops():
    assert typing.get_args(LossAggMode) == LOSS_AGG_MODES


def test_select_keys_map_to_backend_names_and_inherit():
    assert PPOLike().select_keys == ["old_log_probs", "response_mask", "advantages"]
    assert PPOLike(backend="tinker").select_keys == ["old_logprob", "action_mask", "advantages"]
    assert WideClipPPO().select_keys == ["old_log_probs", "response_mask", "advantages"]
    assert MixLike().select_keys == ["old_log_probs", "response_mask", "advantages", "expert_mask"]
    with pytest.raises(ValueError, match="unknown backend 'megatron'"):
        PPOLike(backend="megatron")


def test_subclass_inheriting_call_works_with_its_own_defaults():
    inputs = loss_inputs()
    inputs["unrelated_batch_key"] = torch.zeros(1)  # dropped: not asked for
    narrow, _ = PPOLike()(**inputs)
    wide, metrics = WideClipPPO()(**inputs)
    assert WideClipPPO().clip_range == 0.5
    # by hand, token-mean: mean over selected tokens of max(-A r, -A clip(r))
    r = torch.exp(inputs["logprob"] - inputs["old_log_probs"])
    a, m = inputs["advantages"], inputs["response_mask"]
    for loss, eps in ((narrow, 0.2), (wide, 0.5)):
        per_token = torch.maximum(-a * r, -a * r.clamp(1 - eps, 1 + eps))
        torch.testing.assert_close(loss, per_token[m].mean())
    assert not metrics["pg_loss"].requires_grad


def test_trinity_names_and_positional_calls_work():
    inputs = loss_inputs()
    by_verl, _ = PPOLike()(**inputs)
    by_trinity, _ = PPOLike()(
        logprob=inputs["logprob"],
        old_logprob=inputs["old_log_probs"],
        action_mask=inputs["response_mask"],
        advantages=inputs["advantages"],
    )
    positional, _ = PPOLike()(
        inputs["logprob"], inputs["old_log_probs"], inputs["response_mask"], inputs["advantages"]
    )
    torch.testing.assert_close(by_verl, by_trinity)
    torch.testing.assert_close(by_verl, positional)
    mixed, _ = MixLike()(**inputs, expert_mask=torch.zeros(3, dtype=torch.bool))
    torch.testing.assert_close(mixed, by_verl)


def test_metrics_are_detached_and_gradient_flows():
    inputs = loss_inputs()
    logprob = inputs.pop("logprob").requires_grad_(True)
    loss, metrics = PPOLike()(logprob=logprob, **inputs)
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad for v in metrics.values())
    loss.backward()
    assert logprob.grad is not None
    assert torch.all(logprob.grad[~inputs["response_mask"]] == 0)


def test_loss_agg_mode_and_global_normalizer_plumbing():
    inputs = loss_inputs()
    r = torch.exp(inputs["logprob"] - inputs["old_log_probs"])
    a, m = inputs["advantages"], inputs["response_mask"]
    per_token = torch.maximum(-a * r, -a * r.clamp(0.8, 1.2)) * m
    seq, _ = PPOLike(loss_agg_mode="seq-mean-token-mean")(**inputs)
    torch.testing.assert_close(seq, (per_token.sum(-1) / m.sum(-1)).mean())
    # A global token count (e.g. two micro-batches of which this is one) divides the local sum.
    scale = global_normalizers([m, m])
    scaled, _ = PPOLike()(**inputs, loss_scale=scale)
    torch.testing.assert_close(scaled, per_token.sum() / (2 * m.sum()))
    # the context does not leak into the next call
    plain, _ = PPOLike()(**inputs)
    torch.testing.assert_close(plain, per_token.sum() / m.sum())


# ---------------------------------------------------------------------------------------------------
# KL


def test_adaptive_kl_requires_target_and_horizon():
    with pytest.raises(pydantic.ValidationError, match="target_kl and horizon"):
        K1(adaptive=True)
    with pytest.raises(pydantic.ValidationError):
        K1(kl_coef=-0.1)


def test_adaptive_controller_math_by_hand():
    kl = K1(adaptive=True, kl_coef=0.1, target_kl=0.5, horizon=100)
    # KL 0.6: e = 0.6/0.5 - 1 = 0.2 -> beta = 0.1 * (1 + 0.2 * 10 / 100) = 0.102
    assert float(kl.update_kl_coef(0.6, 10)) == pytest.approx(0.102)
    # KL 10: e clipped to 0.2 -> 0.102 * 1.02
    assert float(kl.update_kl_coef(10.0, 10)) == pytest.approx(0.102 * 1.02)
    # KL 0: e clipped to -0.2 -> * 0.98
    assert float(kl.update_kl_coef(0.0, 10)) == pytest.approx(0.102 * 1.02 * 0.98)
    fixed = K1(kl_coef=0.1)
    assert float(fixed.update_kl_coef(10.0, 10)) == pytest.approx(0.1)


def test_kl_penalty_reports_post_update_coef():
    kl = K1(adaptive=True, kl_coef=0.1, target_kl=0.5, horizon=4)
    logp = torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    ref = torch.tensor([[-1.0, -1.0], [-0.5, -2.0]])
    mask = torch.tensor([[True, True], [True, False]])
    scores = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    rewards, metrics = kl.apply_kl_penalty_to_reward(scores, logp, ref, mask)
    # token kl = logp - ref = [[1, 1], [0.5, 2 (masked -> 0)]]
    torch.testing.assert_close(rewards, torch.tensor([[-0.1, 0.9], [1.95, 0.0]]))
    current = (1.0 + 0.5) / 2  # mean over sequences of masked token means
    assert float(metrics["kl"]) == pytest.approx(current)
    e = min(max(current / 0.5 - 1, -0.2), 0.2)
    assert float(metrics["kl_coef"]) == pytest.approx(0.1 * (1 + e * 2 / 4))
    assert float(kl.kl_coef) == float(metrics["kl_coef"])
    same, metrics = kl.apply_kl_penalty_to_reward(scores, logp, None, mask)
    assert same is scores
    assert float(metrics["kl"]) == 0.0


def test_kl_loss_and_update_from_loss_path():
    kl = K1(adaptive=True, kl_coef=0.2, target_kl=1.0, horizon=10)
    logp = torch.tensor([[0.0, 0.0, 0.0]], requires_grad=True)
    ref = torch.tensor([[-3.0, -1.0, -9.0]])
    mask = torch.tensor([[True, True, False]])
    loss, metrics = kl.calculate_kl_loss(logp, ref, mask, "token-mean")
    assert float(metrics["kl_loss"]) == pytest.approx(2.0)
    assert float(loss.detach()) == pytest.approx(0.4)
    assert not metrics["kl_loss"].requires_grad
    loss.backward()
    # second micro-batch of the same step
    kl.calculate_kl_loss(torch.zeros(1, 2), torch.tensor([[-1.0, -1.0]]), torch.ones(1, 2, dtype=torch.bool))
    new = kl.update_kl_coef()  # observed mean per-sequence KL = (2 + 1) / 2 over 2 sequences
    assert float(new) == pytest.approx(0.2 * (1 + 0.2 * 2 / 10))
    # observation reset: next update without data sees KL 0 over 0 sequences
    assert float(kl.update_kl_coef()) == pytest.approx(float(new))


# ---------------------------------------------------------------------------------------------------
# entropy


def test_entropy_coef_default_and_mode_precedence():
    entropy = torch.tensor([[1.0, 3.0, 100.0], [2.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    fn = SimpleEntropy(entropy_coef=0.5)
    loss, metrics = fn(entropy, mask)
    assert float(metrics["entropy_loss"]) == pytest.approx(2.0)  # token-mean: (1 + 3 + 2) / 3
    assert float(loss) == pytest.approx(1.0)
    _, metrics = fn(entropy, mask, loss_agg_mode="seq-mean-token-mean")  # the algorithm's mode
    assert float(metrics["entropy_loss"]) == pytest.approx((2.0 + 2.0) / 2)
    own = SimpleEntropy(entropy_coef=0.5, loss_agg_mode="seq-mean-token-sum")
    _, metrics = own(entropy, mask, loss_agg_mode="seq-mean-token-mean")  # own setting wins
    assert float(metrics["entropy_loss"]) == pytest.approx((4.0 + 2.0) / 2)
    assert SimpleEntropy().entropy_coef == 0.0


def test_trainer_advantage_computes_on_the_batch_and_masks_outside_the_response() -> None:
    from trinity_core.batch import ExperienceBatch
    from trinity_core.components import TrainerAdvantage

    class LastTokenReward(TrainerAdvantage):
        """A_t = reward broadcast over the response (a test-local REINFORCE without baseline)."""

        def compute(
            self, batch: ExperienceBatch
        ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
            total = batch.token_level_scores().sum(dim=1, keepdim=True)
            advantages = total.expand(-1, batch.max_response_length)
            return advantages, advantages, {"score_mean": total.mean()}

    exps = [
        Experience(tokens=[1, 2, 3, 4], prompt_length=1, reward=2.0),
        Experience(tokens=[1, 2, 3, 4], prompt_length=2, action_mask=[True, False], reward=-1.0),
    ]
    batch, metrics = LastTokenReward()(exps)
    assert LastTokenReward.compute_in_trainer()
    assert batch.advantages.tolist() == [[2.0, 2.0, 2.0], [-1.0, 0.0, 0.0]]
    assert batch.returns.tolist() == batch.advantages.tolist()
    assert float(metrics["score_mean"]) == 0.5


def test_summarize_masked_metric_uses_only_the_selected_values() -> None:
    from trinity_core.components import summarize_masked_metric

    values = torch.tensor([1.0, 5.0, float("nan"), -2.0])
    mask = torch.tensor([True, False, False, True])
    out = summarize_masked_metric(values, mask, "r", "g")
    assert {k: float(v) for k, v in out.items()} == {"g/r/mean": -0.5, "g/r/max": 1.0, "g/r/min": -2.0}
    none = summarize_masked_metric(values, torch.zeros(4, dtype=torch.bool), "r", "g")
    assert {float(v) for v in none.values()} == {0.0}


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("global_scale", [False, True])
def test_aggregate_rows_equals_aggregate_of_the_values(mode: str, global_scale: bool) -> None:
    from trinity_core.components._aggregation import LossAggregation

    g = torch.Generator().manual_seed(7)
    values = torch.randn(5, 8, generator=g, dtype=torch.float64)
    mask = torch.rand(5, 8, generator=g) < 0.6
    mask[2] = False
    loss = LossAggregation()
    scale = global_normalizers([mask, mask[:3]], max_tokens=8.0) if global_scale else None
    rows = torch.where(mask, values, 0.0).sum(dim=-1)
    counts = mask.sum(dim=-1).to(torch.float64)
    with loss._aggregation_context(scale, mode):
        assert loss.aggregation()[0] == mode
        if mode == "seq-mean-token-sum-norm" and not global_scale:  # no max_tokens: both raise
            with pytest.raises(ValueError, match="max_tokens"):
                loss.aggregate(values, mask)
            with pytest.raises(ValueError, match="max_tokens"):
                loss.aggregate_rows(rows, counts)
            return
        expected = loss.aggregate(values, mask)
        got = loss.aggregate_rows(rows, counts)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
