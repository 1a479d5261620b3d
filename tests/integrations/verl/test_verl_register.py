"""verl 0.9.1 through its own registries: every name both sides have gives verl's result, with the
same settings; where the defaults differ (MATCHED, sapo, geo_mean) the difference is asserted as
documented in the plugin READMEs and docs/integrations.md."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos", reason="needs trinity-core[verl]")
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.workers.config.actor import ActorConfig, PolicyLossConfig  # noqa: E402

from trinity_core.integrations.verl import (  # noqa: E402
    PREFIX,
    make_advantage_estimator,
    make_policy_loss,
    register,
)

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum"]
SAME_LOSSES = {
    "ppo": "vanilla",
    "gpg": "gpg",
    "clip_cov": "clip_cov",
    "dppo_tv": "dppo_tv",
    "dppo_kl": "dppo_kl",
}
# Equal to verl once the settings match; with both sides' defaults they differ, for the reason given
# (plugin READMEs, docs/integrations.md). (our args, verl PolicyLossConfig fields, reason)
MATCHED: dict[str, tuple[dict[str, object], dict[str, object], str]] = {
    "cispo": (
        {"clip_range_low": 0.2, "clip_range_high": 0.2},
        {},
        "verl clips the IS weight with the actor's clip_ratio (0.2 both sides); ours defaults to the "
        "paper's: no lower bound (eps_low=1.0) and eps_high=0.28",
    ),
    "gspo": (
        {"clip_range": 0.2},
        {},
        "verl clips the sequence ratio with the actor's clip_ratio (0.2); ours defaults to the GSPO "
        "paper's 3e-4 / 4e-4",
    ),
    "kl_cov": (
        {"ppo_kl_coef": 0.1},
        {},
        "verl's PolicyLossConfig.ppo_kl_coef defaults to 0.1 (its function falls back to 1.0 only for "
        "None); ours defaults to 1.0",
    ),
    "dro": (
        {},
        {"dro_beta": 1.0},
        "verl's dro_beta has no default (None raises ValueError); ours defaults to 1.0",
    ),
}
SAME_ESTIMATORS = {
    "grpo": "grpo",
    "grpo_verl": "grpo",
    "gpg": "gpg",
    "opo": "opo",
    "grpo_passk": "grpo_passk",
    "rloo": "rloo",
    "reinforce_plus_plus_baseline": "reinforce_plus_plus_baseline",
    "reinforceplusplus": "reinforce_plus_plus",
}


@pytest.fixture(scope="module")
def registered() -> dict[str, list[str]]:
    return register()


def _loss_inputs(sequence_advantages: bool = False) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([7, 3, 5, 1, 6, 4])
    mask = torch.arange(7)[None] < lengths[:, None]
    old = -torch.rand(6, 7, generator=g) * 2
    logprob = old + torch.randn(6, 7, generator=g) * 0.3
    adv = torch.randn(6, 7, generator=g)
    if sequence_advantages:
        adv = adv[:, :1].expand(6, 7).clone()
    return old, logprob, adv, mask


def _run_fn(
    fn: Any, mode: str, config: ActorConfig, sequence_advantages: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    old, logprob, adv, mask = _loss_inputs(sequence_advantages)
    logprob.requires_grad_(True)
    loss, metrics = fn(old, logprob, adv, mask, mode, config, None)
    loss.backward()
    assert all(not isinstance(v, torch.Tensor) or not v.requires_grad for v in metrics.values())
    assert logprob.grad is not None
    return loss.detach(), logprob.grad


def _run(
    name: str, mode: str, config: ActorConfig, sequence_advantages: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    return _run_fn(core_algos.get_policy_loss_fn(name), mode, config, sequence_advantages)


@pytest.fixture(scope="module")
def actor_config() -> ActorConfig:
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=2)


def test_every_installed_component_is_registered(registered: dict[str, list[str]]) -> None:
    assert f"{PREFIX}sapo" in core_algos.POLICY_LOSS_REGISTRY
    assert f"{PREFIX}opmd" in core_algos.ADV_ESTIMATOR_REGISTRY
    assert set(registered["policy_loss"]) <= set(core_algos.POLICY_LOSS_REGISTRY)
    assert set(registered["advantage_fn"]) <= set(core_algos.ADV_ESTIMATOR_REGISTRY)
    # verl's own names are untouched, and registering again replaces only ours.
    assert core_algos.get_policy_loss_fn("sapo").__module__ == core_algos.__name__
    assert register() == registered


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("ours", "theirs"), sorted(SAME_LOSSES.items()))
def test_policy_loss_equals_verl(
    registered: object, actor_config: ActorConfig, ours: str, theirs: str, mode: str
) -> None:
    loss, grad = _run(PREFIX + ours, mode, actor_config)
    ref_loss, ref_grad = _run(theirs, mode, actor_config)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-7)


def test_sapo_equals_verl_in_verls_fixed_mode(registered: object, actor_config: ActorConfig) -> None:
    loss, grad = _run(PREFIX + "sapo", "seq-mean-token-mean", actor_config)
    for mode in MODES:  # verl ignores the mode
        ref_loss, ref_grad = _run("sapo", mode, actor_config)
        torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-7)
    # With responses of different lengths token-mean differs (the README's documented difference).
    assert not torch.allclose(_run(PREFIX + "sapo", "token-mean", actor_config)[0], loss)


@pytest.fixture(scope="module")
def matched() -> Iterator[str]:
    """Our losses registered a second time, under ``matched.``, with verl's settings as their args."""
    prefix = "matched."
    names = register(prefix=prefix, policy_loss_args={k: v[0] for k, v in MATCHED.items()})
    yield prefix
    for key in names["policy_loss"]:
        core_algos.POLICY_LOSS_REGISTRY.pop(key, None)
    for key in names["advantage_fn"]:
        core_algos.ADV_ESTIMATOR_REGISTRY.pop(key, None)


