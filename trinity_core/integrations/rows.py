"""Padded rows of another trainer as experiences, and advantages back as padded rows.

Other trainers hold a batch as padded ``(N, T)`` tensors plus a group id per row (verl's ``uid``,
TRL's consecutive ``num_generations``). :func:`experiences_from_rows` makes one
:class:`~trinity_core.experience.Experience` per row (task = the group id, run = the row's rank in its
group), so any installed advantage function, pipeline-side or trainer-side, runs on them unchanged;
:func:`run_advantage_fn` calls it and returns ``(advantages, returns)`` as ``(N, T)`` rows again.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from trinity_core.components import Metrics
from trinity_core.experience import EID, Experience

__all__ = ["experiences_from_rows", "rows_from_experiences", "run_advantage_fn"]


def experiences_from_rows(
    rewards: Tensor,
    group_ids: Sequence[Hashable],
    response_mask: Tensor,
    logprobs: Tensor | None = None,
    token_level_rewards: Tensor | None = None,
    infos: Sequence[dict[str, Any]] | None = None,
) -> list[Experience]:
    """One experience per row.

    Args:
        rewards: ``(N,)`` scalar reward per row.
        group_ids: ``N`` group ids (rows with equal ids form one task group).
        response_mask: ``(N, T)``; a row's response is its first ``last selected position + 1`` columns
            (holes stay holes: they become ``action_mask`` False); the columns after it are padding.
        logprobs: optional ``(N, T)`` sampling log-probs, stored as ``logprobs``.
        token_level_rewards: optional ``(N, T)`` per-token rewards, stored as ``token_level_reward``.
        infos: optional ``N`` dicts stored as each experience's ``info`` (e.g. reward components).

    Tokens are placeholders (zeros after a one-token prompt): advantage functions read rewards, masks
    and groups, never token ids.
    """
    if rewards.dim() != 1 or rewards.shape[0] != response_mask.shape[0] or len(group_ids) != rewards.shape[0]:
        raise ValueError(
            f"rows: rewards {tuple(rewards.shape)}, response_mask {tuple(response_mask.shape)} and "
            f"{len(group_ids)} group ids must agree on the number of rows"
        )
    mask = response_mask.detach().to("cpu", torch.bool)
    width = mask.shape[1]
    positions = torch.arange(1, width + 1).expand_as(mask)
    lengths = torch.where(mask, positions, 0).amax(dim=1).clamp_min(1).tolist()
    reward_list = rewards.detach().to("cpu", torch.float64).tolist()
    old = None if logprobs is None else logprobs.detach().to("cpu", torch.float32)
    tlr = None if token_level_rewards is None else token_level_rewards.detach().to("cpu", torch.float32)
    runs: dict[Hashable, int] = {}
    exps = []
    for i, (gid, length) in enumerate(zip(group_ids, lengths, strict=True)):
        run = runs.get(gid, 0)
        runs[gid] = run + 1
        exps.append(
            Experience(
                eid=EID(batch=0, task=str(gid), run=run),
                tokens=torch.zeros(1 + length, dtype=torch.long),
                prompt_length=1,
                reward=reward_list[i],
                action_mask=mask[i, :length].clone(),
                logprobs=None if old is None else old[i, :length].clone(),
                token_level_reward=None if tlr is None else tlr[i, :length].clone(),
                info=None if infos is None else dict(infos[i]),
            )
        )
    return exps


def rows_from_experiences(
    values: Sequence[Tensor | None], width: int, device: torch.device | str = "cpu"
) -> Tensor:
    """``(N, width)`` float32 rows from per-experience response tensors (None gives a zero row)."""
    out = torch.zeros(len(values), width, dtype=torch.float32)
    for i, value in enumerate(values):
        if value is not None:
            n = min(int(value.shape[-1]), width)
            out[i, :n] = value.detach().to("cpu", torch.float32).reshape(-1)[:n]
    return out.to(device)


def run_advantage_fn(
    fn: Any,
    exps: list[Experience],
    response_mask: Tensor,
    extras: Mapping[str, Tensor] | None = None,
    **kwargs: Any,
) -> tuple[Tensor, Tensor, Metrics]:
    """Run an advantage function on ``exps`` (from :func:`experiences_from_rows`) and return
    ``(advantages, returns, metrics)`` as ``(N, T)`` float32 rows on ``response_mask``'s device, zero
    outside the mask.

    A trainer-side function (``compute_in_trainer()``) gets the batch of the list, with ``extras``
    (trainer-side ``(N, T)`` or ``(N,)`` columns such as ``old_logprobs`` or ``sum_pi_squared``, cut to
    the batch's response width) in ``batch.extras``; a pipeline-side one sets ``advantages`` /
    ``returns`` on the experiences it keeps; a row it drops gets advantage 0 (it contributes no
    gradient).
    """
    width, device = response_mask.shape[1], response_mask.device
    if type(fn).compute_in_trainer():
        from trinity_core.batch import ExperienceBatch

        batch = ExperienceBatch.from_experiences(exps)
        for key, column in (extras or {}).items():
            column = column.detach().to("cpu")
            batch.extras[key] = column[:, : batch.max_response_length] if column.dim() == 2 else column
        batch, metrics = fn(batch, **kwargs)
        advantages = _pad(batch.advantages, width)
        returns = _pad(batch.returns if batch.returns is not None else batch.advantages, width)
    else:
        kept, metrics = fn(exps, **kwargs)
        kept_ids = {id(e) for e in kept}
        advantages = rows_from_experiences([e.advantages if id(e) in kept_ids else None for e in exps], width)
        returns = rows_from_experiences(
            [
                (e.returns if e.returns is not None else e.advantages) if id(e) in kept_ids else None
                for e in exps
            ],
            width,
        )
    mask = response_mask.detach().to("cpu", torch.bool)
    advantages = torch.where(mask, advantages, 0.0).to(device)
    returns = torch.where(mask, returns, 0.0).to(device)
    return advantages, returns, dict(metrics)


def _pad(values: Tensor, width: int) -> Tensor:
    values = values.detach().to("cpu", torch.float32)
    if values.shape[1] >= width:
        return values[:, :width].clone()
    return torch.nn.functional.pad(values, (0, width - values.shape[1]))
