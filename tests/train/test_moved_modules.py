"""The module names of the flat ``train/`` layout still import, for one release, with a warning that
names the new place; the public entry points did not move."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import trinity_core.train
from trinity_core.train._moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_name_warns_and_gives_the_new_modules_names(old: str) -> None:
    name = f"trinity_core.train.{old}"
    sys.modules.pop(name, None)
    with pytest.warns(DeprecationWarning, match=rf"{name} moved to .*{MOVED[old][0]}"):
        module = importlib.import_module(name)
    new = importlib.import_module(MOVED[old][0])
    public = [n for n in getattr(new, "__all__", []) if not n.startswith("_")]
    assert public, f"{MOVED[old][0]} declares no public names"
    for attr in public:
        assert getattr(module, attr) is getattr(new, attr)


def test_names_that_moved_apart_are_found_where_they_went() -> None:
    from trinity_core.train.data.pairs import write_answer_experiences
    from trinity_core.train.learner.optimizer import make_optimizer
    from trinity_core.train.learner.staleness import keep_fresh
    from trinity_core.train.modes.runner import Runner

    old = {}
    for name in ("loop", "synchronizer", "teacher", "update"):
        sys.modules.pop(f"trinity_core.train.{name}", None)
        with pytest.warns(DeprecationWarning, match=f"trinity_core.train.{name} moved to"):
            old[name] = importlib.import_module(f"trinity_core.train.{name}")
    assert old["loop"].Trainer is Runner
    assert old["synchronizer"].keep_fresh is keep_fresh
    assert old["teacher"].write_answer_experiences is write_answer_experiences
    assert old["update"].make_optimizer is make_optimizer
    with pytest.raises(AttributeError, match="no 'nothing_here'"):
        old["update"].nothing_here  # noqa: B018


def test_the_old_explorer_and_learner_modules_are_the_packages_now() -> None:
    from trinity_core.train.explorer import Explorer
    from trinity_core.train.explorer.explorer import Explorer as ExplorerClass
    from trinity_core.train.learner import Learner
    from trinity_core.train.learner.learner import Learner as LearnerClass

    assert (Explorer, Learner) == (ExplorerClass, LearnerClass)


def test_the_public_entry_points_did_not_move() -> None:
    assert callable(trinity_core.train.train)
    assert {
        "DEFAULT_CONFIG",
        "RunDirError",
        "Task",
        "TaskDataError",
        "apply_overrides",
        "exact_match",
    } <= set(trinity_core.train.__all__)


def test_a_new_module_path_imports_without_a_warning() -> None:
    """Nothing in trinity-core still imports an old path (a fresh interpreter, warnings as errors)."""
    code = (
        "import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "import trinity_core.train, trinity_core.train.modes.runner, trinity_core.train.export\n"
        "import trinity_core.train.eval_run, trinity_core.train.data.pairs, trinity_core.cli.main\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
