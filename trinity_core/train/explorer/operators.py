"""The experience operators of a run (``rollout.experience_pipeline``), the ``hooks`` operator, and the
check of what each operator returns.

The pipeline is the configured operators in order; the ``hooks`` operator (every
``trinity_process_experiences`` implementation, as a stage) runs first unless the list places it
elsewhere. A filter must return ``batch.select(rows)`` and a mapper the batch itself: :func:`check_output`
compares the rows by content (tokens and lengths, as a multiset), so rows that are not a subset of the
input, or columns whose shapes do not fit, stop the run with a message naming the operator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from trinity_core.batch import GROUP_LEVELS, ExperienceBatch, LazyExperiences
from trinity_core.components import ExperienceOperator, Metrics, OperatorContext
from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig
from trinity_core.experience import Experience
from trinity_core.hooks import run_experience_pipeline
from trinity_core.ops.segment import segment_var
from trinity_core.registry import PluginContractError

__all__ = ["HooksOperator", "Stage", "as_batch", "build_stages", "check_output", "zero_variance_share"]


class HooksOperator(ExperienceOperator):
    """Every ``trinity_process_experiences`` hook, in pipeline order (the hooks take and return lists, and
    may add or drop experiences)."""

    changes_rows: ClassVar[bool] = True

    def __call__(self, batch: ExperienceBatch, step: int) -> tuple[ExperienceBatch, Metrics]:
        """The hooks on the batch's experiences, as a new batch."""
        pm = self.context.plugin_manager
        if pm is None or not pm.hook.trinity_process_experiences.get_hookimpls():
            return batch, {}
        exps = run_experience_pipeline(pm, list(batch.experiences), step)
        levels = [level for level in GROUP_LEVELS if level in batch.group_index]
        return ExperienceBatch.from_experiences(
            exps, pad_token_id=batch.pad_token_id, group_levels=levels
        ), {}


@dataclass(frozen=True)
class Stage:
    """One operator of the pipeline: its name (metrics ``buffer/<label>/...``) and who provides it."""

    label: str
    operator: ExperienceOperator
    provider: str

    @property
    def describe(self) -> str:
        """``experience operator 'x' (dist 1.0)``, as messages name it."""
        return f"experience operator {self.label!r} ({self.provider})"


def build_stages(config: ResolvedConfig, pm: Any, max_new_tokens: int) -> list[Stage]:
    """The run's operators, built with their context; the hooks first unless listed."""
    from trinity_core import registry

    context = OperatorContext(config.algorithm.repeat_times, max_new_tokens, pm)
    entries = list(config.rollout.experience_pipeline)
    names = [e.name for e in entries]
    stages = [] if "hooks" in names else [Stage("hooks", HooksOperator(context=context), "trinity-core")]
    for i, entry in enumerate(entries):
        where = f"rollout.experience_pipeline[{i}]"
        try:
            record = registry.record("operator", entry.name)
            op = registry.create("operator", entry.name, entry.args, context=context)
        except registry.ComponentArgsError as exc:
            raise ConfigError([ConfigProblem(f"{where}.args", str(exc))]) from None
        except registry.PluginError as exc:
            raise ConfigError([ConfigProblem(f"{where}.name", str(exc))]) from None
        label = entry.name if names.count(entry.name) == 1 else f"{entry.name}_{i}"
        stages.append(Stage(label, op, record.entry_point.provider))
    return stages


def as_batch(experiences: Sequence[Experience], pad_token_id: int) -> ExperienceBatch:
    """The batch of ``experiences``: the one a lazily made list belongs to, else built from them."""
    if isinstance(experiences, LazyExperiences) and isinstance(experiences.batch, ExperienceBatch):
        return experiences.batch
    return ExperienceBatch.from_experiences(list(experiences), pad_token_id=pad_token_id)


