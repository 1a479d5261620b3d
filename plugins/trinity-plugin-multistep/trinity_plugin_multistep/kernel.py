"""Vectorized step-wise GRPO arithmetic on flat per-experience tensors (no Python loop, no host sync).

A task (``eid.tid``) has runs (``eid.rid``); a run has steps (one experience each, ``eid.step``). For task
``g`` with runs ``k = 1..K_g``:

* the **last step** of run ``k`` is its experience with the largest ``eid.step`` (ties: the later one in
  the batch); ``R_k`` is that experience's reward. Rewards of the other steps are not read;
* ``μ_g = mean_k R_k``, ``σ_g = std_unbiased_k R_k`` in float64, over tasks with at least two runs;
* ``score_k = (R_k − μ_g) / (σ + ε)`` with ``σ = σ_g`` (``std_cal_level="group"``) or ``σ_batch``, the
  unbiased std of ``R_k`` over every run of a task with at least two runs (``"batch"``);
* ``score_k = 0`` for tasks with a single run and for zero-variance tasks (``σ_g ≤ ZERO_STD_RTOL·max|R|``);
* every step of run ``k`` gets ``A = score_k``, or ``score_k / L_k`` with ``enable_step_norm``, where
  ``L_k`` is the number of experiences of run ``k`` in the batch;
* ``std_threshold = t``: a task with a single run or with ``σ_g ≤ t`` is dropped (all its experiences).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from trinity_core.components.group_kernels import ZERO_STD_RTOL
from trinity_core.ops import group_stats, segment_count, segment_sum

__all__ = ["StepWiseScores", "last_step_mask", "step_wise_scores"]


def last_step_mask(steps: Tensor, run_index: Tensor, num_runs: int) -> Tensor:
    """``(N,)`` bool: True for the experience with the largest ``step`` of its run (ties: the later one).

    The key ``step · N + position`` orders by step, then by position; its per-run maximum is one element.
    """
    n = steps.shape[0]
    key = steps.to(torch.int64) * n + torch.arange(n, device=steps.device)
    lowest = torch.iinfo(torch.int64).min
    best = torch.full((num_runs,), lowest, dtype=torch.int64, device=steps.device)
    best = best.scatter_reduce(0, run_index.long(), key, reduce="amax")
    return key == best[run_index.long()]


@dataclass(frozen=True, eq=False)
class StepWiseScores:
    """Result of :func:`step_wise_scores` (``G`` tasks, ``K`` runs, ``N`` experiences).

    Attributes:
        advantages: ``(N,)`` float64, the score of each experience's run (step-normalised if asked).
        keep: ``(N,)`` bool, experiences of tasks that pass ``std_threshold`` (all True without one).
        group_mean: ``(G,)`` float64 ``μ_g`` (0 for single-run tasks).
        group_std: ``(G,)`` float64 ``σ_g`` (0 for single-run tasks).
        group_valid: ``(G,)`` bool, tasks with at least two runs.
        group_kept: ``(G,)`` bool, tasks that pass ``std_threshold``.
        batch_std: 0-d float64 ``σ_batch``.
    """

    advantages: Tensor
    keep: Tensor
    group_mean: Tensor
    group_std: Tensor
    group_valid: Tensor
    group_kept: Tensor
    batch_std: Tensor


def step_wise_scores(
    rewards: Tensor,
    task_index: Tensor,
    num_tasks: int,
    run_index: Tensor,
    num_runs: int,
    last: Tensor,
    *,
    epsilon: float = 1e-6,
    enable_step_norm: bool = False,
    std_cal_level: Literal["group", "batch"] = "group",
    std_threshold: float | None = None,
) -> StepWiseScores:
    """Step-wise GRPO scores of a whole batch (formulas in the module docstring).

    Args:
        rewards: ``(N,)`` rewards; only those at ``last`` are read (others may be NaN).
        task_index: ``(N,)`` int64 task of each experience in ``[0, num_tasks)``.
        num_tasks: number of tasks ``G``.
        run_index: ``(N,)`` int64 run of each experience in ``[0, num_runs)`` (runs never span tasks).
        num_runs: number of runs ``K``.
        last: ``(N,)`` bool, the last step of each run (:func:`last_step_mask`).
        epsilon: added to the std before dividing.
        enable_step_norm: divide each experience's advantage by the number of experiences of its run.
        std_cal_level: ``"group"`` (divide by ``σ_g``) or ``"batch"`` (divide by ``σ_batch``).
        std_threshold: drop tasks with one run or ``σ_g ≤ std_threshold``; None keeps all.
    """
    t_idx, r_idx = task_index.long(), run_index.long()
    run_reward = segment_sum(rewards, r_idx, num_runs, valid_mask=last)
    run_task = torch.zeros(num_runs, dtype=torch.int64, device=t_idx.device).scatter(0, r_idx, t_idx)
    runs_per_task = segment_count(run_task, num_tasks)
    group_valid = runs_per_task > 1
    member = group_valid[run_task]
    stats = group_stats(run_reward, run_task, num_tasks, valid_mask=member)
    scale = torch.zeros(num_tasks, dtype=torch.float64, device=run_reward.device).scatter_reduce(
        0, run_task, torch.where(member, run_reward.abs(), 0.0), reduce="amax"
    )
    zero_var = stats.std_unbiased <= ZERO_STD_RTOL * scale
    whole = group_stats(run_reward, torch.zeros_like(run_task), 1, valid_mask=member)
    batch_std = whole.std_unbiased[0]
    sigma = batch_std if std_cal_level == "batch" else stats.std_unbiased[run_task]
    raw = (run_reward - stats.mean[run_task]) / (sigma + epsilon)
    run_score = torch.where(member & ~zero_var[run_task], raw, 0.0)
    advantages = run_score[r_idx]
    if enable_step_norm:
        advantages = advantages / segment_count(r_idx, num_runs)[r_idx].to(torch.float64)
    if std_threshold is None:
        group_kept = torch.ones_like(group_valid)
    else:
        group_kept = group_valid & (stats.std_unbiased > std_threshold)
    return StepWiseScores(
        advantages=advantages,
        keep=group_kept[t_idx],
        group_mean=stats.mean,
        group_std=stats.std_unbiased,
        group_valid=group_valid,
        group_kept=group_kept,
        batch_std=batch_std,
    )
