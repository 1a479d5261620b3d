"""Agreement with trinity-rft 0.6.0 ClipB/ClipV where it is right, and its documented differences."""

from __future__ import annotations

import pytest
import torch
from clip_support import make_batch, reference_inputs, reference_module
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_clip_filters import POLICY_LOSS_MASK, ClipBAdvantageFn, ClipVAdvantageFn

pytestmark = pytest.mark.reference


@st.composite
def informative(draw: st.DrawFn) -> list[list[float]]:
    """2..4 groups of 2..4 integer rewards, at least two distinct values per group."""
    groups = []
    for n in draw(st.lists(st.integers(2, 4), min_size=2, max_size=4)):
        row = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n).filter(lambda r: len(set(r)) > 1))
        groups.append([float(r) for r in row])
    return groups


def _compare(ours: object, theirs: object, batch_mask: torch.Tensor) -> None:
    keep = theirs.batch["response_mask"].bool()  # type: ignore[attr-defined]
    assert torch.equal(ours.extras[POLICY_LOSS_MASK], keep)  # type: ignore[attr-defined]
    expected = torch.where(keep, theirs.batch["advantages"], 0.0)  # type: ignore[attr-defined]
    torch.testing.assert_close(ours.advantages, expected, rtol=1e-5, atol=1e-5)  # type: ignore[attr-defined]
    torch.testing.assert_close(ours.returns, theirs.batch["returns"], rtol=1e-5, atol=1e-5)  # type: ignore[attr-defined]
    assert torch.equal(ours.action_mask, batch_mask)  # type: ignore[attr-defined]


@settings(max_examples=30, deadline=None)
@given(groups=informative(), seed=st.integers(0, 10_000), mu=st.sampled_from([0.5, 1.0, 2.5]))
def test_clipb_matches_reference(groups: list[list[float]], seed: int, mu: float) -> None:
    ref = reference_module("trinity.algorithm.advantage_fn.clipb_advantage")
    batch = make_batch(groups, 6, seed)
    mask = batch.action_mask.clone()
    theirs, their_metrics = ref.ClipBAdvantageFn(mu=mu)(reference_inputs(batch))
    ours, metrics = ClipBAdvantageFn(mu=mu)(batch)
    _compare(ours, theirs, mask)
    for key in ("frac_clipped", "frac_clipped_pos", "frac_clipped_neg", "ES", "varS"):
        assert float(metrics[key]) == pytest.approx(their_metrics[key], rel=1e-4, abs=1e-5)


@settings(max_examples=30, deadline=None)
@given(
    groups=informative(),
    seed=st.integers(0, 10_000),
    mu=st.sampled_from([0.3, 1.0, 8.5]),
    max_frac=st.sampled_from([1e-4, 0.05, 0.3, 1.0]),
)
def test_clipv_matches_reference(groups: list[list[float]], seed: int, mu: float, max_frac: float) -> None:
    ref = reference_module("trinity.algorithm.advantage_fn.clipv_advantage")
    batch = make_batch(groups, 6, seed)
    mask = batch.action_mask.clone()
    args = {"mu": mu, "max_frac": max_frac}
    theirs, their_metrics = ref.ClipVAdvantageFn(**args)(reference_inputs(batch))
    ours, metrics = ClipVAdvantageFn(**args)(batch)
    _compare(ours, theirs, mask)
    for key in ("frac_clipped", "frac_clipped_pos", "frac_clipped_neg", "stdD"):
        assert float(metrics[key]) == pytest.approx(their_metrics[key], rel=1e-4, abs=1e-5)


def test_differences_singleton_mask_rewrite_and_frac_clipped_pos() -> None:
    # One singleton (reward -1) and one zero-variance group: no positive advantage anywhere.
    ref = reference_module("trinity.algorithm.advantage_fn.clipb_advantage")
    batch = make_batch([[-1.0], [1.0, 1.0]], 4, seed=3)
    inputs = reference_inputs(batch)
    mask_before = inputs.batch["response_mask"].clone()
    theirs, their_metrics = ref.ClipBAdvantageFn()(inputs)
    ours, metrics = ClipBAdvantageFn()(batch)
    # singleton: the reference uses the raw reward r / (1 + eps); here 0
    assert float(theirs.batch["advantages"][0, 0]) == pytest.approx(-1 / (1 + 1e-6))
    assert float(ours.advantages.abs().max()) == 0.0
    # the reference reports every positive token clipped when there is none; here 0
    assert their_metrics["frac_clipped_pos"] == 1.0
    assert float(metrics["frac_clipped_pos"]) == 0.0
    # the reference replaces response_mask in the batch it was given; here only extras gains a key
    assert theirs.batch["response_mask"] is not mask_before
    assert POLICY_LOSS_MASK in ours.extras
