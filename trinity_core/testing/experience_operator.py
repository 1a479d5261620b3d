"""Checks of experience operators: what they return is their input or a subset of its rows with fitting
columns, the experiences stay in step with the batch, the columnar batch (experiences never made) and the
same experiences as a list give the same result, metrics are scalars.

The kit's batch: three task groups of four responses with rewards ``[0, 0.5, 1, 1]``, ``[1, 1, 1, 1]``
(no signal) and ``[0, 0, 0, 0]``, varied lengths, one truncated response per group; built once from
experiences and once column-wise as a rollout builds it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from trinity_core.batch import ExperienceBatch, LazyExperiences
from trinity_core.experience import EID, Experience
from trinity_core.registry import PluginContractError
from trinity_core.testing._core import ConformanceError, Subject, check

__all__ = ["kit_batch", "kit_experiences"]

REWARDS = (0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0)
LENGTHS = (2, 5, 8, 3, 1, 8, 4, 2, 6, 8, 3, 7)


def kit_experiences() -> list[Experience]:
    """The kit's twelve experiences (prompts of 3 tokens, responses of :data:`LENGTHS`, budget 8)."""
    out = []
    for i, (reward, length) in enumerate(zip(REWARDS, LENGTHS, strict=True)):
        tokens = torch.arange(3 + length, dtype=torch.int32) % 13 + 1 + i
        out.append(
            Experience(
                eid=EID(batch=0, task=i // 4, run=i % 4),
                tokens=tokens,
                prompt_length=3,
                reward=reward,
                truncate_status="response_truncated" if length == 8 else None,
                info={"model_version": 0},
            )
        )
    return out


def kit_batch(lazy: bool) -> ExperienceBatch:
    """The kit's batch, from experiences, or (``lazy``) with experiences made only when read."""
    exps = kit_experiences()
    batch = ExperienceBatch.from_experiences(exps)
    if not lazy:
        return batch
    rewards = [e.reward for e in exps]

    def make(columns: ExperienceBatch) -> list[Experience]:
        made = kit_experiences()  # tensor fields as views of the columns, as a rollout's are made
        columns.write_back("action_mask", made)
        return made

    source: LazyExperiences[ExperienceBatch] = LazyExperiences(len(exps), make, rewards, 0)
    columnar = ExperienceBatch(**{**batch.__dict__, "experiences": source})
    source.attach(columnar)
    return columnar


def _apply(subject: Subject, lazy: bool) -> tuple[ExperienceBatch, ExperienceBatch, Any]:
    from trinity_core.train.explorer.operators import Stage, check_output

    op = subject.build(**_runtime())
    before = kit_batch(lazy)
    out = op(before, 0)
    if not isinstance(out, tuple) or len(out) != 2:
        raise ConformanceError(f"the operator returned {type(out).__name__}", "return (batch, metrics)")
    after, metrics = out
    try:
        check_output(Stage(subject.name, op, subject.distribution), kit_batch(lazy), after, 0)
    except PluginContractError as exc:
        raise ConformanceError(str(exc), "return the batch itself (a mapper) or batch.select(rows)") from None
    return before, after, metrics


def _runtime() -> dict[str, Any]:
    from trinity_core.components import OperatorContext

    return {"context": OperatorContext(group_size=4, max_new_tokens=8)}


@check("operator")
def check_experience_operator_returns_a_subset_or_itself(subject: Subject) -> None:
    """it returns (batch, metrics) with the input's rows or a subset of them, columns of fitting shapes"""
    for lazy in (False, True):
        _apply(subject, lazy)


@check("operator")
def check_experience_operator_keeps_experiences_in_step(subject: Subject) -> None:
    """the experiences of the result hold the batch's rewards and lengths"""
    _, after, _ = _apply(subject, lazy=True)
    exps = list(after.experiences)
    rewards = [e.reward if e.reward is not None else float("nan") for e in exps]
    lengths = [len(e.tokens) - e.prompt_length for e in exps if e.tokens is not None]
    want = after.rewards.tolist()
    same = all((a == b) or (a != a and b != b) for a, b in zip(rewards, want, strict=True))
    if not same or lengths != after.response_lengths.tolist():
        raise ConformanceError(
            f"the result's experiences have rewards {rewards} and lengths {lengths}; its columns "
            f"{want} and {after.response_lengths.tolist()}",
            "change rewards with trinity_core.batch_rows.replace_rewards and filter with batch.select",
        )


@check("operator")
def check_experience_operator_columnar_and_list_agree(subject: Subject) -> None:
    """a batch whose experiences were never made and the same experiences as a list give the same rows
    and rewards"""
    results = []
    for lazy in (False, True):
        _, after, _ = _apply(subject, lazy)
        results.append(
            (after.rewards.tolist(), after.response_lengths.tolist(), after.group_keys.get("task"))
        )
    if repr(results[0]) != repr(results[1]):
        raise ConformanceError(
            f"from a list: {results[0]}; column-wise: {results[1]}",
            "read only the batch's columns (not how it was built)",
        )


@check("operator")
def check_experience_operator_metrics_are_scalars(subject: Subject) -> None:
    """metrics are 0-d tensors or numbers"""
    _, _, metrics = _apply(subject, lazy=True)
    for key, value in dict(metrics).items():
        if not (isinstance(value, int | float) or (isinstance(value, Tensor) and value.numel() == 1)):
            raise ConformanceError(
                f"metric {key!r} = {value!r}",
                "return {name: 0-d tensor} (logged as buffer/<operator>/<name>)",
            )
