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
from collections.abc import Collection, Sequence
from dataclasses import dataclass
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

__all__ = ["rollout_batch", "rollout_experiences"]

_TEMPLATE: dict[str, object] = {
    **dict.fromkeys(experience_field_names()),
    "experience_type": "single_turn",
}


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
    rows = _KeptRows.of(rollout, keep)
    prompt_lengths, response_lengths = rows.prompt_lengths, rows.response_lengths
    if int(prompt_lengths.min()) <= 0 or int(response_lengths.min()) <= 0:
        return _constructed(rollout, rewards, keep, step, group_size, task_offset)  # raises its error
    response_mask = torch.arange(rows.response_ids.shape[1]) < response_lengths[:, None]
    ids = torch.cat([rows.prompt_ids, rows.response_ids], dim=1)
    flat = ids[torch.cat([rows.prompt_mask, response_mask], dim=1)].to(torch.int32)
    p_list, r_list = prompt_lengths.tolist(), response_lengths.tolist()
    tokens = torch.split(flat, list(map(int.__add__, p_list, r_list)))
    masks = torch.split(torch.ones(sum(r_list), dtype=torch.bool), r_list)
    statuses = ["response_truncated" if t else None for t in rows.truncated.tolist()]
    eids = _eids(step, [task_offset + i // group_size for i in keep], [i % group_size for i in keep])
    kept_messages = [messages[i] for i in keep] if messages is not None else [None] * len(keep)
    fields = zip(keep, eids, tokens, p_list, statuses, masks, kept_messages, strict=True)
    return [
        _restored(eid, tok, p, rewards[i], status, model_version, action_mask=mask, messages=conversation)
        for i, eid, tok, p, status, mask, conversation in fields
    ]


def _restored(
    eid: EID,
    tokens: Tensor,
    prompt_length: int,
    reward: float | None,
    status: str | None,
    model_version: int | None,
    **fields: Any,
) -> Experience:
    """A single-turn experience from its fields, without the constructor's checks (the caller's columns
    satisfy them)."""
    return Experience._restore(
        {
            **_TEMPLATE,
            "eid": eid,
            "tokens": tokens,
            "prompt_length": prompt_length,
            "reward": reward,
            "truncate_status": status,
            "info": _info(model_version),
            "metrics": {},
            "custom_fields": [],
            **fields,
        }
    )


def _eids(step: int, tasks: list[int], runs: list[int]) -> list[EID]:
    """``EID(batch=step, task, run, step=0)`` each, their suffixes 16 hex digits of one ``os.urandom``."""
    width = SUFFIX_HEX_CHARS
    hexes = os.urandom(len(tasks) * width // 2).hex()
    return [
        EID(step, task, run, 0, hexes[k * width : (k + 1) * width])
        for k, (task, run) in enumerate(zip(tasks, runs, strict=True))
    ]


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
    (``LazyExperiences.model_version``), so a reader learns the policy version without making the experiences.
    """
    n = rollout.response_ids.shape[0]
    if len(rewards) != n:
        raise ValueError(f"rollout_batch: {len(rewards)} rewards for a rollout of {n} responses")
    keep = [i for i, r in enumerate(rewards) if r is not None]
    rows = _KeptRows.of(rollout, keep)
    if not keep or not rows.usable():
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
    kept_rewards = [rewards[i] for i in keep]
    tasks = [task_offset + i // group_size for i in keep]
    runs = [i % group_size for i in keep]
    statuses = ["response_truncated" if t else None for t in rows.truncated.tolist()]
    kept_messages = [messages[i] for i in keep] if messages is not None else None

    def make(batch: ExperienceBatch) -> list[Experience]:
        made = _materialize(batch, step, tasks, runs, kept_rewards, statuses, model_version)
        if kept_messages is not None:
            for exp, conversation in zip(made, kept_messages, strict=True):
                exp.messages = conversation
        return made

    lazy = LazyExperiences(len(keep), make, kept_rewards, model_version)
    index, keys = _rollout_groups(tasks, runs, step, group_levels)
    batch = rows.batch(pad_token_id, kept_rewards, index, keys, lazy)
    lazy.attach(batch)
    return batch


@dataclass
class _KeptRows:
    """The rewarded rows of a rollout on the CPU: prompts (left-padded) and responses."""

    prompt_ids: Tensor
    prompt_mask: Tensor
    response_ids: Tensor
    response_lengths: Tensor
    truncated: Tensor

    @classmethod
    def of(cls, rollout: Rollout, keep: list[int]) -> _KeptRows:
        """Rows ``keep`` of ``rollout`` (no copy when every row is kept)."""
        cols = [
            c.cpu()
            for c in (
                rollout.prompt_ids,
                rollout.prompt_mask,
                rollout.response_ids,
                rollout.response_lengths,
                rollout.truncated,
            )
        ]
        if len(keep) < rollout.response_ids.shape[0]:
            rows = torch.tensor(keep, dtype=torch.int64)
            cols = [c[rows] for c in cols]
        return cls(*cols)

    @property
    def prompt_lengths(self) -> Tensor:
        """Prompt tokens per row."""
        return self.prompt_mask.sum(1)

    def usable(self) -> bool:
        """Every prompt left-padded (right-aligned), no empty prompt or response: the columns can be cut."""
        lengths, width = self.prompt_lengths, self.prompt_ids.shape[1]
        right_aligned = torch.equal(self.prompt_mask, torch.arange(width) >= (width - lengths)[:, None])
        return right_aligned and int(lengths.min()) > 0 and int(self.response_lengths.min()) > 0

    def batch(
        self,
        pad_token_id: int,
        rewards: list[float | None],
        index: dict[str, Tensor],
        keys: dict[str, list[str]],
        lazy: LazyExperiences[ExperienceBatch],
    ) -> ExperienceBatch:
        """The rows as an ``ExperienceBatch``: prompts left-padded to the longest, responses right-padded."""
        prompt_lengths, width = self.prompt_lengths, self.prompt_ids.shape[1]
        P, R = int(prompt_lengths.max()), int(self.response_lengths.max())
        response_mask = torch.arange(R) < self.response_lengths[:, None]
        input_ids = torch.cat([self.prompt_ids[:, width - P :], self.response_ids[:, :R]], dim=1).to(
            torch.int32
        )
        input_ids.masked_fill_(
            ~torch.cat([self.prompt_mask[:, width - P :], response_mask], dim=1), pad_token_id
        )
        p_list, r_list = prompt_lengths.tolist(), self.response_lengths.tolist()
        return ExperienceBatch(
            input_ids=input_ids,
            prompt_lengths=prompt_lengths,
            response_lengths=self.response_lengths.to(torch.int64),
            max_prompt_length=P,
            max_response_length=R,
            pad_token_id=pad_token_id,
            rewards=torch.tensor(rewards, dtype=torch.float64),
            has_reward=torch.ones(len(rewards), dtype=torch.bool),
            group_index=index,
            group_keys=keys,
            experiences=lazy,
            action_mask=response_mask,
            truncated=self.truncated.to(torch.bool),
            _lengths=[(p, p + r) for p, r in zip(p_list, r_list, strict=True)],
        )


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
    eids = _eids(step, tasks, runs)
    rows = batch.input_ids.unbind(0)
    out = [
        _restored(eids[k], rows[k][P - p : P - p + total], p, rewards[k], statuses[k], model_version)
        for k, (p, total) in enumerate(batch._lengths)
    ]
    for name in BATCH_RESPONSE_FIELDS:
        if getattr(batch, name) is not None:
            batch.write_back(name, out)
    return out