def _fingerprints(batch: ExperienceBatch) -> Tensor:
    """One int64 per row from its prompt and response tokens and lengths (equal rows, equal prints)."""
    n, P = len(batch), batch.max_prompt_length
    ids = batch.input_ids.to("cpu", torch.int64)
    gen = torch.Generator().manual_seed(20250917)
    width = max(ids.shape[1], 1)
    weights = torch.randint(1, 2**61, (2, width), generator=gen)
    cols = torch.arange(ids.shape[1])
    from_prompt_end = (P - 1 - cols).clamp_min(0)  # prompts are left-padded: count from their end
    in_prompt = (cols[None, :] >= (P - batch.prompt_lengths.cpu())[:, None]) & (cols[None, :] < P)
    in_response = (cols[None, :] >= P) & (cols[None, :] < P + batch.response_lengths.cpu()[:, None])
    w = torch.where(in_prompt, weights[0][from_prompt_end], 0) + torch.where(
        in_response, weights[1][(cols - P).clamp_min(0)], 0
    )
    prints = (ids * w).sum(1)  # int64 arithmetic wraps: a hash, not a number
    return (
        prints * 1_000_003 + batch.prompt_lengths.cpu() * 4099 + batch.response_lengths.cpu() if n else prints
    )


def _shape_problem(after: ExperienceBatch) -> str | None:
    """What does not fit in ``after``'s columns, or None."""
    n, width = len(after), after.max_response_length
    per_row = {
        "rewards": after.rewards,
        "has_reward": after.has_reward,
        "prompt_lengths": after.prompt_lengths,
        "response_lengths": after.response_lengths,
        **{f"group_index[{k!r}]": v for k, v in after.group_index.items()},
    }
    for name, value in per_row.items():
        if value.shape != (n,):
            return f"{name} has shape {tuple(value.shape)} for {n} rows"
    if after.input_ids.shape[0] != n:
        return f"input_ids has {after.input_ids.shape[0]} rows for {n} experiences"
    for name in (
        "action_mask",
        "logprobs",
        "advantages",
        "returns",
        "token_level_reward",
        "teacher_logprobs",
    ):
        value = getattr(after, name)
        if value is not None and (value.dim() != 2 or value.shape[0] != n or value.shape[1] < width):
            return f"{name} has shape {tuple(value.shape)}, expected ({n}, {width})"
    return None


def check_output(stage: Stage, before: ExperienceBatch, after: Any, step: int) -> None:
    """Raise :class:`PluginContractError` unless ``after`` is ``before`` or a subset of its rows with
    columns of fitting shapes."""
    fix = "return the batch itself (a mapper) or batch.select(rows) (a filter)"
    if not isinstance(after, ExperienceBatch):
        raise PluginContractError(
            f"{stage.describe} returned {type(after).__name__} at step {step}, not (ExperienceBatch, "
            f"metrics); {fix}"
        )
    problem = _shape_problem(after)
    if problem is None and len(after.experiences) != len(after):
        problem = f"{len(after.experiences)} experiences for {len(after)} rows"
    if problem is not None:
        raise PluginContractError(
            f"{stage.describe} changed the shape of the batch at step {step}: {problem}; {fix}"
        )
    if stage.operator.changes_rows or after is before:
        return
    have, want = _fingerprints(before), _fingerprints(after)
    pool, pool_counts = torch.unique(have, return_counts=True)
    asked, asked_counts = torch.unique(want, return_counts=True)
    where = torch.searchsorted(pool, asked).clamp_max(max(pool.numel() - 1, 0))
    known = (pool.numel() > 0) & (pool[where] == asked) if asked.numel() else torch.ones(0, dtype=torch.bool)
    if not bool(known.all()) or bool((asked_counts > pool_counts[where]).any()):
        raise PluginContractError(
            f"{stage.describe} returned {len(after)} rows at step {step} that are not a subset of the "
            f"{len(before)} it was given (new or repeated rows); {fix}"
        )


def zero_variance_share(batch: ExperienceBatch) -> Tensor:
    """The share of ``batch``'s task groups whose scored rewards are all equal (no group-relative
    signal); 0 for an empty batch."""
    if "task" not in batch.group_index or len(batch) == 0:
        return torch.zeros((), dtype=torch.float64)
    index, groups = batch.group_index["task"], batch.num_groups["task"]
    variance = segment_var(batch.rewards, index, groups, valid_mask=batch.has_reward)
    return (variance == 0).double().mean()
