"""The conformance kit for the buffer pillar's kinds: the core's own selectors, the hooks operator and the
fifo priority pass it; broken ones fail the check that names their fault."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from trinity_core.batch import ExperienceBatch
from trinity_core.components import ExperienceOperator, PriorityFn, ReplayStats, TaskSelector
from trinity_core.experience import EID, Experience
from trinity_core.testing import (
    ConformanceError,
    ExperienceOperatorConformance,
    PriorityFnConformance,
    Subject,
    TaskSelectorConformance,
    check_names,
)
from trinity_core.testing.experience_operator import (
    check_experience_operator_keeps_experiences_in_step,
    check_experience_operator_returns_a_subset_or_itself,
)
from trinity_core.testing.priority_fn import (
    check_priority_fn_one_finite_score_per_group,
    check_priority_fn_scores_follow_their_groups,
)
from trinity_core.testing.task_selector import (
    check_task_selector_indices_in_range,
    check_task_selector_randomness_from_the_generator,
    check_task_selector_state_resumes_the_selection,
)


class TestShuffle(TaskSelectorConformance):
    component = "shuffle"


class TestSequential(TaskSelectorConformance):
    component = "sequential"


class TestRandom(TaskSelectorConformance):
    component = "random"


class TestHooks(ExperienceOperatorConformance):
    component = "hooks"


class TestFifo(PriorityFnConformance):
    component = "fifo"


def test_the_new_kinds_have_checks() -> None:
    assert "task_selector_state_resumes_the_selection" in check_names("task_selector")
    assert "experience_operator_returns_a_subset_or_itself" in check_names("operator")
    assert "priority_fn_scores_follow_their_groups" in check_names("priority_fn")
    for kind in ("task_selector", "operator", "priority_fn"):
        assert "args_fields_documented" in check_names(kind)


# ---------------------------------------------------------------- broken selectors


class PastTheEnd(TaskSelector):
    """Rows 1..n (one past the last row for n = size)."""

    def get_indices(self, batch_size: int) -> Tensor:
        return torch.arange(1, batch_size + 1)


class GlobalRandom(TaskSelector):
    """Rows from torch's global generator."""

    def get_indices(self, batch_size: int) -> Tensor:
        return torch.randint(0, self.size, (batch_size,))


class ForgetsPosition(TaskSelector):
    """Consecutive rows, without saving its position."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.position = 0

    def get_indices(self, batch_size: int) -> Tensor:
        rows = (self.position + torch.arange(batch_size)) % self.size
        self.position += batch_size
        return rows


# ---------------------------------------------------------------- broken operators


class AddsARow(ExperienceOperator):
    """Returns its batch with the first row twice."""

    def __call__(self, batch: ExperienceBatch, step: int) -> tuple[ExperienceBatch, dict[str, Any]]:
        return batch.select(torch.cat([torch.zeros(1, dtype=torch.int64), torch.arange(len(batch))])), {}


class RebuildsRows(ExperienceOperator):
    """Builds new experiences with other tokens."""

    def __call__(self, batch: ExperienceBatch, step: int) -> tuple[ExperienceBatch, dict[str, Any]]:
        exps = [
            Experience(
                eid=EID(batch=0, task=0, run=i), tokens=torch.tensor([1, 2, 3]), prompt_length=1, reward=0.0
            )
            for i in range(2)
        ]
        return ExperienceBatch.from_experiences(exps), {}


class RewardsOutOfStep(ExperienceOperator):
    """Changes batch.rewards without telling the experiences."""

    def __call__(self, batch: ExperienceBatch, step: int) -> tuple[ExperienceBatch, dict[str, Any]]:
        batch.rewards = batch.rewards + 1
        return batch, {}


# ---------------------------------------------------------------- broken priority functions


class OneScore(PriorityFn):
    """A single score for everything."""

    def __call__(self, stats: ReplayStats, version: int) -> Tensor:
        return torch.zeros(1, dtype=torch.float64)


class ByPosition(PriorityFn):
    """Scores by position in the list, not by the group."""

    def __call__(self, stats: ReplayStats, version: int) -> Tensor:
        return torch.arange(len(stats), dtype=torch.float64)


@pytest.mark.parametrize(
    ("kind", "cls", "check", "words"),
    [
        ("task_selector", PastTheEnd, check_task_selector_indices_in_range, "values in [0, size)"),
        ("task_selector", GlobalRandom, check_task_selector_randomness_from_the_generator, "self.generator"),
        ("task_selector", ForgetsPosition, check_task_selector_state_resumes_the_selection, "state_dict()"),
        (
            "operator",
            AddsARow,
            check_experience_operator_returns_a_subset_or_itself,
            "not a subset",
        ),
        ("operator", RebuildsRows, check_experience_operator_returns_a_subset_or_itself, "subset"),
        (
            "operator",
            RewardsOutOfStep,
            check_experience_operator_keeps_experiences_in_step,
            "replace_rewards",
        ),
        ("priority_fn", OneScore, check_priority_fn_one_finite_score_per_group, "shape (len(stats),)"),
        ("priority_fn", ByPosition, check_priority_fn_scores_follow_their_groups, "its own statistics"),
    ],
)
def test_broken_components_fail_their_check(kind: str, cls: type, check: Any, words: str) -> None:
    subject = Subject(kind, cls.__name__, cls, "<unregistered>")
    with pytest.raises(ConformanceError, match=None) as failure:
        check(subject)
    assert words in str(failure.value)
