"""Agreement with the reference DPO loss on one pair per call, and the documented difference with several
pairs per micro-batch (reference-differences.md#dpo-pairs)."""

from __future__ import annotations

import pytest
import torch
from dpo_support import loss_and_grad, pair_batch
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_dpo import DPOLossFn

from trinity_core.testing.reference import import_reference

pytestmark = pytest.mark.reference


def reference(**args: float) -> object:
    return import_reference("trinity.algorithm.policy_loss_fn.dpo_loss").DPOLossFn(**args)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), beta=st.floats(0.01, 2.0), eps=st.floats(0.0, 0.5))
def test_one_pair_agrees_with_the_reference(seed: int, beta: float, eps: float) -> None:
    x = pair_batch(seed, pairs=1)
    kwargs = {"ref_logprob": x["ref_logprob"], "action_mask": x["action_mask"]}
    ours = loss_and_grad(DPOLossFn(beta=beta, label_smoothing=eps), x["logprob"], **kwargs)
    theirs = loss_and_grad(reference(beta=beta, label_smoothing=eps), x["logprob"], **kwargs)
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(ours[2], theirs[2], rtol=1e-9, atol=1e-12)
    for key in ("chosen_reward", "rejected_reward", "accuracy_mean", "dpo_loss"):
        assert float(ours[1][key]) == pytest.approx(theirs[1][key], rel=1e-9, abs=1e-12), key


def test_several_pairs_differ_from_the_reference_as_documented() -> None:
    # The reference sums every chosen row into one logit: z_ref = Σ_k ρ_c,k − Σ_k ρ_r,k.
    x = pair_batch(7, pairs=3)
    kwargs = {"ref_logprob": x["ref_logprob"], "action_mask": x["action_mask"]}
    ours = loss_and_grad(DPOLossFn(beta=0.5), x["logprob"], **kwargs)[0]
    theirs = loss_and_grad(reference(beta=0.5), x["logprob"], **kwargs)[0]
    rho = torch.where(x["action_mask"], x["logprob"] - x["ref_logprob"], 0.0).sum(-1)
    z = rho[0::2] - rho[1::2]
    torch.testing.assert_close(ours, -torch.nn.functional.logsigmoid(0.5 * z).mean())
    torch.testing.assert_close(theirs, -torch.nn.functional.logsigmoid(0.5 * z.sum()))
    assert not torch.allclose(ours, theirs)
