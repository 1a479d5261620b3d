"""Agreement with the reference trinity-rft 0.6.0 SFT losses (loss, gradient, metrics), and the
documented difference (sft_phi with cutoff_prob 0)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sft_support import MODES, loss_and_grad, random_inputs
from trinity_plugin_sft import SFTISLossFn, SFTLossFn, SFTPhiLossFn

from trinity_core.testing.reference import import_reference

pytestmark = pytest.mark.reference

PAIRS = {
    "sft": (SFTLossFn, "sft_loss.SFTLossFn", "sft_loss"),
    "sft_is": (SFTISLossFn, "chord_policy_loss.SFTISLossFn", "sft_is_loss"),
    "sft_phi": (SFTPhiLossFn, "chord_policy_loss.SFTPhiLossFn", "sft_phi_loss"),
}


def reference_class(dotted: str) -> type:
    module, name = dotted.rsplit(".", 1)
    return getattr(import_reference(f"trinity.algorithm.policy_loss_fn.{module}"), name)


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(MODES),
    which=st.sampled_from(sorted(PAIRS)),
    cutoff=st.floats(0.05, 1.0),
)
def test_loss_gradient_and_metric_agree_with_the_reference(
    seed: int, mode: str, which: str, cutoff: float
) -> None:
    ours_cls, ref_name, metric = PAIRS[which]
    args: dict[str, object] = {"loss_agg_mode": mode}
    if which == "sft_phi":
        args["cutoff_prob"] = cutoff
    x = random_inputs(seed)
    ours = loss_and_grad(ours_cls(**args), x["logprob"], action_mask=x["action_mask"])
    theirs = loss_and_grad(reference_class(ref_name)(**args), x["logprob"], action_mask=x["action_mask"])
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(ours[2], theirs[2], rtol=1e-6, atol=1e-9)
    assert float(ours[1][metric]) == pytest.approx(theirs[1][metric], rel=1e-6, abs=1e-9)


def test_zero_cutoff_differs_from_the_reference_as_documented() -> None:
    x = random_inputs(0)
    ours, _, grad = loss_and_grad(SFTPhiLossFn(cutoff_prob=0.0), x["logprob"], action_mask=x["action_mask"])
    reference = reference_class(PAIRS["sft_phi"][1])(cutoff_prob=0.0)  # its constructor accepts 0 ...
    with pytest.raises(ValueError, match="math domain error"):  # ... but the call takes math.log(0)
        reference(x["logprob"], action_mask=x["action_mask"])
    assert float(ours) == 0.0
    assert bool((grad == 0).all())
