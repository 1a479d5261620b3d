"""verl 0.9.1 through its own registries: every name both sides have gives verl's result, except the
differences listed in DIFFERENT (each with its reason)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos", reason="needs trinity-core[verl]")
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.workers.config.actor import ActorConfig  # noqa: E402

from trinity_core.integrations.verl import PREFIX, register  # noqa: E402

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
SAME_LOSSES = {
    "ppo": "vanilla",
    "gpg": "gpg",
    "clip_cov": "clip_cov",
    "dppo_tv": "dppo_tv",
    "dppo_kl": "dppo_kl",
}
DIFFERENT = {
    "sapo": "verl always aggregates sapo with seq-mean-token-mean (plugin README); equal in that mode",
    "cispo": "not reconciled yet: differs in every mode with both sides' defaults (follow-up)",
    "gspo": "not reconciled yet: differs in every mode with both sides' defaults (follow-up)",
    "geo_mean": "not reconciled yet: differs in every mode with both sides' defaults (follow-up)",
    "kl_cov": "not reconciled yet: differs in every mode with both sides' defaults (follow-up)",
    "dro": "verl's dro_beta has no default (None); ours has one; not reconciled yet (follow-up)",
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


def _loss_inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([7, 3, 5, 1, 6, 4])
    mask = torch.arange(7)[None] < lengths[:, None]
    old = -torch.rand(6, 7, generator=g) * 2
    logprob = old + torch.randn(6, 7, generator=g) * 0.3
    return old, logprob, torch.randn(6, 7, generator=g), mask


def _run(name: str, mode: str, config: ActorConfig) -> tuple[torch.Tensor, torch.Tensor]:
    old, logprob, adv, mask = _loss_inputs()
    logprob.requires_grad_(True)
    loss, metrics = core_algos.get_policy_loss_fn(name)(old, logprob, adv, mask, mode, config, None)
    loss.backward()
    assert all(not isinstance(v, torch.Tensor) or not v.requires_grad for v in metrics.values())
    return loss.detach(), logprob.grad


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


@pytest.mark.parametrize("ours", sorted(set(DIFFERENT) - {"sapo"}))
def test_known_differences_are_listed(registered: object, ours: str) -> None:
    assert PREFIX + ours in core_algos.POLICY_LOSS_REGISTRY, DIFFERENT[ours]


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
