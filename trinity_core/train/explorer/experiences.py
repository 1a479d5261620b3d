"""The experiences of one rollout, built column-wise: one :class:`Experience` per rewarded response.

Experience ``i`` of a step (response ``i`` of the rollout, prompt-major) gets
``EID(batch=step, task=task_offset + i // G, run=i % G)``, its prompt and response tokens (left padding
and the padding after the first EOS dropped), the prompt length, the reward, and
``truncate_status = "response_truncated"`` when no EOS was sampled. The result equals what
``Experience(eid=..., tokens=..., prompt_length=..., reward=..., truncate_status=...)`` builds (a
single-turn experience with an all-ones ``action_mask`` over the response), but every tensor is cut from
a few per-step tensors instead of being made per experience:

* ``tokens`` of all experiences are consecutive, non-overlapping slices of one fresh flat tensor (one
  masked select of the rollout) and ``action_mask`` likewise of one fresh all-ones tensor, so no two
  experiences share an element (an in-place change of one never shows in another);
* EID suffixes are 16 hex digits each of one ``os.urandom`` call (64 fresh random bits per experience).

Responses without a reward (``None``: no reward function applies) get no experience.

:func:`rollout_batch` builds the same experiences as an :class:`~trinity_core.batch.ExperienceBatch`
straight from the rollout's columns, for a step whose every stage reads columns: the ``Experience``
objects (equal to the ones above, tensors as views of the batch) are made only if something asks for them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch
from torch import Tensor

from trinity_core.batch import (
    BATCH_RESPONSE_FIELDS,
    GROUP_LEVELS,
    ExperienceBatch,
    GroupLevel,
    LazyExperiences,
)
from trinity_core.experience import (
    EID,
    SUFFIX_HEX_CHARS,
    Experience,
    escape_id_component,
    experience_field_names,
)
from trinity_core.lm.sampling import Rollout

__all__ = ["RolloutExperiences", "rollout_batch", "rollout_experiences"]

_TEMPLATE: dict[str, object] = {
    **dict.fromkeys(experience_field_names()),
    "experience_type": "single_turn",
}


class RolloutExperiences(LazyExperiences[ExperienceBatch]):
    """The lazily made experiences of one :func:`rollout_batch`, all sampled by one policy version."""

    def __init__(
        self,
        count: int,
        make: Callable[[ExperienceBatch], list[Experience]],
        rewards: Sequence[float | None],
        model_version: int | None,
    ) -> None:
        """As :class:`~trinity_core.batch.LazyExperiences`, plus the sampling policy's version."""
        super().__init__(count, make, rewards)
        self.model_version = model_version


def _info(model_version: int | None) -> dict[str, object]:
    return {} if model_version is None else {"model_version": model_version}


