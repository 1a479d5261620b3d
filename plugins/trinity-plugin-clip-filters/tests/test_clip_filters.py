"""clipb / clipv: golden filters by hand, the mask contract, required columns, NaN, host syncs."""

from __future__ import annotations

import math

import pytest
import torch
from clip_support import make_batch, plant_nan
from trinity_plugin_clip_filters import POLICY_LOSS_MASK, ClipBAdvantageFn, ClipVAdvantageFn
from trinity_plugin_clip_filters.clipv import cap_clipped

from trinity_core.testing import count_host_syncs

# Rewards: group 0 = [1, 0] -> scores [+a, -a], a = 0.5 / (std_u + eps) = 0.5 / (sqrt(0.5) + 1e-6);
# group 1 = [0, 1] -> [-a, +a]. Rows 1 and 2 are negative.
REWARDS = [[1.0, 0.0], [0.0, 1.0]]
A = 0.5 / (math.sqrt(0.5) + 1e-6)


def zero_logprob_batch(entropys: torch.Tensor, necs: torch.Tensor | None = None) -> object:
    # log p = 0 -> p = 1 -> S = H exactly, so the filter can be worked out by hand
    return make_batch(
        REWARDS,
        3,
        logprobs=torch.zeros(4, 3),
        entropys=entropys,
        necs=necs if necs is not None else torch.zeros(4, 3),
        full=True,
    )


def test_clipb_golden() -> None:
    entropy = torch.zeros(4, 3)
    entropy[1, 2] = -10.0  # negative-advantage row: an outlier below E[S]
    entropy[0, 1] = -10.0  # positive-advantage row: same outlier, always kept
    batch = zero_logprob_batch(entropy)
    mask_before = batch.action_mask.clone()
    out, metrics = ClipBAdvantageFn(mu=2.0)(batch)
    # S = H over 12 tokens: E[S] = -20/12, var = 200/12 - (20/12)^2, std = 3.727; threshold -2 * std = -7.45
    mean = -20 / 12
    var = 200 / 12 - mean**2
    assert -10 - mean < -2.0 * math.sqrt(var) < 0 - mean  # only the two -10 tokens are below it
    expected = torch.tensor([[A, A, A], [-A, -A, 0.0], [-A, -A, -A], [A, A, A]])
    torch.testing.assert_close(out.advantages, expected.float())
    torch.testing.assert_close(out.returns[1], torch.full((3,), -A))  # returns unfiltered
    keep = torch.ones(4, 3, dtype=torch.bool)
    keep[1, 2] = False
    assert torch.equal(batch.extras[POLICY_LOSS_MASK], keep)
    assert torch.equal(batch.action_mask, mask_before)  # untouched, unlike the reference (missing-columns)
    assert float(metrics["frac_clipped"]) == pytest.approx(1 / 12)
    assert float(metrics["frac_clipped_neg"]) == pytest.approx(1 / 6)
    assert float(metrics["frac_clipped_pos"]) == 0.0
    assert float(metrics["ES"]) == pytest.approx(mean)
    assert float(metrics["varS"]) == pytest.approx(var)


def test_clipb_keeps_everything_when_the_signal_is_flat() -> None:
    batch = zero_logprob_batch(torch.full((4, 3), 0.7))
    _out, metrics = ClipBAdvantageFn(mu=0.0001)(batch)
    assert bool(batch.extras[POLICY_LOSS_MASK].all())
    assert float(metrics["frac_clipped"]) == 0.0


def test_clipv_golden_cap_and_zero_advantage_tokens() -> None:
    # S = H = 0, so D = necs. Four negative-advantage violators (rows 1, 2) and one zero-advantage row.
    necs = torch.zeros(4, 3)
    necs[1] = torch.tensor([9.0, 8.0, 0.0])
    necs[2] = torch.tensor([7.0, 6.0, 0.0])
    necs[0, 0] = 9.5  # positive advantage: never tested
    batch = zero_logprob_batch(torch.zeros(4, 3), necs)
    # max_frac * n = 0.2 * 12 = 2.4 -> k = 2: clip the two largest negative violators (9 and 8)
    out, metrics = ClipVAdvantageFn(mu=0.5, max_frac=0.2)(batch)
    d = necs.flatten().double()
    std = math.sqrt(float((d - d.mean()).pow(2).mean()))
    assert 0.5 * std < 6.0  # 9, 8, 7, 6 all violate; 0 does not
    keep = torch.ones(4, 3, dtype=torch.bool)
    keep[1, 0] = keep[1, 1] = False
    assert torch.equal(batch.extras[POLICY_LOSS_MASK], keep)
    assert float(out.advantages[2, 0]) == pytest.approx(-A)  # violator beyond the cap: kept
    assert float(metrics["stdD"]) == pytest.approx(std)
    # without a binding cap every violator is clipped
    batch = zero_logprob_batch(torch.zeros(4, 3), necs)
    ClipVAdvantageFn(mu=0.5, max_frac=0.5)(batch)
    assert int((~batch.extras[POLICY_LOSS_MASK]).sum()) == 4


