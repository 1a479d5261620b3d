"""The column-wise experiences of a rollout."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rollout_support import ROLLOUT_CASES, assert_same_experience, random_rollout

from trinity_core.experience import EID, Experience
from trinity_core.lm.sampling import Rollout
from trinity_core.train.explorer.experiences import rollout_experiences


def _by_constructor(
    ro: Rollout, rewards: list[float | None], step: int, G: int, base: int
) -> list[Experience]:
    """The reference: the constructor on each response's real tokens."""
    out = []
    for i, r in enumerate(rewards):
        if r is None:
            continue
        p = int(ro.prompt_mask[i].sum())
        tokens = torch.cat(
            [ro.prompt_ids[i, ro.prompt_ids.shape[1] - p :], ro.response_ids[i, : ro.response_lengths[i]]]
        )
        out.append(
            Experience(
                eid=EID(batch=step, task=base + i // G, run=i % G),
                tokens=tokens.to(torch.int32),
                prompt_length=p,
                reward=r,
                truncate_status="response_truncated" if bool(ro.truncated[i]) else None,
            )
        )
    return out


@settings(max_examples=40, deadline=None)
@given(
    ROLLOUT_CASES,
    st.integers(0, 3),
    st.integers(0, 2**16),
)
def test_rollout_experiences_equal_the_constructor(
    case: tuple[int, list[tuple[int, int, float | None]]], step: int, seed: int
) -> None:
    G, rows = case
    ro = random_rollout([p for p, _, _ in rows], [r for _, r, _ in rows], seed)
    rewards = [w for _, _, w in rows]
    got = rollout_experiences(ro, rewards, step=step, group_size=G, task_offset=5)
    want = _by_constructor(ro, rewards, step, G, 5)
    assert len(got) == len(want) == sum(w is not None for w in rewards)
    for a, b in zip(got, want, strict=True):
        assert_same_experience(a, b)
    assert len({e.eid.uid for e in got}) == len(got)


def test_rollout_experiences_share_no_element() -> None:
    ro = random_rollout([3, 2, 3, 1], [2, 4, 1, 3], seed=0)
    exps = rollout_experiences(ro, [1.0, 0.0, 1.0, 0.0], step=0, group_size=2)
    for name in ("tokens", "action_mask"):
        for i, e in enumerate(exps):
            before = [getattr(o, name).clone() for o in exps]
            getattr(e, name).fill_(0 if name == "tokens" else False)
            for j, o in enumerate(exps):
                if j != i:
                    assert torch.equal(getattr(o, name), before[j]), (name, i, j)
    assert all(e.info == {} and e.metrics == {} for e in exps)
    assert exps[0].info is not exps[1].info


def test_rollout_experiences_report_an_empty_prompt() -> None:
    ro = random_rollout([2, 2], [1, 1], seed=0)
    ro.prompt_mask[1] = False
    with pytest.raises(ValueError, match="prompt_length > 0"):
        rollout_experiences(ro, [1.0, 1.0], step=0, group_size=2)


def test_rollout_experiences_check_the_reward_count() -> None:
    with pytest.raises(ValueError, match="3 rewards for a rollout of 2"):
        rollout_experiences(random_rollout([1, 1], [1, 1], 0), [1.0, 1.0, 1.0], step=0, group_size=1)
