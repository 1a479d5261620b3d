"""The columnar step: when every stage of a step reads columns, its experiences travel as one batch.

A step's experiences go rollout -> ``trinity_process_experiences`` -> add strategy or pipeline advantage
function -> buffer -> the trainer's :class:`~trinity_core.batch.ExperienceBatch`. When no hook implements
the pipeline stage, no add strategy is configured, and the advantage function either runs in the trainer
or is a group advantage whose ``process(list)`` is exactly its ``process_batch`` on the batch
(:meth:`~trinity_core.components.advantage.GroupComputation.columnar_equivalent`), the trainer builds
the batch from the rollout (:func:`~trinity_core.train.explorer.experiences.rollout_batch`), computes the
advantages on its columns, and writes the batch to the buffer; the ``Experience`` objects are made only if
something reads them. The result is the same batch, advantages and metrics as the per-experience path
(tested); :func:`columnar_levels` says when the step may take it.
"""

from __future__ import annotations

from typing import Any

import torch

from trinity_core.batch import GROUP_LEVELS, ExperienceBatch, GroupLevel, LazyExperiences
from trinity_core.components import GroupAdvantage, Metrics
from trinity_core.experience import Experience

__all__ = ["columnar_levels", "pipeline_advantage_on_batch"]


def columnar_levels(components: Any, pm: Any) -> tuple[GroupLevel, ...] | None:
    """The group levels to build when the step can carry its experiences as one batch, else None.

    Args:
        components: the run's :class:`~trinity_core.train.build.Components`.
        pm: the plugin manager (any ``trinity_process_experiences`` implementation needs the list).
    """
    if pm.hook.trinity_process_experiences.get_hookimpls() or components.add_strategy is not None:
        return None
    advantage = components.advantage
    if components.advantage_in_trainer:
        return GROUP_LEVELS
    if (
        isinstance(advantage, GroupAdvantage)
        and type(advantage).__call__ is GroupAdvantage.__call__
        and advantage.columnar_equivalent()
    ):
        return tuple(dict.fromkeys((*advantage.batch_group_levels(), advantage.group_level)))
    return None


def pipeline_advantage_on_batch(
    advantage: GroupAdvantage, batch: ExperienceBatch
) -> tuple[ExperienceBatch | list[Experience], Metrics]:
    """``advantage(list)`` computed on the columns of ``batch``: the batch with advantages, and the metrics.

    ``batch.advantages`` is ``process_batch``'s result masked by ``action_mask`` (float32) and
    ``batch.returns`` an equal copy, as ``write_advantages`` sets them per experience. When the result
    would reorder or drop experiences (groups not contiguous, or ``keep`` not all True), the list path
    runs instead on the batch's experiences and its list is returned.
    """
    result = advantage.process_batch(batch)
    values, metrics = result[0], result[1]
    keep = result[2] if len(result) == 3 else None
    n, width = len(batch), batch.max_response_length
    if values.shape[0] != n or values.dim() not in (1, 2) or (values.dim() == 2 and values.shape[1] < width):
        raise ValueError(
            f"{type(advantage).name()}.process_batch returned advantages of shape {tuple(values.shape)} for "
            f"{n} experiences with responses of up to {width} tokens; expected ({n},) or ({n}, >= {width})"
        )
    index = batch.group_index[advantage.group_level]
    in_group_order = n < 2 or bool((index[1:] >= index[:-1]).all())
    if not in_group_order or (keep is not None and not bool(keep.all())):
        return advantage(list(batch.experiences))
    mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
    scores = values.detach().to(torch.float32)
    scores = scores[:, None] if scores.dim() == 1 else scores[:, :width]
    batch.advantages = torch.where(mask.to(torch.bool), scores, 0.0)
    batch.returns = batch.advantages.clone()
    source = batch.experiences
    if not isinstance(source, LazyExperiences) or source.materialized:
        # The component made the experiences (it read them): they get the advantages too, as views.
        batch.write_back("advantages")
        batch.write_back("returns")
    return batch, metrics