def _config(**policy_loss: object) -> ActorConfig:
    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=2,
        policy_loss=PolicyLossConfig(**policy_loss),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ours", sorted(MATCHED))
def test_policy_loss_equals_verl_with_matching_settings(matched: str, ours: str, mode: str) -> None:
    config = _config(**MATCHED[ours][1])
    loss, grad = _run(matched + ours, mode, config)
    ref_loss, ref_grad = _run(ours, mode, config)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("ours", sorted(MATCHED))
def test_policy_loss_defaults_differ_from_verl(registered: object, ours: str) -> None:
    """With both sides' defaults the results differ (MATCHED's reason); verl's dro has no default."""
    config = _config(**MATCHED[ours][1])
    loss, _ = _run(PREFIX + ours, "token-mean", config)
    ref_loss, _ = _run(ours, "token-mean", config)
    if ours == "dro":  # our default is the value verl must be given: equal with it, verl's default raises
        torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-7)
        with pytest.raises(ValueError, match="dro_beta"):
            _run("dro", "token-mean", _config())
    else:
        assert not torch.allclose(loss, ref_loss), MATCHED[ours][2]


def test_geo_mean_equals_verl_for_sequence_advantages(matched: str) -> None:
    """verl's geo_mean: log-space clip = actor clip_ratio (0.2; ours 0.4), the mean over rows whatever
    loss_agg_mode says (= our seq-mean-token-mean with no empty row), and the clip side chosen by each
    token's advantage sign (ours: the sequence advantage's; the same for sequence-level advantages)."""
    config = _config()
    ours = make_policy_loss("geo_mean", {"clip_range": 0.2})
    seq = True
    loss, grad = _run_fn(ours, "seq-mean-token-mean", config, seq)
    for mode in MODES:  # verl ignores the mode
        ref_loss, ref_grad = _run("geo_mean", mode, config, seq)
        torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-7)
    # Our default clip (0.4, GMPO paper) differs from verl's 0.2 ...
    assert not torch.allclose(_run(PREFIX + "geo_mean", "seq-mean-token-mean", config, seq)[0], loss)
    # ... and with token-level advantages verl takes each token's sign, we take the sequence's.
    tok, _ = _run_fn(ours, "seq-mean-token-mean", config, False)
    assert not torch.allclose(tok, _run("geo_mean", "seq-mean-token-mean", config, False)[0])
    # Other modes aggregate per token, as every other loss of ours.
    assert not torch.allclose(_run_fn(ours, "token-mean", config, seq)[0], loss)


