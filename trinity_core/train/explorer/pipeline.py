"""The explorer's one path from a step's experiences to the buffer, for rollouts and workflows alike.

::

    experiences -> rollout.experience_pipeline: the operators     (operate; the trinity_process_experiences
                                                                    hooks are the ``hooks`` operator)
                -> the preset's add strategy                       (store; it writes the buffer itself)
                or its pipeline-side advantage function
                -> the buffer

The experiences arrive as a sequence: a rollout's are a :class:`~trinity_core.lazy.LazyExperiences`
over one columnar batch (:func:`~trinity_core.train.explorer.experiences.rollout_batch`), whose
``Experience`` objects are made only if a stage reads them; a workflow's are the list it made. Stages
that read columns (a group advantage with an exact columnar path, the buffer) take the batch while the
experiences were never made; a stage that reads objects makes them, once. The result is the same either
way (tested).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import Tensor

from trinity_core.batch import GROUP_LEVELS, ExperienceBatch, GroupLevel, LazyExperiences
from trinity_core.buffer import BufferWriter
from trinity_core.components import GroupAdvantage, Metrics
from trinity_core.components.faults import ComponentFault, call_component, component_label, finite_flag
from trinity_core.experience import Experience
from trinity_core.hooks import run_experience_pipeline
from trinity_core.registry import PluginContractError
from trinity_core.train.explorer.columnar import columnar_levels, pipeline_advantage_on_batch
from trinity_core.train.explorer.operators import HooksOperator, Stage, as_batch, check_output

__all__ = ["ExperiencePipeline", "Operated"]

Written = ExperienceBatch | Sequence[Experience]


@dataclass
class Operated:
    """What the operators left of a step's experiences.

    Attributes:
        experiences: the kept experiences (a lazily made list while every operator read columns).
        metrics: the operators' metrics, ``buffer/<operator>/<name>``.
        emptied_by: the operator after which nothing was left (None: something was left, or nothing
            came in).
        rows_in: how many experiences came in.
    """

    experiences: Sequence[Experience]
    metrics: Metrics = field(default_factory=dict)
    emptied_by: Stage | None = None
    rows_in: int = 0


class ExperiencePipeline:
    """A step's experiences through the operators and the advantage into the buffer.

    Args:
        components: the run's components (add strategy, pipeline-side advantage).
        pm: the plugin manager (the ``trinity_process_experiences`` stage).
        writer: the buffer the experiences go to.
        event_loop: runs the buffer's and the add strategy's coroutines.
        stages: the operators of ``rollout.experience_pipeline`` (default: the hooks alone).
        pad_token_id: pads a batch built from a list of experiences.
    """

    def __init__(
        self,
        components: Any,
        pm: Any,
        writer: BufferWriter,
        event_loop: asyncio.AbstractEventLoop,
        stages: list[Stage] | None = None,
        pad_token_id: int = 0,
    ) -> None:
        """Decide once which stages the run has and whether its steps can stay columnar."""
        self.components, self.pm, self.writer, self.event_loop = components, pm, writer, event_loop
        self.hooks = bool(pm.hook.trinity_process_experiences.get_hookimpls())
        self.columnar = columnar_levels(components, pm)
        self.stages = stages if stages is not None else []
        self.pad_token_id = pad_token_id
        self.operators = [s for s in self.stages if not isinstance(s.operator, HooksOperator)]
        self.max_extra_rounds = max((int(s.operator.max_extra_rounds) for s in self.stages), default=0)

    @property
    def group_levels(self) -> tuple[GroupLevel, ...]:
        """The group levels a rollout's batch is built with (only those a columnar stage reads, and the
        task groups the operators and metrics read)."""
        levels = self.columnar if self.columnar is not None else GROUP_LEVELS
        return levels if "task" in levels else ("task", *levels)

    def __call__(self, experiences: Sequence[Experience], step: int) -> Metrics:
        """Operate on and store ``experiences`` of step ``step``; return the advantage's metrics."""
        return self.store(self.operate(experiences, step).experiences, step)

    def operate(
        self, experiences: Sequence[Experience], step: int, bypass: frozenset[str] = frozenset()
    ) -> Operated:
        """The operators (but those labelled in ``bypass``) on ``experiences`` of step ``step`` (see
        :class:`Operated`)."""
        current: Sequence[Experience] = experiences
        metrics: Metrics = {}
        for stage in (s for s in self.stages if s.label not in bypass):
            if isinstance(stage.operator, HooksOperator):  # a list in, a list out, as the hooks always ran
                if self.hooks:
                    current = run_experience_pipeline(self.pm, list(current), step)
                continue
            batch = as_batch(current, self.pad_token_id)
            out = call_component("operator", stage.operator, stage.operator, batch, step)
            if not isinstance(out, tuple) or len(out) != 2:
                raise PluginContractError(
                    f"{stage.describe} returned {type(out).__name__} at step {step}; return (batch, metrics)"
                )
            check_output(stage, batch, out[0], step)
            metrics.update({f"buffer/{stage.label}/{k}": v for k, v in dict(out[1]).items()})
            current = out[0].experiences
            if len(current) == 0 and len(batch) > 0:
                return Operated(current, metrics, stage, len(experiences))
        return Operated(current, metrics, rows_in=len(experiences))

    def store(self, experiences: Sequence[Experience], step: int) -> Metrics:
        """The add strategy, or the advantage and the buffer; return the advantage's metrics (with the
        ``_finite/<kind>`` flag of the advantages it computed, :mod:`trinity_core.components.faults`)."""
        comps = self.components
        if comps.add_strategy is not None:
            strategy, listed = comps.add_strategy, list(experiences)
            run = self.event_loop.run_until_complete
            _, added = call_component("add_strategy", strategy, run, strategy.add(listed, step))
            return {**cast(Metrics, added), **dict([_listed_flag("add_strategy", listed)])}
        written: Written = experiences
        metrics: Metrics = {}
        if comps.advantage is not None and not comps.advantage_in_trainer:
            written, metrics = self._advantage(experiences)
            flag = (
                finite_flag("advantage_fn", written.advantages)
                if isinstance(written, ExperienceBatch) and written.advantages is not None
                else _listed_flag("advantage_fn", cast(Sequence[Experience], written))
            )
            metrics = {**metrics, **dict([flag])}
        self._write(written)
        return metrics

    def _advantage(self, experiences: Sequence[Experience]) -> tuple[Written, Metrics]:
        """The pipeline-side advantage: on the columns while the experiences were never made."""
        advantage = self.components.advantage
        if self.columnar is not None and _unmade(experiences):
            batch = cast(LazyExperiences[ExperienceBatch], experiences).batch
            assert batch is not None  # a rollout batch is attached to its experiences when built
            on_batch = pipeline_advantage_on_batch
            return call_component("advantage_fn", advantage, on_batch, cast(GroupAdvantage, advantage), batch)
        result = call_component("advantage_fn", advantage, advantage, list(experiences))
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], list)):
            raise ComponentFault(
                f"{component_label('advantage_fn', advantage)} returned {type(result).__name__}; return "
                "(experiences, metrics)"
            )
        return result[0], result[1]

    def _write(self, written: Written) -> None:
        """Into the buffer: a batch whose experiences were never made is stored as it is."""
        if isinstance(written, ExperienceBatch):
            self.event_loop.run_until_complete(self.writer.write_batch(written))
        elif _unmade(written):
            batch = cast(LazyExperiences[ExperienceBatch], written).batch
            assert batch is not None
            self.event_loop.run_until_complete(self.writer.write_batch(batch))
        else:
            self.event_loop.run_until_complete(self.writer.write(list(written)))


def _listed_flag(kind: str, experiences: Sequence[Experience]) -> tuple[str, Tensor]:
    """The finiteness flag of the advantages of ``experiences`` (those that have some)."""
    values = [e.advantages.reshape(-1) for e in experiences if e.advantages is not None]
    return finite_flag(kind, torch.cat(values) if values else torch.zeros(0))


def _unmade(experiences: Sequence[Experience]) -> bool:
    """Whether ``experiences`` are the lazily made experiences of a batch, not made yet."""
    return isinstance(experiences, LazyExperiences) and not experiences.materialized
