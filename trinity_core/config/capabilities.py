"""What a run can provide against what its preset and components declare they need.

A preset asks for a critic with ``use_critic``; presets and components list further needs in their
``requires`` class attribute (:attr:`trinity_core.components.Component.requires`): parts of the run
(``critic``, ``reference``, ``teacher``, ``expert_data``), a run mode (``mode:both``) or batch columns
that one of those parts fills (``values`` from the critic, ``teacher_logprobs`` from the teacher, ...).
Advantage functions' ``required_fields`` count as column needs too.

:func:`check_capabilities` compares them with what the resolved configuration supplies and refuses the
run, one line per missing piece naming the config key that supplies it, before anything is written to
the run directory (``trinity config validate`` and ``trinity train`` call it). Names are looked up in
the tables below; no preset or component is special-cased.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trinity_core import registry
from trinity_core.config.errors import ConfigError, ConfigProblem
from trinity_core.config.models import COMPONENT_KEYS
from trinity_core.config.resolved import ResolvedConfig

__all__ = ["COLUMN_SOURCES", "PARTS", "Part", "check_capabilities", "missing_capabilities", "needs_of"]


@dataclass(frozen=True)
class Part:
    """A part of a run that a component may need: what it is, whether a config has it, and the fix.

    Attributes:
        what: the part in words, used in the refusal ("a teacher model").
        key: the config key that supplies it.
        provided: ``provided(config, preset)`` is True when the run has the part.
        hint: what to set, appended to the refusal.
    """

    what: str
    key: str
    provided: Callable[[ResolvedConfig, Any], bool]
    hint: str


PARTS: dict[str, Part] = {
    "critic": Part(
        "a critic (value model)",
        "model.critic_path",
        # A critic is built for every preset with use_critic; critic_path, where the config has it,
        # names its weights.
        lambda c, preset: bool(preset.use_critic or getattr(c.model, "critic_path", None)),
        "use a preset with use_critic (e.g. algorithm.algorithm_type: ppo) or set model.critic_path",
    ),
    "reference": Part(
        "a reference model",
        "model.ref_model_path",
        lambda c, preset: True,  # a frozen copy of the initial policy when ref_model_path is unset
        "set model.ref_model_path",
    ),
    "teacher": Part(
        "a teacher model",
        "model.teacher_path",
        lambda c, preset: bool(c.model.teacher_path),
        "set model.teacher_path to a local Hugging Face model folder (docs/training.md, 'Teacher')",
    ),
    "expert_data": Part(
        "expert data",
        "data.expert_path",
        lambda c, preset: bool(c.data.expert_path) and c.mode == "both",
        "set data.expert_path to a jsonl/parquet file of prompt/response pairs or stored experiences, "
        "in mode both (docs/training.md, 'Expert data')",
    ),
}
"""Every part a component may require, by name."""

COLUMN_SOURCES: dict[str, str] = {
    "values": "critic",
    "teacher_logprobs": "teacher",
    "expert_mask": "expert_data",
    "ref_logprob": "reference",
    "ref_logprobs": "reference",
}
"""Batch columns that only a part of the run fills: column -> part name."""


def needs_of(cls: Any) -> set[str]:
    """The part names (and ``mode:<m>`` entries) a preset or component class asks for."""
    names = set(getattr(cls, "requires", frozenset()))
    names |= {n for n in getattr(cls, "required_fields", ()) if n in COLUMN_SOURCES}
    if getattr(cls, "use_critic", False):
        names.add("critic")
    return {COLUMN_SOURCES.get(n, n) for n in names}


def _declarers(config: ResolvedConfig) -> list[tuple[str, str, Any]]:
    """``(config key, description, class)`` of the preset and every selected component."""
    alg = config.algorithm
    preset = registry.resolve("algorithm", alg.algorithm_type)
    found = [("algorithm.algorithm_type", f"algorithm {alg.algorithm_type!r}", preset)]
    for key, kind in COMPONENT_KEYS.items():
        name = getattr(alg, key)
        if name in (None, "none"):
            continue
        found.append((f"algorithm.{key}", f"{key} {name!r}", registry.resolve(kind, name)))
    return found


def missing_capabilities(config: ResolvedConfig) -> list[ConfigProblem]:
    """One problem per part some declaration needs and the run lacks (none in mode ``explore``)."""
    if config.mode == "explore":  # no learner: nothing consumes critic, teacher or expert rows
        return []
    declarers = _declarers(config)
    preset = declarers[0][2]
    problems: list[ConfigProblem] = []
    wanting: dict[str, list[str]] = {}  # part -> who needs it, in declaration order
    for key, who, cls in declarers:
        for name in sorted(needs_of(cls)):
            if name.startswith("mode:"):
                wanted = name.removeprefix("mode:")
                if config.mode != wanted:
                    problems.append(
                        ConfigProblem("mode", f"{who} runs only in mode {wanted!r}, not {config.mode!r}")
                    )
            elif name not in PARTS:
                problems.append(
                    ConfigProblem(
                        key,
                        f"{who} ({cls.__module__}.{cls.__qualname__}) requires {name!r}, which no run "
                        f"provides",
                        hint=f"its plugin should name parts {sorted(PARTS)}, 'mode:<mode>' or columns "
                        f"{sorted(COLUMN_SOURCES)}",
                    )
                )
            else:
                wanting.setdefault(name, []).append(who)
    for name, whos in wanting.items():
        part = PARTS[name]
        if not part.provided(config, preset):
            verb = "needs" if len(whos) == 1 else "need"
            problems.append(
                ConfigProblem(
                    part.key, f"{' and '.join(whos)} {verb} {part.what}, which this run lacks", hint=part.hint
                )
            )
    return problems


def check_capabilities(config: ResolvedConfig) -> None:
    """Refuse a run that cannot provide what its preset or components need.

    Raises:
        ConfigError: one problem per missing part, each naming the config key that supplies it.
    """
    problems = missing_capabilities(config)
    if problems:
        raise ConfigError(problems)