def test_global_batch_info_is_used(registered: object) -> None:
    # Two micro-batches with the global token count sum to the loss of the whole batch.
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=2)
    old, logprob, adv, mask = _loss_inputs()
    fn = core_algos.get_policy_loss_fn(PREFIX + "ppo")
    whole, _ = fn(old, logprob, adv, mask, "token-mean", config, None)
    config.global_batch_info.update(dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=6)
    parts = sum(
        fn(old[s], logprob[s], adv[s], mask[s], "token-mean", config, None)[0]
        for s in (slice(0, 3), slice(3, 6))
    )
    torch.testing.assert_close(parts, whole)


@pytest.mark.parametrize("dp_size", [1, 2])
def test_ppo_token_sum_equals_verl_with_global_batch_info(registered: object, dp_size: int) -> None:
    """verl's token-sum: masked sum * dp_size, whatever the global counts; micro-batches sum to it."""
    old, logprob, adv, mask = _loss_inputs()
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=2)
    config.global_batch_info.update(dp_size=dp_size, batch_num_tokens=int(mask.sum()), global_batch_size=6)
    ours, theirs = core_algos.get_policy_loss_fn(PREFIX + "ppo"), core_algos.get_policy_loss_fn("vanilla")
    for rows in (slice(0, 6), slice(0, 2), slice(2, 6)):
        args = (old[rows], logprob[rows], adv[rows], mask[rows], "token-sum", config, None)
        torch.testing.assert_close(ours(*args)[0], theirs(*args)[0], rtol=1e-6, atol=1e-6)
    whole = ours(old, logprob, adv, mask, "token-sum", config, None)[0]
    parts = sum(
        ours(old[s], logprob[s], adv[s], mask[s], "token-sum", config, None)[0]
        for s in (slice(0, 2), slice(2, 6))
    )
    torch.testing.assert_close(parts, whole)


def test_rollout_correction_weights_are_refused(registered: object, actor_config: ActorConfig) -> None:
    old, logprob, adv, mask = _loss_inputs()
    with pytest.raises(ValueError, match="rollout_is_weights"):
        core_algos.get_policy_loss_fn(PREFIX + "ppo")(
            old, logprob, adv, mask, "token-mean", actor_config, old
        )


def _estimator_inputs() -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    lengths = torch.tensor([6, 3, 5, 2, 6, 4, 1, 3])
    mask = (torch.arange(6)[None] < lengths[:, None]).float()
    rewards = torch.tensor([1.0, 0, 1, 0.5, 0, 0, 2, 1])
    token_rewards = torch.zeros(8, 6)
    token_rewards[torch.arange(8), lengths - 1] = rewards
    return token_rewards, mask, np.array(["a", "a", "a", "b", "b", "b", "c", "c"], dtype=object)


@pytest.mark.parametrize(("ours", "theirs"), sorted(SAME_ESTIMATORS.items()))
def test_estimator_equals_verl(registered: object, ours: str, theirs: str) -> None:
    tlr, mask, index = _estimator_inputs()
    kwargs = {"token_level_rewards": tlr, "response_mask": mask, "index": index, "config": AlgoConfig()}
    adv, _ = core_algos.get_adv_estimator_fn(PREFIX + ours)(**kwargs)
    ref, _ = core_algos.get_adv_estimator_fn(theirs)(**kwargs)
    torch.testing.assert_close(adv, ref, rtol=1e-5, atol=1e-6)


