"""Comparison with the published reference (trinity-rft 0.6.0 ``opmd``/``asymre`` advantages and the
``opmd`` loss): agreement on random inputs where it is right, documented differences where it is not."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from opmd_support import interleave, make_group_exps, scores
from trinity_plugin_opmd import ASYMREGroupAdvantage, OPMDGroupAdvantage, OPMDPolicyLossFn

from trinity_core.testing.reference import import_reference

pytestmark = pytest.mark.reference


def ref_module(name: str) -> object:
    return import_reference(f"trinity.algorithm.{name}")


@st.composite
def multi_member_batches(draw: st.DrawFn) -> tuple[list[list[float]], list[int]]:
    """Groups of 2..6 rewards (no singleton: the reference treats those differently)."""
    sizes = draw(st.lists(st.integers(2, 6), min_size=1, max_size=5))
    rewards = [draw(st.lists(st.integers(-6, 6).map(lambda k: k / 3), min_size=n, max_size=n)) for n in sizes]
    return rewards, list(draw(st.permutations(range(sum(sizes)))))


@settings(max_examples=20, deadline=None)
@given(
    data=multi_member_batches(),
    baseline=st.sampled_from(["mean", "logavgexp"]),
    tau=st.sampled_from([0.5, 1.0, 3.0]),
)
def test_opmd_agrees_with_the_reference(data: tuple, baseline: str, tau: float) -> None:
    rewards, order = data
    ref = ref_module("advantage_fn.opmd_advantage").OPMDGroupAdvantage(opmd_baseline=baseline, tau=tau)  # type: ignore[attr-defined]
    ours, our_metrics = OPMDGroupAdvantage(opmd_baseline=baseline, tau=tau)(
        interleave(make_group_exps(rewards), order)
    )
    theirs, their_metrics = ref(interleave(make_group_exps(rewards), order))
    assert [e.eid.uid for e in ours] == [e.eid.uid for e in theirs]
    # Their float32 statistics: a zero-variance group can be an ulp off 0 (zero-variance-groups).
    torch.testing.assert_close(scores(ours), scores(theirs), rtol=1e-5, atol=1e-5)
    for key, value in their_metrics.items():
        assert float(our_metrics[key]) == pytest.approx(value, rel=1e-5, abs=1e-5), key


@settings(max_examples=20, deadline=None)
@given(data=multi_member_batches(), shift=st.sampled_from([-0.1, -0.5, 0.2]))
def test_asymre_agrees_with_the_reference(data: tuple, shift: float) -> None:
    rewards, order = data
    ref = ref_module("advantage_fn.asymre_advantage").ASYMREGroupAdvantage(baseline_shift=shift)  # type: ignore[attr-defined]
    ours, our_metrics = ASYMREGroupAdvantage(baseline_shift=shift)(
        interleave(make_group_exps(rewards), order)
    )
    theirs, their_metrics = ref(interleave(make_group_exps(rewards), order))
    torch.testing.assert_close(scores(ours), scores(theirs), rtol=1e-5, atol=1e-5)
    for key, value in their_metrics.items():
        assert float(our_metrics[key]) == pytest.approx(value, rel=1e-5, abs=1e-5), key


@pytest.mark.parametrize("baseline", ["mean", "logavgexp"])
def test_opmd_singleton_gets_zero_where_the_reference_uses_the_raw_reward(baseline: str) -> None:
    ref = ref_module("advantage_fn.opmd_advantage").OPMDGroupAdvantage(opmd_baseline=baseline)  # type: ignore[attr-defined]
    ours, our_metrics = OPMDGroupAdvantage(opmd_baseline=baseline)(make_group_exps([[0.0, 1.0], [3.0]]))
    theirs, their_metrics = ref(make_group_exps([[0.0, 1.0], [3.0]]))
    torch.testing.assert_close(scores(ours)[:2], scores(theirs)[:2], rtol=1e-6, atol=1e-6)
    assert float(scores(ours)[2]) == 0.0
    assert float(scores(theirs)[2]) == 3.0
    # Their singleton baseline 0 enters the baseline statistics; ours is the singleton's reward.
    assert their_metrics["group_advantages/group_baseline/max"] < 3.0
    assert float(our_metrics["group_advantages/group_baseline/max"]) == 3.0


def test_asymre_singleton_and_reward_mean_metric_differ_as_documented() -> None:
    ref = ref_module("advantage_fn.asymre_advantage").ASYMREGroupAdvantage()  # type: ignore[attr-defined]
    ours, our_metrics = ASYMREGroupAdvantage()(make_group_exps([[4.0]]))
    theirs, their_metrics = ref(make_group_exps([[4.0]]))
    assert float(scores(theirs)[0]) == 4.0  # raw reward, baseline 0
    assert float(scores(ours)[0]) == pytest.approx(0.1)  # −δ, like a zero-variance group
    assert their_metrics["group_advantages/reward_mean/mean"] == pytest.approx(0.1)  # baseline − δ
    assert float(our_metrics["group_advantages/reward_mean/mean"]) == 4.0


def test_unknown_baseline_name_is_rejected_where_the_reference_uses_logavgexp() -> None:
    ref = ref_module("advantage_fn.opmd_advantage").OPMDGroupAdvantage(opmd_baseline="median")  # type: ignore[attr-defined]
    theirs, _ = ref(make_group_exps([[0.0, 1.0]]))
    expected, _ = OPMDGroupAdvantage(opmd_baseline="logavgexp")(make_group_exps([[0.0, 1.0]]))
    torch.testing.assert_close(scores(theirs), scores(expected), rtol=1e-6, atol=1e-6)
    with pytest.raises(Exception, match="opmd_baseline"):
        OPMDGroupAdvantage(opmd_baseline="median")


def loss_inputs(seed: int, b: int = 5, t: int = 7) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, t, generator=g) > 0.35
    mask[:, 0] = True  # every row has a token: the reference counts empty rows in seq-mean modes
    return {
        "logprob": -torch.rand(b, t, generator=g, dtype=torch.float64) * 4,
        "action_mask": mask,
        "advantages": torch.randn(b, t, generator=g, dtype=torch.float64),
    }


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    tau=st.floats(0.0, 5.0),
    mode=st.sampled_from(["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]),
)
def test_opmd_loss_and_gradient_agree_with_the_reference(seed: int, tau: float, mode: str) -> None:
    ref = ref_module("policy_loss_fn.opmd_policy_loss").OPMDPolicyLossFn(tau=tau, loss_agg_mode=mode)  # type: ignore[attr-defined]
    x = loss_inputs(seed)
    results = []
    for fn in (OPMDPolicyLossFn(tau=tau, loss_agg_mode=mode), ref):
        lp = x["logprob"].clone().requires_grad_(True)
        loss, metrics = fn(lp, response_mask=x["action_mask"], advantages=x["advantages"])
        loss.backward()
        results.append((loss.detach(), lp.grad, float(metrics["opmd_loss"])))
    (ours, our_grad, our_metric), (theirs, their_grad, their_metric) = results
    # Their masked_mean adds 1e-8 to the token count.
    torch.testing.assert_close(ours, theirs, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(our_grad, their_grad, rtol=1e-7, atol=1e-12)
    assert our_metric == pytest.approx(their_metric, rel=1e-7, abs=1e-9)


def test_opmd_loss_metric_is_a_tensor_where_the_reference_syncs() -> None:
    x = loss_inputs(0)
    ref = ref_module("policy_loss_fn.opmd_policy_loss").OPMDPolicyLossFn()  # type: ignore[attr-defined]
    _, theirs = ref(x["logprob"], response_mask=x["action_mask"], advantages=x["advantages"])
    _, ours = OPMDPolicyLossFn()(x["logprob"], response_mask=x["action_mask"], advantages=x["advantages"])
    assert isinstance(theirs["opmd_loss"], float)  # .item(): a host sync per micro-batch
    assert isinstance(ours["opmd_loss"], torch.Tensor)
    assert ours["opmd_loss"].dim() == 0
