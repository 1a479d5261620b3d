"""Comparison with trinity-rft 0.6.0 (``RECGroupedAdvantage``, ``RECPolicyLossFn``): agreement where the
reference is right, and the documented differences (docs/reference-differences.md: singleton-groups,
rec-balance-drop, rec-weights, clamped-ratios)."""

from __future__ import annotations

from itertools import product

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rec_support import make_group_exps, scores
from trinity_plugin_rec import RECGroupedAdvantage, RECPolicyLossFn

from trinity_core.testing.reference import import_reference

pytestmark = pytest.mark.reference


def ref_advantage() -> type:
    return import_reference("trinity.algorithm.advantage_fn.rec_advantage").RECGroupedAdvantage


def ref_loss() -> type:
    return import_reference("trinity.algorithm.policy_loss_fn.rec_policy_loss").RECPolicyLossFn


NON_SINGLETON = st.lists(
    st.lists(st.integers(0, 4).map(float), min_size=2, max_size=6), min_size=1, max_size=4
)


@settings(max_examples=30, deadline=None)
@given(groups=NON_SINGLETON, std_normalize=st.booleans())
def test_advantages_agree_without_drop(groups: list, std_normalize: bool) -> None:
    ours, our_metrics = RECGroupedAdvantage(std_normalize=std_normalize)(make_group_exps(groups))
    theirs, their_metrics = ref_advantage()(std_normalize=std_normalize)(make_group_exps(groups))
    assert [e.eid.uid for e in ours] == [e.eid.uid for e in theirs]
    torch.testing.assert_close(scores(ours), scores(theirs), rtol=1e-5, atol=1e-5)
    for k in ("reward_mean/mean", "reward_std/max", "drop_balance/mean"):
        assert float(our_metrics[f"group_advantages/{k}"]) == pytest.approx(
            their_metrics[f"group_advantages/{k}"], rel=1e-5, abs=1e-6
        )


@settings(max_examples=30, deadline=None)
@given(groups=st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=2, max_size=7), min_size=1, max_size=4))
def test_balance_drop_agrees_with_keep_dropped_on_binary_rewards(groups: list) -> None:
    # With 0/1 rewards every negative is alike, so the values do not depend on which ones are dropped:
    # per group, the multiset of advantages (0 for dropped ones) must agree.
    ours, our_metrics = RECGroupedAdvantage(drop="balance", keep_dropped=True)(make_group_exps(groups))
    theirs, their_metrics = ref_advantage()(drop="balance")(make_group_exps(groups))
    for task in range(len(groups)):
        a = sorted(float(e.advantages[0]) for e in ours if e.eid.task == task)
        b = sorted(float(e.advantages[0]) for e in theirs if e.eid.task == task)
        assert a == pytest.approx(b, abs=1e-6)
    assert float(our_metrics["group_advantages/drop_balance/mean"]) == pytest.approx(
        their_metrics["group_advantages/drop_balance/mean"]
    )


def test_dropped_samples_are_removed_by_default_where_the_reference_keeps_them() -> None:
    groups = [[1.0, 0.0, 0.0, 0.0, 0.0]]
    theirs, _ = ref_advantage()(drop="balance")(make_group_exps(groups))
    ours, metrics = RECGroupedAdvantage(drop="balance")(make_group_exps(groups))
    assert len(theirs) == 5  # three with advantage 0 still dilute token-mean
    assert sum(float(e.advantages.abs().sum()) == 0.0 for e in theirs) == 3
    assert len(ours) == 2
    assert int(metrics["filtered_count"]) == 3


def test_singletons_crash_the_reference_and_get_zero_here() -> None:
    with pytest.raises(NameError):
        ref_advantage()()(make_group_exps([[3.0]]))
    out, _ = RECGroupedAdvantage()(make_group_exps([[3.0]]))
    assert scores(out).tolist() == [0.0]


LOSS_COMBOS = [
    (c, w, r)
    for c, w, r in product(
        ["none", "one-side", "gspo-one-side", "two-side", "ring"],
        ["none", "importance_sampling", "gspo_importance_sampling", "advantage"],
        ["none", "k2", "forward-kl"],
    )
    if w != "gspo_importance_sampling" or c == "gspo-one-side"
]


@pytest.mark.parametrize(("clip", "weight", "reg"), LOSS_COMBOS)
def test_loss_agrees_on_random_inputs(clip: str, weight: str, reg: str) -> None:
    g = torch.Generator().manual_seed(LOSS_COMBOS.index((clip, weight, reg)))
    b, t = 4, 9
    old = -torch.rand(b, t, generator=g) * 3
    lp = old + 0.4 * torch.randn(b, t, generator=g)
    adv = torch.randn(b, 1, generator=g).expand(b, t).contiguous()
    mask = torch.rand(b, t, generator=g) > 0.3
    mask[:, 0] = True
    args = {
        "clip_mode": clip,
        "weight": weight,
        "regularizer": reg,
        "regularizer_coef": 0.2,
        "temp": 0.8,
        "epsilon_low_prime": 0.6,
        "epsilon_high_prime": 2.0,
    }
    results = []
    for fn in (RECPolicyLossFn(**args), ref_loss()(**args)):
        x = lp.clone().requires_grad_(True)
        loss, metrics = fn(x, old_logprob=old, action_mask=mask, advantages=adv)
        loss.backward()
        results.append((loss.detach(), x.grad, float(metrics["pg_clipfrac"])))
    (l_o, g_o, c_o), (l_r, g_r, c_r) = results
    torch.testing.assert_close(l_o, l_r, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(g_o, g_r, rtol=1e-5, atol=1e-7)
    assert c_o == pytest.approx(c_r, abs=1e-6)


def test_gspo_weight_without_gspo_clip_is_a_name_error_in_the_reference_only() -> None:
    args = {"clip_mode": "two-side", "weight": "gspo_importance_sampling"}
    kwargs = {
        "old_logprob": torch.zeros(1, 2),
        "action_mask": torch.ones(1, 2),
        "advantages": torch.ones(1, 2),
    }
    with pytest.raises(NameError):
        ref_loss()(**args)(torch.full((1, 2), -0.1), **kwargs)
    loss, _ = RECPolicyLossFn(**args)(torch.full((1, 2), -0.1), **kwargs)
    assert bool(torch.isfinite(loss))


def test_unclamped_reference_ratio_overflows_ours_does_not() -> None:
    args = {"clip_mode": "none", "weight": "importance_sampling"}
    kwargs = {
        "old_logprob": torch.zeros(1, 2),
        "action_mask": torch.ones(1, 2),
        "advantages": torch.ones(1, 2),
    }
    lp = torch.tensor([[100.0, -1.0]])
    theirs, _ = ref_loss()(**args)(lp, **kwargs)
    ours, _ = RECPolicyLossFn(**args)(lp, **kwargs)
    assert not bool(torch.isfinite(theirs))
    assert bool(torch.isfinite(ours))
