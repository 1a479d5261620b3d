"""Comparison with trinity-rft 0.6.0 ``StepWiseGRPOAdvantageFn``: agreement where it is right (steps in
order, every task with two or more runs), and the documented differences
(docs/reference-differences.md: singleton-groups, step-wise-last-step)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from multistep_support import make_runs
from trinity_plugin_multistep import StepWiseGRPOAdvantageFn

from trinity_core.testing.reference import import_reference

pytestmark = pytest.mark.reference


def reference_cls() -> type:
    return import_reference(
        "trinity.algorithm.advantage_fn.multi_step_grpo_advantage"
    ).StepWiseGRPOAdvantageFn


def by_uid(exps: list) -> dict[str, float]:
    return {e.eid.uid: float(e.advantages[0]) for e in exps}


INFORMATIVE_TASK = st.lists(
    st.tuples(st.integers(0, 3).map(float), st.integers(1, 3)), min_size=2, max_size=4
).filter(lambda runs: len({r for r, _ in runs}) > 1)


@settings(max_examples=30, deadline=None)
@given(
    tasks=st.lists(INFORMATIVE_TASK, min_size=1, max_size=3),
    step_norm=st.booleans(),
    level=st.sampled_from(["group", "batch"]),
    threshold=st.sampled_from([None, 0.0, 1.0]),
)
def test_agrees_on_in_order_multi_run_tasks(
    tasks: list, step_norm: bool, level: str, threshold: float | None
) -> None:
    args = {"enable_step_norm": step_norm, "std_cal_level": level, "std_threshold": threshold}
    ours, our_metrics = StepWiseGRPOAdvantageFn(**args)(make_runs(tasks))
    theirs, their_metrics = reference_cls()(**args)(make_runs(tasks))
    a, b = by_uid(ours), by_uid(theirs)
    assert a.keys() == b.keys()
    for uid in a:
        assert a[uid] == pytest.approx(b[uid], rel=1e-5, abs=1e-5)
    for key in ("experience_count", "filtered_count", "skipped_group_ratio"):
        assert float(our_metrics[key]) == pytest.approx(their_metrics[key])
    for key in ("reward_mean/mean", "reward_std/max", "reward_std/min"):
        assert float(our_metrics[f"group_advantages/{key}"]) == pytest.approx(
            their_metrics[f"group_advantages/{key}"], rel=1e-5, abs=1e-6
        )


def test_out_of_order_steps_fool_the_reference_only() -> None:
    # Run 0: step 1 (reward 0) arrives before step 0 (reward 9); the reference takes step 0 as "last".
    def batch() -> list:
        exps = make_runs([[(0, 2), (2, 1)]])
        exps[0].reward = 9.0
        return [exps[1], exps[0], exps[2]]

    ours = by_uid(StepWiseGRPOAdvantageFn()(batch())[0])
    theirs = by_uid(reference_cls()()(batch())[0])
    run1 = "0/0/1/0/t0r1s0"
    a = 1 / (math.sqrt(2) + 1e-6)
    assert ours[run1] == pytest.approx(a)
    assert theirs[run1] == pytest.approx((2 - 5.5) / (math.sqrt(24.5) + 1e-6), rel=1e-5)


def test_single_run_task_gets_zero_where_the_reference_uses_the_raw_reward() -> None:
    ours, _ = StepWiseGRPOAdvantageFn()(make_runs([[(3.0, 2)]]))
    theirs, _ = reference_cls()()(make_runs([[(3.0, 2)]]))
    assert torch.equal(ours[0].advantages, torch.zeros_like(ours[0].advantages))
    assert float(theirs[0].advantages[0]) == pytest.approx(3.0 / (1 + 1e-6))
