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
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from trinity_core.experience import EID, SUFFIX_HEX_CHARS, Experience, experience_field_names
from trinity_core.train.rollout import Rollout

__all__ = ["rollout_experiences"]

_TEMPLATE: dict[str, object] = {
    **dict.fromkeys(experience_field_names()),
    "experience_type": "single_turn",
}


def rollout_experiences(
    rollout: Rollout, rewards: Sequence[float | None], *, step: int, group_size: int, task_offset: int = 0
) -> list[Experience]:
    """One single-turn experience per response of ``rollout`` whose reward is not None (order kept).

    Args:
        rollout: the step's rollout, ``N = prompts * group_size`` rows, prompt-major.
        rewards: ``N`` rewards (None: the response is dropped).
        step: the EID batch (the training step).
        group_size: responses per prompt (``G``); response ``i`` is run ``i % G`` of task
            ``task_offset + i // G``.
        task_offset: the global index of this rank's first prompt.
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
    for i, tok, p, status, mask, suffix in zip(keep, tokens, p_list, statuses, masks, suffixes, strict=True):
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
                    "info": {},
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
