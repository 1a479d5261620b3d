"""Thread budgets of the explorer and the learner while they overlap (modes/threads.py)."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
import torch

from trinity_core.config import resolve_config
from trinity_core.train.modes.synchronizer import InlineExecutor
from trinity_core.train.modes.threads import ThreadBudget, child_environment, explorer_pool, thread_budget


def _config(**sections: Any) -> Any:
    return resolve_config({"trainer": {"total_steps": 2}, **sections})


@pytest.fixture(autouse=True)
def _keep_threads() -> Any:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_synchronizer_keys_win_then_trainer_threads_then_half_of_torch() -> None:
    torch.set_num_threads(4)
    assert thread_budget(_config()) == ThreadBudget(explorer=2, learner=2)
    own = thread_budget(_config(trainer={"total_steps": 2, "threads": 3}))
    assert (own.explorer, own.learner) == (3, 3)
    split = thread_budget(
        _config(
            trainer={"total_steps": 2, "threads": 3},
            synchronizer={"explorer_threads": 1, "learner_threads": 2},
        )
    )
    assert (split.explorer, split.learner) == (1, 2)


def test_lock_step_runs_inline_and_leaves_the_threads_alone() -> None:
    torch.set_num_threads(2)
    pool = explorer_pool(
        _config(synchronizer={"sync_offset": 0, "explorer_threads": 1, "learner_threads": 1})
    )
    assert isinstance(pool, InlineExecutor)
    assert torch.get_num_threads() == 2


def test_offset_one_gives_each_thread_its_budget_and_restores_the_learners() -> None:
    torch.set_num_threads(3)
    sync = {"sync_offset": 1, "explorer_threads": 1, "learner_threads": 2}
    pool = explorer_pool(_config(synchronizer=sync))
    try:
        in_explorer = pool.submit(lambda: (threading.current_thread().name, torch.get_num_threads())).result()
        assert in_explorer[0].startswith("explorer")
        assert in_explorer[1] == 1
        assert torch.get_num_threads() == 2  # the learner's (calling) thread
    finally:
        pool.shutdown(wait=True)
    assert torch.get_num_threads() == 3


def test_the_explorer_process_environment_is_set_for_the_spawn_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    with child_environment(1):
        assert (os.environ["OMP_NUM_THREADS"], os.environ["MKL_NUM_THREADS"]) == ("1", "1")
        assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert os.environ["OMP_NUM_THREADS"] == "8"
    assert "OMP_WAIT_POLICY" not in os.environ
    assert "MKL_NUM_THREADS" not in os.environ
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's choice stands
    with child_environment(2):
        assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