def test_clipv_tests_zero_advantage_tokens_too() -> None:
    necs = torch.zeros(6, 2)
    necs[4, 1] = 5.0  # group 2 has equal rewards: advantage 0, clipped outside the cap
    necs[1, 0] = 4.0
    batch = make_batch(
        [*REWARDS, [0.5, 0.5]],
        2,
        logprobs=torch.zeros(6, 2),
        entropys=torch.zeros(6, 2),
        necs=necs,
        full=True,
    )
    ClipVAdvantageFn(mu=1.0, max_frac=0.0)(batch)  # cap k = max(floor(0), 1) = 1
    clipped = ~batch.extras[POLICY_LOSS_MASK]
    assert clipped[4, 1]
    assert clipped[1, 0]
    assert int(clipped.sum()) == 2


def test_cap_clipped_is_a_top_k_with_a_tensor_k() -> None:
    candidates = torch.tensor([[True, False, True], [True, True, False]])
    score = torch.tensor([[1.0, 9.0, 3.0], [3.0, 2.0, 8.0]])
    chosen = cap_clipped(candidates, score, torch.tensor(2.0))
    assert chosen.tolist() == [[False, False, True], [True, False, False]]  # tie at 3: first position wins


@pytest.mark.parametrize(("fn", "column"), [(ClipBAdvantageFn(), "entropys"), (ClipVAdvantageFn(), "necs")])
def test_missing_column_is_a_clear_error(fn: object, column: str) -> None:
    batch = make_batch(REWARDS, 3)
    del batch.extras[column]
    with pytest.raises(KeyError, match=column) as info:
        fn(batch)  # type: ignore[operator]
    assert "batch.extras" in str(info.value)


@pytest.mark.parametrize("fn", [ClipBAdvantageFn(mu=0.5), ClipVAdvantageFn(mu=0.5, max_frac=0.3)])
def test_nan_at_masked_positions_does_not_leak(fn: object) -> None:
    rewards = [[1.0, 0.0, 0.5], [0.2, 0.9], [3.0]]
    clean, clean_metrics = fn(make_batch(rewards, 6, seed=5))  # type: ignore[operator]
    dirty_batch = make_batch(rewards, 6, seed=5)
    plant_nan(dirty_batch)
    dirty, dirty_metrics = fn(dirty_batch)  # type: ignore[operator]
    torch.testing.assert_close(dirty.advantages, clean.advantages)
    assert torch.equal(dirty.extras[POLICY_LOSS_MASK], clean.extras[POLICY_LOSS_MASK])
    for key, value in clean_metrics.items():
        torch.testing.assert_close(dirty_metrics[key], value)


@pytest.mark.parametrize("fn", [ClipBAdvantageFn(mu=0.5), ClipVAdvantageFn(mu=0.5)])
def test_no_host_sync(fn: object) -> None:
    batch = make_batch([[1.0, 0.0, 0.5], [0.2, 0.9], [3.0]], 6, seed=2)
    with count_host_syncs() as log:
        fn(batch)  # type: ignore[operator]
    assert len(log) == 0, log.describe()


def test_singleton_and_zero_variance_groups_get_zero() -> None:
    batch = make_batch([[2.0], [0.3, 0.3, 0.3], [1.0, 0.0]], 4, seed=1)
    out, _ = ClipBAdvantageFn()(batch)
    assert float(out.advantages[:4].abs().max()) == 0.0
    assert float(out.advantages[4].abs().max()) > 0.0


def test_defaults() -> None:
    assert ClipBAdvantageFn.default_args() == {"epsilon": 1e-6, "mu": 2.5}
    assert ClipVAdvantageFn.default_args() == {"epsilon": 1e-6, "mu": 8.5, "max_frac": 1e-4}
    assert ClipBAdvantageFn.compute_in_trainer()
    assert ClipVAdvantageFn.compute_in_trainer()