def test_dr_grpo_equals_verl_grpo_without_std(registered: object) -> None:
    tlr, mask, index = _estimator_inputs()
    adv, _ = core_algos.get_adv_estimator_fn(PREFIX + "dr_grpo")(
        token_level_rewards=tlr, response_mask=mask, index=index
    )
    ref, _ = core_algos.compute_grpo_outcome_advantage(tlr, mask, index, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(adv, ref, rtol=1e-5, atol=1e-6)


def test_a_taken_name_is_a_conflict() -> None:
    core_algos.POLICY_LOSS_REGISTRY["mine.ppo"] = core_algos.get_policy_loss_fn("vanilla")
    try:
        with pytest.raises(ValueError, match="already registered"):
            register(prefix="mine.")
    finally:
        del core_algos.POLICY_LOSS_REGISTRY["mine.ppo"]


def _otb_inputs(holes: bool) -> dict[str, Any]:
    tlr, mask, index = _estimator_inputs()
    if holes:  # multi-turn: tool tokens inside responses
        mask[0, 2] = mask[2, 1] = mask[4, 3] = 0.0
    g = torch.Generator().manual_seed(1)
    return {
        "token_level_rewards": tlr,
        "response_mask": mask,
        "index": index,
        "old_log_probs": -torch.rand(8, 6, generator=g) * 3,
        "sum_pi_squared": torch.rand(8, 6, generator=g) * 0.5,
    }


@pytest.mark.parametrize("rollout_is", [False, True], ids=["plain", "rollout_is_weights"])
@pytest.mark.parametrize(
    ("name", "holes"),
    [("optimal_token_baseline", False), ("tir_optimal_token_baseline", True)],
)
def test_optimal_token_baseline_equals_verl(
    registered: object, name: str, holes: bool, rollout_is: bool
) -> None:
    kwargs = _otb_inputs(holes)
    if rollout_is:
        kwargs["rollout_is_weights"] = 0.5 + torch.rand(8, 6, generator=torch.Generator().manual_seed(2))
    adv, ret = core_algos.get_adv_estimator_fn(PREFIX + name)(**kwargs, config=AlgoConfig())
    ref, ref_ret = core_algos.get_adv_estimator_fn(name)(**kwargs, config=AlgoConfig())
    torch.testing.assert_close(adv, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ret * kwargs["response_mask"], ref_ret * kwargs["response_mask"])


def test_gdpo_equals_verl(registered: object) -> None:
    """verl's gdpo with two reward components from non_tensor_batch and weights; our gdpo with the same
    keys and weights (verl reads them from its algorithm config, ours from the component's args)."""
    tlr, mask, index = _estimator_inputs()
    fmt = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.5, 1.0])
    acc = np.array([0.0, 1.0, 1.0, 0.5, 0.0, 1.0, 1.0, 0.0])
    keys, weights = ["fmt", "acc"], [1.0, 0.5]
    batch = {
        "prompts": torch.zeros(8, 3, dtype=torch.long),
        "attention_mask": torch.cat([torch.ones(8, 3), mask], 1).long(),
    }
    config = AlgoConfig(gdpo_reward_keys=keys, gdpo_reward_weights=weights)  # type: ignore[call-arg]
    ntb = {"fmt": fmt, "acc": acc}
    ref, _ = core_algos.get_adv_estimator_fn("gdpo")(
        token_level_rewards=tlr,
        response_mask=mask,
        index=index,
        config=config,
        non_tensor_batch=ntb,
        batch=batch,
    )
    ours = make_advantage_estimator("gdpo", {"gdpo_reward_keys": keys, "gdpo_reward_weights": weights})
    adv, _ = ours(
        token_level_rewards=tlr, response_mask=mask, index=index, config=config, non_tensor_batch=ntb
    )
    # Every group has two or more rows: the singleton policy (ours 0, verl mean 0 / std 1) does not enter.
    torch.testing.assert_close(adv, ref, rtol=1e-5, atol=1e-6)
