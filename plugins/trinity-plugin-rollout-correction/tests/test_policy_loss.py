"""``rollout_correction`` around ppo: the weighted per-token PPO loss, by hand; and through the registry."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from trinity_plugin_rollout_correction import RolloutCorrectionLossFn

from trinity_core import registry
from trinity_core.components import PolicyLossFn

LN2 = math.log(2.0)


def _columns() -> dict[str, torch.Tensor]:
    return {
        "logprob": torch.tensor([[-1.0, -0.5, -2.0], [-0.3, -0.2, -1.0]]),
        "old_logprob": torch.tensor([[-1.1, -0.5, -1.9], [-0.3, -0.4, -1.0]]),
        "rollout_logprob": torch.tensor([[-1.1 - LN2, -0.5, -1.9 + 3 * LN2], [-0.3, -0.4, -1.0]]),
        "action_mask": torch.tensor([[True, True, True], [True, True, False]]),
        "advantages": torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]]),
    }


def _ppo_token_losses(c: dict[str, torch.Tensor], eps: float = 0.2) -> torch.Tensor:
    ratio = torch.exp(c["logprob"] - c["old_logprob"])
    adv = c["advantages"]
    return torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - eps, 1 + eps))


def test_token_truncate_weights_each_ppo_token_loss() -> None:
    c = _columns()
    loss_fn = RolloutCorrectionLossFn(policy_loss_fn="ppo", level="token", mode="truncate", upper=4.0)
    loss, metrics = loss_fn(**c)
    # behaviour ratios exp(old - rollout): 2, 1, 1/8 | 1, 1 -> weights 2, 1, 0.125, 1, 1
    w = torch.tensor([[2.0, 1.0, 0.125], [1.0, 1.0, 0.0]])
    expected = (w * _ppo_token_losses(c))[c["action_mask"]].mean()  # token-mean over 5 tokens
    torch.testing.assert_close(loss, expected)
    assert metrics["rollout_is_clipped_frac"].item() == 0.0
    assert "pg_clipfrac" in metrics  # the inner loss's metrics come along


def test_sequence_mask_drops_the_whole_off_policy_response() -> None:
    c = _columns()
    loss_fn = RolloutCorrectionLossFn(policy_loss_fn="ppo", level="sequence", mode="mask", upper=2.0)
    loss, metrics = loss_fn(**c)
    # row 0: 2 * 1 * 1/8 = 1/4 < 1/2 -> masked; row 1: 1 -> kept with weight 1
    per_token = _ppo_token_losses(c)
    expected = (per_token[1, :2].sum()) / 5  # the normaliser still counts the masked row's tokens
    torch.testing.assert_close(loss, expected)
    assert metrics["rollout_is_clipped_frac"].item() == pytest.approx(3 / 5)


def test_on_policy_rollouts_leave_the_inner_loss_unchanged() -> None:
    c = _columns()
    c["rollout_logprob"] = c["old_logprob"].clone()
    corrected, _ = RolloutCorrectionLossFn(policy_loss_fn="ppo", mode="mask")(**c)
    plain, _ = registry.create("policy_loss", "ppo")(**{k: v for k, v in c.items() if k != "rollout_logprob"})
    torch.testing.assert_close(corrected, plain)


def test_built_from_the_registry_with_its_selected_columns() -> None:
    loss_fn = registry.create("policy_loss", "rollout_correction", {"policy_loss_fn": "ppo", "upper": 3.0})
    assert isinstance(loss_fn, RolloutCorrectionLossFn)
    assert {loss_fn.mapper.to_trinity(k) for k in loss_fn.select_keys} == {
        "old_logprob",
        "rollout_logprob",
        "action_mask",
        "advantages",
    }


class _NeedsReference(PolicyLossFn):
    """A loss that reads the reference model's log-probs, which rollout_correction does not pass on."""

    def __call__(  # type: ignore[override]
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, action_mask: torch.Tensor, **kwargs: Any
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self.aggregate(logprob - ref_logprob, action_mask), {}


def test_an_inner_loss_that_needs_other_columns_is_refused() -> None:
    registry.register("policy_loss", "needs_reference", _NeedsReference, replace=True)
    try:
        with pytest.raises(ValueError, match=r"the inner loss 'needs_reference' reads \['ref_logprob'\]"):
            RolloutCorrectionLossFn(policy_loss_fn="needs_reference")
    finally:
        registry.unregister("policy_loss", "needs_reference")


def test_rejection_sampling_zeroes_the_rejected_tokens_and_keeps_the_normaliser() -> None:
    c = _columns()
    loss_fn = RolloutCorrectionLossFn(
        policy_loss_fn="ppo", level=None, rollout_rs="token_k1", rollout_rs_threshold="0.5_1.5"
    )
    loss, metrics = loss_fn(**c)
    # behaviour ratios 2, 1, 1/8 | 1, 1: the band [0.5, 1.5] rejects (0, 0) and (0, 2); no IS weights
    keep = torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    torch.testing.assert_close(loss, (keep * _ppo_token_losses(c))[c["action_mask"]].sum() / 5)
    assert metrics["rollout_rs_masked_frac"].item() == pytest.approx(2 / 5)


def test_rejection_sampling_combines_with_truncated_weights() -> None:
    c = _columns()
    loss_fn = RolloutCorrectionLossFn(
        policy_loss_fn="ppo", level="token", upper=4.0, rollout_rs="seq_max_k2", rollout_rs_threshold=1.0
    )
    loss, _ = loss_fn(**c)
    # row 0: max ½δ² = ½(3 ln 2)² = 2.16 > 1 -> rejected; row 1: δ = 0 -> kept with weight 1
    expected = _ppo_token_losses(c)[1, :2].sum() / 5
    torch.testing.assert_close(loss, expected)


def test_icepop_is_token_level_mask_mode() -> None:
    # verl's decoupled_token_icepop(threshold=5, threshold_lower=0.5): token weights outside [0.5, 5] are 0,
    # the response mask is unchanged; here level token, mode mask, the same band
    c = _columns()
    loss_fn = RolloutCorrectionLossFn(policy_loss_fn="ppo", level="token", mode="mask", upper=5.0, lower=0.5)
    loss, _ = loss_fn(**c)
    w = torch.tensor([[2.0, 1.0, 0.0], [1.0, 1.0, 0.0]])  # 1/8 < 0.5 is zeroed
    torch.testing.assert_close(loss, (w * _ppo_token_losses(c))[c["action_mask"]].mean())


def test_batch_normalised_weights_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="rollout_is_batch_normalize is not supported: the batch mean"):
        RolloutCorrectionLossFn(policy_loss_fn="ppo", rollout_is_batch_normalize=True)


def test_a_bad_rejection_option_is_refused_when_the_loss_is_built() -> None:
    with pytest.raises(ValueError, match="unknown option"):
        registry.create(
            "policy_loss", "rollout_correction", {"rollout_rs": "seq_max_k1", "rollout_rs_threshold": 2}
        )
