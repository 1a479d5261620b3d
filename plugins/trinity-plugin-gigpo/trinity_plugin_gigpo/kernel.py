"""Vectorized GiGPO arithmetic on flat per-experience tensors (no Python loop over experiences, no host sync).

Notation: task ``g`` (``eid.tid``) has runs ``k`` (``eid.rid``, one trajectory each); step ``t`` of a run is
one experience, ordered by ``eid.step``; ``r_t`` is its immediate reward (chosen by the caller, see
:class:`~trinity_plugin_gigpo.advantage.GiGPOAdvantageFn`).

* discounted return ``R_t = Σ_{k ≥ t} γ^{k−t} r_k`` within the run, computed as one product of the padded
  ``(runs, L)`` reward matrix with the ``L × L`` discount matrix ``D[t, k] = γ^{k−t}·[k ≥ t]``;
* episode return ``R(τ) = Σ_t r_t`` (undiscounted);
* ``normalize(v)`` over a group of ``n ≥ 2`` values: ``(v − mean) / (F + ε)`` with ``F = std_unbiased``
  (``fnorm="std"``) or ``F = 1`` (``fnorm="none"``); groups of one, and zero-variance groups
  (``std ≤ ZERO_STD_RTOL·max|v|``), give 0;
* episode advantage ``A_E = normalize`` of ``R(τ)`` over the runs of a task;
* step advantage ``A_S = normalize`` of ``R_t`` over an **anchor group**: the experiences of one task that
  share an environment-state hash (the caller numbers anchors per task); no hash gives ``A_S = 0``;
* ``A = A_E + ω · A_S``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from trinity_core.components.group_kernels import ZERO_STD_RTOL
from trinity_core.ops import group_stats, segment_count, segment_sum

__all__ = ["GiGPOScores", "discounted_returns", "gigpo_scores", "normalize_groups"]


def discounted_returns(
    rewards: Tensor, run_index: Tensor, num_runs: int, position: Tensor, max_length: int, gamma: float
) -> Tensor:
    """``R_t = Σ_{k ≥ t} γ^{k−t} r_k`` of every experience, ``(N,)`` float64.

    ``position`` is each experience's 0-based step rank in its run (< ``max_length``).
    """
    r = rewards.to(torch.float64)
    padded = torch.zeros(num_runs, max_length, dtype=torch.float64, device=r.device)
    padded = padded.index_put((run_index.long(), position.long()), r)
    steps = torch.arange(max_length, device=r.device)
    gap = steps[None, :] - steps[:, None]  # gap[t, k] = k − t
    discount = torch.where(
        gap >= 0, torch.tensor(gamma, dtype=torch.float64, device=r.device).pow(gap.clamp_min(0)), 0.0
    )
    returns = padded @ discount.T
    return returns[run_index.long(), position.long()]


def normalize_groups(
    values: Tensor,
    index: Tensor,
    num_groups: int,
    valid: Tensor,
    fnorm: Literal["std", "none"],
    epsilon: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``normalize`` of the module docstring per group: ``(scores (N,), mean (G,), std (G,), active (G,))``.

    Elements with ``valid`` False take part in nothing and score 0; ``active`` marks groups with at least
    two valid members.
    """
    idx = index.long()
    stats = group_stats(values, idx, num_groups, valid_mask=valid)
    active = stats.count > 1
    scale = torch.zeros(num_groups, dtype=torch.float64, device=values.device).scatter_reduce(
        0, idx, torch.where(valid, values.abs(), 0.0), reduce="amax"
    )
    informative = active & (stats.std_unbiased > ZERO_STD_RTOL * scale)
    denom = stats.std_unbiased[idx] if fnorm == "std" else torch.ones_like(values)
    scores = torch.where(valid & informative[idx], (values - stats.mean[idx]) / (denom + epsilon), 0.0)
    return scores, stats.mean, stats.std_unbiased, active


@dataclass(frozen=True, eq=False)
class GiGPOScores:
    """Result of :func:`gigpo_scores` (``G`` tasks, ``A`` anchor groups, ``N`` experiences).

    Attributes:
        advantages: ``(N,)`` float64 ``A_E + ω·A_S``.
        episode: ``(N,)`` float64 ``A_E`` of each experience's run.
        step: ``(N,)`` float64 ``A_S``.
        returns: ``(N,)`` float64 ``R_t``.
        episode_mean: ``(G,)`` float64 mean episode return of each task.
        episode_std: ``(G,)`` float64 unbiased std of the episode returns of each task.
        task_valid: ``(G,)`` bool, tasks with at least two runs.
        anchor_size: ``(A,)`` int64 members of each anchor group.
    """

    advantages: Tensor
    episode: Tensor
    step: Tensor
    returns: Tensor
    episode_mean: Tensor
    episode_std: Tensor
    task_valid: Tensor
    anchor_size: Tensor


def gigpo_scores(
    step_rewards: Tensor,
    task_index: Tensor,
    num_tasks: int,
    run_index: Tensor,
    num_runs: int,
    position: Tensor,
    max_length: int,
    anchor_index: Tensor,
    num_anchors: int,
    *,
    omega: float = 1.0,
    gamma: float = 1.0,
    fnorm: Literal["std", "none"] = "none",
    epsilon: float = 1e-6,
) -> GiGPOScores:
    """GiGPO advantages of a whole batch (formulas in the module docstring).

    Args:
        step_rewards: ``(N,)`` immediate rewards ``r_t``.
        task_index: ``(N,)`` int64 task in ``[0, num_tasks)``.
        num_tasks: number of tasks.
        run_index: ``(N,)`` int64 run in ``[0, num_runs)`` (a run never spans tasks).
        num_runs: number of runs.
        position: ``(N,)`` int64 step rank inside the run (0 = first step).
        max_length: the longest run (an upper bound on ``position + 1``).
        anchor_index: ``(N,)`` int64 anchor group in ``[0, num_anchors)``, or ``-1`` without a state hash.
        num_anchors: number of anchor groups (each inside one task).
        omega: weight of ``A_S``.
        gamma: discount of ``R_t``.
        fnorm: ``"std"`` or ``"none"``.
        epsilon: added to the normaliser.
    """
    r = step_rewards.to(torch.float64)
    t_idx, r_idx = task_index.long(), run_index.long()
    returns = discounted_returns(r, r_idx, num_runs, position, max_length, gamma)
    episode_return = segment_sum(r, r_idx, num_runs)
    run_task = torch.zeros(num_runs, dtype=torch.int64, device=r.device).scatter(0, r_idx, t_idx)
    run_valid = torch.ones(num_runs, dtype=torch.bool, device=r.device)
    run_score, ep_mean, ep_std, task_valid = normalize_groups(
        episode_return, run_task, num_tasks, run_valid, fnorm, epsilon
    )
    has_anchor = anchor_index >= 0
    anchor = torch.where(has_anchor, anchor_index.long(), 0)
    slots = max(num_anchors, 1)  # experiences without an anchor point at slot 0 but are never valid
    step_score, _, _, _ = normalize_groups(returns, anchor, slots, has_anchor, fnorm, epsilon)
    episode = run_score[r_idx]
    return GiGPOScores(
        advantages=episode + omega * step_score,
        episode=episode,
        step=step_score,
        returns=returns,
        episode_mean=ep_mean,
        episode_std=ep_std,
        task_valid=task_valid,
        anchor_size=segment_count(anchor, slots, valid_mask=has_anchor)[:num_anchors],
    )
