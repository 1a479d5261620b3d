"""Comparison with the published reference ``trinity.algorithm.policy_loss_fn.sppo_loss_fn``: loss,
gradient and metrics agree on random inputs (the band test runs in log space here, in ratio space there;
they differ only by rounding exactly at the band's edges, which random inputs do not hit)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sppo_support import grad_of, loss_inputs
from trinity_plugin_sppo import sPPOPolicyLossFn

from trinity_core.testing.reference import import_reference

pytestmark = pytest.mark.reference


def reference_class() -> type:
    return import_reference("trinity.algorithm.policy_loss_fn.sppo_loss_fn").sPPOPolicyLossFn  # type: ignore[no-any-return]


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]),
    eps=st.floats(0.05, 1.0),
)
def test_loss_gradient_and_metrics_agree_with_the_reference(seed: int, mode: str, eps: float) -> None:
    args = {"epsilon": eps, "loss_agg_mode": mode}
    x = loss_inputs(seed, spread=0.4)
    ours = grad_of(sPPOPolicyLossFn(**args), x)
    theirs = grad_of(reference_class()(**args), x)
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(ours[2], theirs[2], rtol=1e-6, atol=1e-9)
    for key in ("pg_loss", "pg_clipfrac"):
        assert float(ours[1][key]) == pytest.approx(theirs[1][key], rel=1e-6, abs=1e-9), key


def test_reference_syncs_with_the_host_and_ours_does_not() -> None:
    from trinity_core.testing import count_host_syncs

    x = loss_inputs(0)
    lp = x.pop("log_prob")
    with count_host_syncs() as ours:
        sPPOPolicyLossFn()(lp, **x)
    with count_host_syncs() as theirs:
        reference_class()()(lp, **x)
    assert len(ours) == 0, ours.describe()
    assert len(theirs) >= 2  # pg_clipfrac.item() and pg_loss.item()
