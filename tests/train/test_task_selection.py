"""Task selection: the core's selectors (golden orders), mixing weights and schedules (counts derived by
hand), feedback reaching the selectors, pass-rate metrics, state for resuming, and the bad-input
messages of ``tasks``."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor

from trinity_core import registry
from trinity_core.components import TaskSelector
from trinity_core.config import ConfigError, resolve_config
from trinity_core.config.models import RunConfig
from trinity_core.registry import PluginContractError
from trinity_core.train.data.dataset_io import TaskDataError
from trinity_core.train.data.selection import SelectedTasks, apportion, pass_rate_metrics, weight_at
from trinity_core.train.data.selectors import RandomSelector, SequentialSelector, ShuffleSelector
from trinity_core.train.data.tasks import build_task


def resolved(**sections: Any) -> Any:
    base: dict[str, Any] = {"algorithm": {"algorithm_type": "grpo", "repeat_times": 2}}
    return resolve_config(RunConfig.model_validate({**base, **sections}))


# ---------------------------------------------------------------- the core's selectors


def test_sequential_reads_rows_in_order_and_wraps() -> None:
    selector = SequentialSelector(size=5, generator=torch.Generator().manual_seed(0))
    assert [selector.get_indices(n).tolist() for n in (3, 3, 4)] == [[0, 1, 2], [3, 4, 0], [1, 2, 3, 4]]
    assert selector.state_dict()["epoch"] == 2
    assert selector.state_dict()["cursor"] == 0


def test_shuffle_is_a_seeded_permutation_per_epoch() -> None:
    gen = torch.Generator().manual_seed(7)
    selector = ShuffleSelector(size=4, generator=gen)
    got = torch.cat([selector.get_indices(3), selector.get_indices(3)]).tolist()
    # By the formula: seed drawn once from the task generator, epoch e's order randperm(seed + e).
    seed = int(torch.randint(0, 2**62, (1,), generator=torch.Generator().manual_seed(7)))
    orders = [torch.randperm(4, generator=torch.Generator().manual_seed(seed + e)).tolist() for e in (0, 1)]
    assert got == orders[0] + orders[1][:2]


def test_random_draws_distinct_rows_within_a_step() -> None:
    gen = torch.Generator().manual_seed(3)
    rows = RandomSelector(size=6, generator=gen).get_indices(4)
    assert rows.tolist() == torch.randperm(6, generator=torch.Generator().manual_seed(3))[:4].tolist()
    assert len(set(RandomSelector(size=3).get_indices(5).tolist())) <= 3  # repeats past the size


# ---------------------------------------------------------------- weights


def test_weight_schedules_interpolate_linearly() -> None:
    schedule = [(0, 1.0), (10, 0.0), (20, 0.5)]
    assert [weight_at(schedule, s) for s in (0, 5, 10, 15, 30)] == [1.0, 0.5, 0.0, 0.25, 0.5]
    assert weight_at(0.3, 99) == 0.3


def test_counts_follow_the_shares_with_the_rounding_carried() -> None:
    credit = [0.0, 0.0, 0.0]
    # 16 prompts at 0.4 / 0.3 / 0.3: owed 6.4, 4.8, 4.8 -> 6, 4, 4 and the 2 left to the largest fractions.
    assert apportion(16, [0.4, 0.3, 0.3], credit) == [6, 5, 5]
    assert credit == pytest.approx([0.4, -0.2, -0.2])
    # Owed 6.8, 4.6, 4.6 -> 6, 4, 4; fractions .8, .6, .6: the first two (a tie goes to the earlier).
    assert apportion(16, [0.4, 0.3, 0.3], credit) == [7, 5, 4]
    totals = [13, 10, 9]
    for _ in range(98):
        totals = [t + c for t, c in zip(totals, apportion(16, [0.4, 0.3, 0.3], credit), strict=True)]
    assert totals == [640, 480, 480]  # 100 steps: exactly the shares


# ---------------------------------------------------------------- a mixture


class Recording(TaskSelector):
    """Rows 0, 1, 2, ... and every feedback kept."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.next, self.heard = 0, []

    def get_indices(self, batch_size: int) -> Tensor:
        rows = (self.next + torch.arange(batch_size)) % self.size
        self.next += batch_size
        return rows

    def update(self, indices: Tensor, values: Tensor) -> None:
        self.heard.append((indices.tolist(), values.tolist()))

    def state_dict(self) -> dict[str, Any]:
        return {"next": self.next}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.next = state["next"]

    def metrics(self, indices: Tensor) -> dict[str, Tensor]:
        return {"drawn": torch.tensor(float(indices.numel()))}


@pytest.fixture
def recording() -> Any:
    registry.register("task_selector", "recording", Recording, replace=True)
    yield
    registry.unregister("task_selector", "recording")


MIX = {
    "mix": [
        {"name": "last_digit", "pool_size": 5, "weight": 3.0},
        {"name": "copy", "pool_size": 4, "weight": [[0, 1.0], [4, 0.0]]},
    ],
    "selector": "recording",
}


def test_a_mixture_splits_each_step_by_weight_and_selects_per_task_set(recording: None) -> None:
    task = build_task(resolved(tasks=MIX))
    assert isinstance(task, SelectedTasks)
    gen = torch.Generator().manual_seed(0)
    first = task.draw(4, gen, step=0)  # weights 3 : 1
    assert [(p.member, p.count, p.indices.tolist()) for p in first.picks] == [(0, 3, [0, 1, 2]), (1, 1, [0])]
    assert first.rows[:3] == [task.members[0].pool[i] for i in range(3)]
    assert first.rows[3] == task.members[1].pool[0]
    late = task.draw(4, gen, step=4)  # copy's weight reached 0
    assert [(p.member, p.count) for p in late.picks] == [(0, 4)]
    assert task.fields == ("prompt", "answer")
    assert set(task.alphabet()) == set("0123456789+=%abcde")
    assert task.max_response_tokens() == 4  # copy's 3 letters and EOS


