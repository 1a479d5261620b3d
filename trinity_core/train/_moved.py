"""Imports of the modules ``trinity_core.train`` had before it was split into packages, for one release.

``import trinity_core.train.model`` (say) still works: it warns with a :class:`DeprecationWarning` naming
the module's new place and returns that module. A module whose contents went to several places is a
module that looks a name up in each of them, in order. Nothing in trinity-core imports an old path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["MOVED", "RENAMED", "install"]

MOVED: dict[str, tuple[str, ...]] = {
    "accelerator": ("trinity_core.train.modes.accelerator",),
    "async_explorer": ("trinity_core.train.modes.explorer_process",),
    "async_mode": ("trinity_core.train.modes.async_mode",),
    "balance": ("trinity_core.train.learner.balance",),
    "behaviour": ("trinity_core.train.explorer.behaviour",),
    "checkpoint": ("trinity_core.train.checkpoints.commit",),
    "checkpoint_legacy": ("trinity_core.train.checkpoints.legacy",),
    "checkpoint_state": ("trinity_core.train.checkpoints.state",),
    "columnar": ("trinity_core.train.explorer.columnar",),
    "critic": ("trinity_core.train.learner.critic",),
    "dataset_io": ("trinity_core.train.data.dataset_io",),
    "dataset_task": ("trinity_core.train.data.dataset_task",),
    "evaluation": (
        "trinity_core.train.explorer.evaluation",
        "trinity_core.lm.sampling",
    ),
    "experiences": ("trinity_core.train.explorer.experiences",),
    "expert": (
        "trinity_core.train.learner.expert",
        "trinity_core.train.data.pairs",
    ),
    "forward_call": ("trinity_core.lm.forward_call",),
    "loop": (
        "trinity_core.train.modes.runner",
        "trinity_core.train.learner.optimizer",
        "trinity_core.train.learner.logprobs",
    ),
    "lora": ("trinity_core.train.models.lora",),
    "model": ("trinity_core.train.models.policy",),
    "offline": ("trinity_core.train.data.stored",),
    "periodic": ("trinity_core.train.modes.periodic",),
    "plot": ("trinity_core.train.report.plot",),
    "profile": ("trinity_core.train.report.profile",),
    "prompts": ("trinity_core.train.data.prompts",),
    "reporting": ("trinity_core.train.report.reporting",),
    "result": ("trinity_core.train.report.result",),
    "reward_model": ("trinity_core.train.data.reward_model",),
    "rewards": ("trinity_core.train.data.rewards",),
    "rollout": ("trinity_core.lm.sampling",),
    "runner": ("trinity_core.train.modes.runner",),
    "sharding": ("trinity_core.train.modes.sharding",),
    "shared_prompt": ("trinity_core.lm.shared_prompt",),
    "step_gate": ("trinity_core.train.modes.step_gate",),
    "sync_check": ("trinity_core.testing.host_syncs",),
    "synchronizer": (
        "trinity_core.train.modes.synchronizer",
        "trinity_core.train.learner.staleness",
    ),
    "syncs": ("trinity_core.testing.host_syncs",),
    "tasks": ("trinity_core.train.data.tasks",),
    "teacher": (
        "trinity_core.train.learner.teacher",
        "trinity_core.train.data.pairs",
    ),
    "threads": ("trinity_core.train.modes.threads",),
    "trim": ("trinity_core.train.learner.trim",),
    "update": (
        "trinity_core.train.learner.logprobs",
        "trinity_core.train.learner.optimizer",
        "trinity_core.train.learner.micro_batches",
    ),
    "weights": ("trinity_core.train.models.dtype",),
    "workflow_step": ("trinity_core.train.explorer.workflow_step",),
}
"""Old module name under ``trinity_core.train`` -> the modules that hold its contents now. (The old
``explorer`` and ``learner`` modules are the packages of those names now, which export their names.)"""

RENAMED: dict[str, str] = {"Trainer": "Runner"}
"""Public names of the old modules that have another name now."""


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``trinity_core.train.<old name>`` and loads it as the module(s) it moved to."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec for an old module name, else None (the usual finders go on)."""
        package, _, name = fullname.rpartition(".")
        if package != "trinity_core.train" or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        """The module at its new place (or one reading several), after a warning naming the place."""
        new = MOVED[spec.name.rpartition(".")[2]]
        warnings.warn(
            f"{spec.name} moved to {' and '.join(new)}; import it from there (the old name goes in the "
            "next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        modules = [importlib.import_module(name) for name in new]
        if len(modules) == 1:
            return modules[0]
        joined = ModuleType(spec.name, f"Names of {spec.name}, now in {', '.join(new)}.")

        def lookup(attr: str) -> Any:
            for module in modules:
                for name in (attr, RENAMED.get(attr, attr)):
                    if hasattr(module, name):
                        return getattr(module, name)
            raise AttributeError(f"{spec.name} has no {attr!r} (its names moved to {', '.join(new)})")

        joined.__getattr__ = lookup  # type: ignore[method-assign]
        return joined

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was imported at its new place."""


def install() -> None:
    """Put the finder of old module names on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules())
