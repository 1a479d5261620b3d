"""Rows of an ExperienceBatch: ``select`` equals the batch of the selected experiences (any subset, groups
renumbered by first appearance), a lazily made batch stays lazy and makes only its rows, new rewards
reach the experiences, batches concatenate."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trinity_core.batch import ExperienceBatch, LazyExperiences
from trinity_core.batch_rows import concat_batches, replace_rewards
from trinity_core.experience import EID, Experience
from trinity_core.testing.experience_operator import kit_batch, kit_experiences


def experiences(tasks: list[int]) -> list[Experience]:
    return [
        Experience(
            eid=EID(batch=1, task=t, run=i),
            tokens=torch.arange(2 + (i % 3) + 1, dtype=torch.int32) + i,
            prompt_length=2,
            reward=float(i % 4) / 2 if i % 5 else None,
            truncate_status="response_truncated" if i % 3 == 0 else None,
        )
        for i, t in enumerate(tasks)
    ]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=10), st.data())
def test_select_equals_the_batch_of_the_selected_experiences(tasks: list[int], data: st.DataObject) -> None:
    exps = experiences(tasks)
    keep = data.draw(st.lists(st.booleans(), min_size=len(exps), max_size=len(exps)))
    batch = ExperienceBatch.from_experiences(exps)
    sub = batch.select(torch.tensor(keep))
    chosen = [e for e, k in zip(exps, keep, strict=True) if k]
    want = ExperienceBatch.from_experiences(chosen)
    assert list(sub.experiences) == chosen
    assert sub.group_index["task"].tolist() == want.group_index["task"].tolist()
    assert sub.group_keys == want.group_keys
    torch.testing.assert_close(sub.rewards, want.rewards, equal_nan=True)
    assert sub.truncated.tolist() == want.truncated.tolist()
    assert sub.response_lengths.tolist() == want.response_lengths.tolist()
    R, P = want.max_response_length, want.max_prompt_length  # select keeps the widths: compare the rows
    assert torch.equal(sub.responses[:, :R], want.responses)
    assert torch.equal(sub.prompts[:, -P:] if P else sub.prompts[:, :0], want.prompts)


def test_a_lazy_batch_stays_lazy_and_makes_only_its_rows() -> None:
    batch = kit_batch(lazy=True)
    sub = batch.select(torch.tensor([1, 2, 5]))
    assert isinstance(sub.experiences, LazyExperiences)
    assert not sub.experiences.materialized
    assert not batch.experiences.materialized
    assert sub.source_rewards() == [0.5, 1.0, 1.0]
    made = list(sub.experiences)
    want = kit_experiences()
    assert [(e.eid.task, e.eid.run, e.reward) for e in made] == [
        (want[i].eid.task, want[i].eid.run, want[i].reward) for i in (1, 2, 5)
    ]
    # The made experiences view the subset's columns.
    sub.action_mask[0, 0] = False
    assert not bool(made[0].action_mask[0])


def test_replace_rewards_reaches_made_and_unmade_experiences() -> None:
    lazy = kit_batch(lazy=True)
    replace_rewards(lazy, lazy.rewards * 2 - 1)
    assert [e.reward for e in lazy.experiences] == [2 * r - 1 for r in (0, 0.5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0)]
    eager = ExperienceBatch.from_experiences(experiences([0, 0, 1]))
    replace_rewards(eager, torch.tensor([3.0, 4.0, 5.0]))
    assert [e.reward for e in eager.experiences] == [None, 4.0, 5.0]  # row 0 had no reward: keeps none
    unscored = ExperienceBatch.from_experiences(experiences([0, 0, 0, 0, 0, 0]))  # row 0 and 5 have none
    replace_rewards(unscored, torch.zeros(6))
    assert [e.reward for e in unscored.experiences] == [None, 0.0, 0.0, 0.0, 0.0, None]


def test_concat_keeps_rows_and_groups_in_order() -> None:
    a = ExperienceBatch.from_experiences(experiences([0, 0]))
    b = kit_batch(lazy=True).select(torch.tensor([4, 5]))
    both = concat_batches([a, b])
    assert len(both) == 4
    assert both.group_keys["task"] == [*a.group_keys["task"], *b.group_keys["task"]]
    assert concat_batches([a]) is a