def test_feedback_reaches_each_selector_with_its_rows_mean_rewards(recording: None) -> None:
    task = build_task(resolved(tasks=MIX))
    draw = task.draw(4, torch.Generator().manual_seed(0), step=0)
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, math.nan], [0.5, 0.5]], dtype=torch.float64)
    metrics = task.feedback(draw, rewards)
    assert task.members[0].selector.heard == [([0, 1, 2], [0.5, 1.0, 0.0])]
    assert task.members[1].selector.heard == [([0], [0.5])]
    assert metrics["buffer/taskset/last_digit/reward_mean"].item() == pytest.approx(0.5)
    assert metrics["buffer/taskset/copy/prompts"].item() == 1.0
    assert metrics["buffer/taskset/copy/drawn"].item() == 1.0


def test_the_state_resumes_the_selection_and_refuses_other_task_sets(recording: None) -> None:
    config = resolved(tasks=MIX)
    task = build_task(config)
    gen = torch.Generator().manual_seed(0)
    task.draw(4, gen, step=0)
    state = task.state_dict()
    expected = task.draw(4, gen, step=1).rows
    again = build_task(config)
    again.load_state_dict(state)
    assert again.draw(4, torch.Generator().manual_seed(0), step=1).rows == expected
    other = build_task(resolved(tasks={**MIX, "mix": MIX["mix"][:1]}))
    with pytest.raises(TaskDataError, match="task sets"):
        other.load_state_dict(state)


def test_the_evaluation_reads_each_task_sets_own_held_out_rows(recording: None) -> None:
    task = build_task(resolved(tasks={**MIX, "mix": [MIX["mix"][0], {**MIX["mix"][1], "eval": False}]}))
    plain = registry.create("task", "last_digit", {})
    assert task.eval_rows(6, seed=0) == plain.eval_rows(6, seed=0)


def test_pass_rate_metrics_by_hand() -> None:
    rewards = torch.tensor(
        [[1, 1, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0], [1, 1, 0, math.nan]], dtype=torch.float64
    )
    m = {k: v.item() for k, v in pass_rate_metrics(rewards, success=1.0).items()}
    assert m["buffer/pass_rate/mean"] == pytest.approx((1 + 0.25 + 0 + 2 / 3) / 4)
    hist = [m[f"buffer/pass_rate_hist/{b}"] for b in ("none", "low", "high", "all")]
    assert hist == [0.25, 0.25, 0.25, 0.25]
    assert m["buffer/zero_variance_prompts"] == 0.5


# ---------------------------------------------------------------- bad input


class PastTheEnd(TaskSelector):
    """Returns the row after the last."""

    def get_indices(self, batch_size: int) -> Tensor:
        return torch.full((batch_size,), self.size)


class TooFew(TaskSelector):
    """Returns one row fewer than asked."""

    def get_indices(self, batch_size: int) -> Tensor:
        return torch.zeros(batch_size - 1, dtype=torch.int64)


@pytest.mark.parametrize(("cls", "words"), [(PastTheEnd, "row 5 of task set"), (TooFew, "must return 4")])
def test_a_selector_breaking_its_contract_is_named(cls: type, words: str) -> None:
    registry.register("task_selector", "broken", cls, replace=True)
    try:
        task = build_task(resolved(tasks={"pool_size": 5, "selector": "broken"}))
        with pytest.raises(PluginContractError, match=words) as failure:
            task.draw(4, torch.Generator(), step=0)
        assert "task selector 'broken' (<in-process>" in str(failure.value)
        assert "fix the selector or choose another (tasks.selector)" in str(failure.value)
    finally:
        registry.unregister("task_selector", "broken")


@pytest.mark.parametrize(
    ("tasks", "path", "words"),
    [
        (
            {"mix": [{"name": "last_digit", "weight": 0.0}, {"name": "copy", "weight": 0}]},
            "tasks.mix",
            "sum to 0",
        ),
        (
            {"mix": [{"name": "last_digit", "weight": [[0, 1.0], [5, 0.0]]}]},
            "tasks.mix",
            "at step 5",
        ),
        ({"selector": "sequential"}, "tasks.pool_size", "set tasks.pool_size: N"),
        ({"selector": "no_such_selector", "pool_size": 3}, "tasks.selector", "unknown task selector"),
        ({"mix": []}, "tasks.mix", "empty mixture"),
        ({"name": "copy", "mix": [{"name": "last_digit"}]}, "tasks.mix", "either tasks.name"),
        ({"mix": [{"name": "copy"}, {"name": "copy"}]}, "tasks.mix", "share a label"),
    ],
)
def test_bad_tasks_sections_are_one_problem_at_their_path(
    tasks: dict[str, Any], path: str, words: str
) -> None:
    with pytest.raises(ConfigError) as failure:
        build_task(resolved(tasks=tasks))
    problem = failure.value.problems[0]
    assert problem.path == path
    assert words in str(problem)


def test_negative_weights_are_refused_when_the_config_is_read() -> None:
    with pytest.raises(Exception, match="must be >= 0"):
        RunConfig.model_validate({"tasks": [{"name": "copy", "weight": -1}]})


def test_a_task_list_is_a_mixture() -> None:
    config = RunConfig.model_validate({"tasks": [{"name": "copy", "weight": 2}]})
    assert config.tasks.mix is not None
    assert config.tasks.mix[0].weight == 2.0
