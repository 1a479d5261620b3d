"""Comparison with the published reference ``trinity.algorithm.policy_loss_fn.ppo_policy_loss``: loss,
gradient and metrics agree on random inputs; the documented differences are pinned down."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ppo_support import grad_of, loss_inputs
from trinity_plugin_ppo import PPOPolicyLossFn

from trinity_core.testing.reference import import_reference

pytestmark = pytest.mark.reference

METRICS = ("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl", "pg_loss")


def reference_loss(**args: Any) -> Any:
    module = import_reference("trinity.algorithm.policy_loss_fn.ppo_policy_loss")
    return module.PPOPolicyLossFn(**args)


def for_reference(x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The reference multiplies by the mask: give it a float mask and zero advantages at padding."""
    mask = x["response_mask"]
    return {**x, "response_mask": mask.double(), "advantages": torch.where(mask, x["advantages"], 0.0)}


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    lo=st.floats(0.05, 0.4),
    hi=st.floats(0.05, 0.4),
    c=st.floats(1.5, 5.0),
    mode=st.sampled_from(["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]),
    seqmask=st.booleans(),
    fallback=st.booleans(),
)
def test_loss_gradient_and_metrics_agree_with_the_reference(
    seed: int, lo: float, hi: float, c: float, mode: str, seqmask: bool, fallback: bool
) -> None:
    args = {
        "clip_range_low": lo,
        "clip_range_high": hi,
        "clip_ratio_c": c,
        "loss_agg_mode": mode,
        "enable_sequence_masking": seqmask,
        "delta_sequence_masking": 0.05,
        "fallback_to_policy_gradient": fallback,
    }
    x = loss_inputs(seed, spread=0.5)
    ours_loss, ours_metrics, ours_grad = grad_of(PPOPolicyLossFn(**args), x)
    ref_loss, ref_metrics, ref_grad = grad_of(reference_loss(**args), for_reference(x))
    assert float(ours_loss) == pytest.approx(float(ref_loss), rel=1e-6, abs=1e-10)
    torch.testing.assert_close(ours_grad, ref_grad, rtol=1e-6, atol=1e-10)
    keys = METRICS + (("seq_mask/masked_tokens", "seq_mask/mean_sequence_kl") if seqmask else ())
    assert set(ours_metrics) == set(ref_metrics)
    for key in keys:
        assert float(ours_metrics[key]) == pytest.approx(ref_metrics[key], rel=1e-6, abs=1e-9), key


def test_reference_bare_ppo_asserts_where_ours_uses_the_documented_default() -> None:
    # The reference's default_args() drifts from __init__ (args-one-source): default_args() says
    # clip_range 0.2 but __init__ defaults to None.
    module = import_reference("trinity.algorithm.policy_loss_fn.ppo_policy_loss")
    assert module.PPOPolicyLossFn.default_args()["clip_range"] == 0.2
    with pytest.raises(AssertionError):
        module.PPOPolicyLossFn()
    x = loss_inputs(4)
    ours = grad_of(PPOPolicyLossFn(), x)
    theirs = grad_of(module.PPOPolicyLossFn(clip_range=0.2), for_reference(x))
    assert float(ours[0]) == pytest.approx(float(theirs[0]), rel=1e-6)
    torch.testing.assert_close(ours[2], theirs[2], rtol=1e-6, atol=1e-10)


def test_reference_counts_padding_in_masked_tokens_ours_only_selected_tokens() -> None:
    # One row, 2 selected tokens then 2 padding positions carrying negative advantages; seq KL > δ.
    x = {
        "log_prob": torch.tensor([[-1.0, -1.0, 0.0, 0.0]], dtype=torch.float64),
        "old_log_probs": torch.tensor([[-0.5, -0.5, 0.0, 0.0]], dtype=torch.float64),
        "response_mask": torch.tensor([[True, True, False, False]]),
        "advantages": torch.tensor([[-1.0, 1.0, -1.0, -1.0]], dtype=torch.float64),
    }
    args = {"enable_sequence_masking": True, "clip_range": 0.2}
    _, ours, _ = grad_of(PPOPolicyLossFn(**args), x)
    _, theirs, _ = grad_of(reference_loss(**args), {**x, "response_mask": x["response_mask"].double()})
    assert float(ours["seq_mask/masked_tokens"]) == pytest.approx(1 / 2)  # the one A < 0 action token
    assert theirs["seq_mask/masked_tokens"] == pytest.approx(3 / 2)  # + two padding positions


def test_reference_leaks_nan_advantages_from_padding_into_the_gradient_ours_does_not() -> None:
    # NaN advantages at padded positions: the loss value is masked in both, but the reference's
    # gradient is 0 · NaN = NaN at those positions (it multiplies by the mask after computing).
    x = loss_inputs(9)
    hidden = ~x["response_mask"]
    x["advantages"] = torch.where(hidden, torch.nan, x["advantages"])
    ours = grad_of(PPOPolicyLossFn(), x)
    theirs = grad_of(reference_loss(clip_range=0.2), {**x, "response_mask": x["response_mask"].double()})
    assert float(ours[0]) == pytest.approx(float(theirs[0]), rel=1e-6)
    assert torch.isfinite(ours[2]).all()
    assert not torch.isfinite(theirs[2][hidden]).all()
    torch.testing.assert_close(ours[2][~hidden], theirs[2][~hidden], rtol=1e-6, atol=1e-10)
