"""Experience operators: filters and mappers over a step's experiences (kind ``experience_operator``).

The explorer runs ``rollout.experience_pipeline`` — an ordered list of operators — on each step's
experiences, as one columnar :class:`~trinity_core.batch.ExperienceBatch`, before the advantage and the
buffer. Each operator takes the batch and returns a batch with metrics:

* a **mapper** returns the batch it was given, with columns changed in place or replaced by tensors of
  the same shape (rewards: :func:`~trinity_core.batch_rows.replace_rewards`, which keeps the experiences
  in step);
* a **filter** returns ``batch.select(keep)`` (a boolean mask or increasing row numbers): a subset of the
  rows, columns unchanged.

The explorer checks every result: rows that are not a subset of the input, columns whose shapes do not
fit, or a batch whose experiences no longer match its rows stop the run with a message naming the
operator. A filter may ask the explorer to top the step up: with ``max_extra_rounds = k`` the explorer
samples more prompts, up to ``k`` extra rounds, until ``rollout.prompts_per_step`` task groups pass
the pipeline (DAPO's dynamic sampling).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from trinity_core.batch import ExperienceBatch
from trinity_core.components.base import Component, Metrics

__all__ = ["ExperienceOperator", "OperatorContext"]


@dataclass(frozen=True)
class OperatorContext:
    """What an operator may need to know about the run (not configuration of its own).

    Attributes:
        group_size: responses per prompt (``algorithm.repeat_times``).
        max_new_tokens: the response budget in tokens (None: unknown, e.g. in a unit test).
        plugin_manager: the run's pluggy manager (the ``hooks`` operator runs its hooks).
    """

    group_size: int = 1
    max_new_tokens: int | None = None
    plugin_manager: Any = None


class ExperienceOperator(Component, ABC):
    """Base of experience operators: ``Operator(context=..., **args)`` and ``op(batch, step)``.

    Example (a filter: keep responses with a positive reward)::

        class PositiveOnly(ExperienceOperator):
            \"\"\"Keep rows with r > 0.\"\"\"

            def __call__(self, batch, step):
                keep = batch.has_reward & (batch.rewards > 0)
                return batch.select(keep), {"dropped": (~keep).sum().double()}

    Metrics are 0-d tensors (no ``.item()``), logged as ``buffer/<operator name>/<metric>``.

    Attributes:
        max_extra_rounds: extra sampling rounds this operator asks for when it leaves fewer than
            ``rollout.prompts_per_step`` task groups (0: none; declare it as an ``Args`` field to make
            it configurable).
        when_empty: ``"error"`` (default): a step this operator leaves empty, after every extra round,
            stops the run; ``"keep"``: the step trains on its first round without this operator
            (declare it as an ``Args`` field to make it configurable).
        changes_rows: True for an operator whose result may hold rows its input did not (the ``hooks``
            operator: hooks may add experiences); the explorer then skips the subset check.
        context: what the run provides (:class:`OperatorContext`).
    """

    kind: ClassVar[str] = "operator"
    max_extra_rounds: int = 0
    when_empty: str = "error"
    changes_rows: ClassVar[bool] = False

    def __init__(self, *, context: OperatorContext | None = None, **args: Any) -> None:
        self.context = context if context is not None else OperatorContext()
        super().__init__(**args)

    @abstractmethod
    def __call__(self, batch: ExperienceBatch, step: int) -> tuple[ExperienceBatch, Metrics]:
        """Filter or map the experiences of explore step ``step``.

        Args:
            batch: the step's experiences (group index ``task`` always present).
            step: the explore step (0-based).

        Returns:
            ``(batch, metrics)``: the given batch (a mapper) or ``batch.select(rows)`` (a filter).
        """