def rollout_experiences(
    rollout: Rollout,
    rewards: Sequence[float | None],
    *,
    step: int,
    group_size: int,
    task_offset: int = 0,
    model_version: int | None = None,
    messages: Sequence[list[dict[str, Any]]] | None = None,
) -> list[Experience]:
    """One single-turn experience per response of ``rollout`` whose reward is not None (order kept).

    Args:
        rollout: the step's rollout, ``N = prompts * group_size`` rows, prompt-major.
        rewards: ``N`` rewards (None: the response is dropped).
        step: the EID batch (the training step).
        group_size: responses per prompt (``G``); response ``i`` is run ``i % G`` of task
            ``task_offset + i // G``.
        task_offset: the global index of this rank's first prompt.
        model_version: the version of the policy that sampled the rollout, recorded as
            ``info["model_version"]`` (None: not recorded).
        messages: ``N`` conversations (prompt and sampled answer), kept as ``Experience.messages``.
    """
    n = rollout.response_ids.shape[0]
    if len(rewards) != n:
        raise ValueError(f"rollout_experiences: {len(rewards)} rewards for a rollout of {n} responses")
    keep = [i for i, r in enumerate(rewards) if r is not None]
    if not keep:
        return []
    rows = torch.tensor(keep, dtype=torch.int64)
    prompt_mask = rollout.prompt_mask.cpu()[rows]
    response_lengths = rollout.response_lengths.cpu()[rows]
    prompt_lengths = prompt_mask.sum(1)
    if int(prompt_lengths.min()) <= 0 or int(response_lengths.min()) <= 0:
        return _constructed(rollout, rewards, keep, step, group_size, task_offset)  # raises its error
    kept_messages = [messages[i] for i in keep] if messages is not None else [None] * len(keep)
    response_mask = torch.arange(rollout.response_ids.shape[1]) < response_lengths[:, None]
    ids = torch.cat([rollout.prompt_ids.cpu()[rows], rollout.response_ids.cpu()[rows]], dim=1)
    flat = ids[torch.cat([prompt_mask, response_mask], dim=1)].to(torch.int32)
    p_list, r_list = prompt_lengths.tolist(), response_lengths.tolist()
    tokens = torch.split(flat, list(map(int.__add__, p_list, r_list)))
    masks = torch.split(torch.ones(sum(r_list), dtype=torch.bool), r_list)
    statuses = ["response_truncated" if t else None for t in rollout.truncated.cpu()[rows].tolist()]
    width = SUFFIX_HEX_CHARS
    hexes = os.urandom(len(keep) * width // 2).hex()
    suffixes = [hexes[k : k + width] for k in range(0, len(hexes), width)]
    restore, template = Experience._restore, _TEMPLATE
    out: list[Experience] = []
    rows_out = zip(keep, tokens, p_list, statuses, masks, suffixes, kept_messages, strict=True)
    for i, tok, p, status, mask, suffix, conversation in rows_out:
        eid = EID(step, task_offset + i // group_size, i % group_size, 0, suffix)
        out.append(
            restore(
                {
                    **template,
                    "eid": eid,
                    "tokens": tok,
                    "prompt_length": p,
                    "reward": rewards[i],
                    "truncate_status": status,
                    "action_mask": mask,
                    "messages": conversation,
                    "info": _info(model_version),
                    "metrics": {},
                    "custom_fields": [],
                }
            )
        )
    return out


def _constructed(
    rollout: Rollout,
    rewards: Sequence[float | None],
    keep: list[int],
    step: int,
    group_size: int,
    task_offset: int,
) -> list[Experience]:
    """The same experiences through the constructor (which reports an empty prompt or response)."""
    full = torch.cat([rollout.prompt_ids, rollout.response_ids], dim=1).to(torch.int32).cpu()
    starts = (~rollout.prompt_mask).sum(1).tolist()
    ends = (rollout.prompt_ids.shape[1] + rollout.response_lengths).tolist()
    prompt_lengths = rollout.prompt_mask.sum(1).tolist()
    truncated = rollout.truncated.tolist()
    return [
        Experience(
            eid=EID(batch=step, task=task_offset + i // group_size, run=i % group_size),
            tokens=full[i, starts[i] : ends[i]],
            prompt_length=prompt_lengths[i],
            reward=rewards[i],
            truncate_status="response_truncated" if truncated[i] else None,
        )
        for i in keep
    ]


def rollout_batch(
    rollout: Rollout,
    rewards: Sequence[float | None],
    *,
    step: int,
    group_size: int,
    task_offset: int = 0,
    pad_token_id: int = 0,
    group_levels: Collection[GroupLevel] = GROUP_LEVELS,
    model_version: int | None = None,
    messages: Sequence[list[dict[str, Any]]] | None = None,
) -> ExperienceBatch:
    """The experiences of :func:`rollout_experiences` as an ``ExperienceBatch``, built from the columns.

    The batch equals ``ExperienceBatch.from_experiences(rollout_experiences(...), pad_token_id=...,
    group_levels=...)`` (``input_ids`` int32, ``action_mask`` over each response), but nothing is made
    per experience: its ``experiences`` is a :class:`~trinity_core.batch.LazyExperiences` that makes them
    on first access, with every tensor field a view of the batch and the rewards, truncation statuses
    and EIDs (fresh suffixes) of :func:`rollout_experiences`; ``model_version`` is kept on it
    (:class:`RolloutExperiences`), so a reader learns the policy version without making the experiences.
    """
    n = rollout.response_ids.shape[0]
    if len(rewards) != n:
        raise ValueError(f"rollout_batch: {len(rewards)} rewards for a rollout of {n} responses")
    keep = [i for i, r in enumerate(rewards) if r is not None]
    prompt_mask, response_ids = rollout.prompt_mask.cpu(), rollout.response_ids.cpu()
    prompt_ids, response_lengths = rollout.prompt_ids.cpu(), rollout.response_lengths.cpu()
    truncated = rollout.truncated.cpu()
    if len(keep) < n:
        rows = torch.tensor(keep, dtype=torch.int64)
        prompt_mask, prompt_ids, response_ids = prompt_mask[rows], prompt_ids[rows], response_ids[rows]
        response_lengths, truncated = response_lengths[rows], truncated[rows]
    prompt_lengths = prompt_mask.sum(1)
    width = prompt_ids.shape[1]
    right_aligned = torch.equal(prompt_mask, torch.arange(width) >= (width - prompt_lengths)[:, None])
    if not keep or not right_aligned or int(prompt_lengths.min()) <= 0 or int(response_lengths.min()) <= 0:
        # Nothing kept, a prompt not left-padded, or an empty prompt / response (an error the
        # constructor reports): the per-experience path.
        exps = rollout_experiences(
            rollout,
            rewards,
            step=step,
            group_size=group_size,
            task_offset=task_offset,
            model_version=model_version,
            messages=messages,
        )
        return ExperienceBatch.from_experiences(exps, pad_token_id=pad_token_id, group_levels=group_levels)
    P, R = int(prompt_lengths.max()), int(response_lengths.max())
    response_mask = torch.arange(R) < response_lengths[:, None]
    input_ids = torch.cat([prompt_ids[:, width - P :], response_ids[:, :R]], dim=1).to(torch.int32)
    input_ids.masked_fill_(~torch.cat([prompt_mask[:, width - P :], response_mask], dim=1), pad_token_id)
    p_list, r_list = prompt_lengths.tolist(), response_lengths.tolist()
    kept_rewards = [rewards[i] for i in keep]
    statuses = ["response_truncated" if t else None for t in truncated.tolist()]
    tasks = [task_offset + i // group_size for i in keep]
    runs = [i % group_size for i in keep]
    index, keys = _rollout_groups(tasks, runs, step, group_levels)

    kept_messages = [messages[i] for i in keep] if messages is not None else None

    def make(batch: ExperienceBatch) -> list[Experience]:
        made = _materialize(batch, step, tasks, runs, kept_rewards, statuses, model_version)
        if kept_messages is not None:
            for exp, conversation in zip(made, kept_messages, strict=True):
                exp.messages = conversation
        return made

    lazy = RolloutExperiences(len(keep), make, kept_rewards, model_version)
    batch = ExperienceBatch(
        input_ids=input_ids,
        prompt_lengths=prompt_lengths,
        response_lengths=response_lengths.to(torch.int64),
        max_prompt_length=P,
        max_response_length=R,
        pad_token_id=pad_token_id,
        rewards=torch.tensor(kept_rewards, dtype=torch.float64),
        has_reward=torch.ones(len(keep), dtype=torch.bool),
        group_index=index,
        group_keys=keys,
        experiences=lazy,
        action_mask=response_mask,
        _lengths=[(p, p + r) for p, r in zip(p_list, r_list, strict=True)],
    )
    lazy.attach(batch)
    return batch


def _rollout_groups(
    tasks: list[int], runs: list[int], step: int, levels: Collection[GroupLevel]
) -> tuple[dict[str, Tensor], dict[str, list[str]]]:
    """``group_index`` / ``group_keys`` of EIDs ``(batch=step, task, run, step=0)`` in rollout order.

    Tasks are non-decreasing in rollout order and runs distinct within a task, so a task group is a
    run of equal tasks, every experience is its own run group, and step groups are the task groups.
    """
    task_t = torch.tensor(tasks, dtype=torch.int64)
    unique_tasks, task_index = torch.unique_consecutive(task_t, return_inverse=True)
    tids = [EID(batch=step, task=t, suffix="").tid for t in unique_tasks.tolist()]
    index: dict[str, Tensor] = {}
    keys: dict[str, list[str]] = {}
    if "task" in levels:
        index["task"], keys["task"] = task_index, tids
    if "run" in levels:
        index["run"] = torch.arange(len(tasks), dtype=torch.int64)
        codes = task_index.tolist()
        keys["run"] = [f"{tids[c]}/{escape_id_component(r)}" for c, r in zip(codes, runs, strict=True)]
    if "step" in levels:
        index["step"], keys["step"] = task_index.clone(), [f"{tid}/{escape_id_component(0)}" for tid in tids]
    return index, keys


def _materialize(
    batch: ExperienceBatch,
    step: int,
    tasks: list[int],
    runs: list[int],
    rewards: list[float | None],
    statuses: list[str | None],
    model_version: int | None,
) -> list[Experience]:
    """The experiences of a :func:`rollout_batch`: tokens and response fields as views of the batch."""
    P = batch.max_prompt_length
    width = SUFFIX_HEX_CHARS
    hexes = os.urandom(len(tasks) * width // 2).hex()
    restore, template = Experience._restore, _TEMPLATE
    out: list[Experience] = []
    rows = batch.input_ids.unbind(0)
    for k, (p, total) in enumerate(batch._lengths):
        out.append(
            restore(
                {
                    **template,
                    "eid": EID(step, tasks[k], runs[k], 0, hexes[k * width : (k + 1) * width]),
                    "tokens": rows[k][P - p : P - p + total],
                    "prompt_length": p,
                    "reward": rewards[k],
                    "truncate_status": statuses[k],
                    "info": _info(model_version),
                    "metrics": {},
                    "custom_fields": [],
                }
            )
        )
    for name in BATCH_RESPONSE_FIELDS:
        if getattr(batch, name) is not None:
            batch.write_back(name, out)
    return out
