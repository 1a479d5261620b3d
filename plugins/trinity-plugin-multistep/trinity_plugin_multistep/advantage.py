"""``step_wise_grpo`` advantage function: :class:`StepWiseGRPOAdvantageFn` (reference
``trinity.algorithm.advantage_fn.multi_step_grpo_advantage``)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.batch import gather_group_indices, gather_rewards
from trinity_core.components import ComponentArgs, GroupAdvantage, Metrics, write_advantages
from trinity_core.components.advantage import GroupComputation, grouped_order
from trinity_core.components.group_kernels import ZERO_STD_RTOL
from trinity_core.components.group_metrics import metric_column, run_per_group
from trinity_core.components.reward_check import finite_reward
from trinity_core.experience import Experience, group_by
from trinity_core.ops import group_stats
from trinity_plugin_multistep.kernel import last_step_mask, step_wise_scores
from trinity_plugin_multistep.metrics import step_wise_metrics

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["StepWiseGRPOAdvantageFn", "StepWiseGRPOArgs", "last_steps"]


class StepWiseGRPOArgs(ComponentArgs):
    """Arguments of :class:`StepWiseGRPOAdvantageFn` (the reference's ``default_args()``)."""

    epsilon: float = Field(
        1e-6, ge=0, description="Added to the std of the last-step rewards before dividing."
    )
    enable_step_norm: bool = Field(
        False,
        description=(
            "Divide each step's advantage by the number of experiences of its run in the batch (so a run "
            "contributes its score once in total, however many steps it has)."
        ),
    )
    std_cal_level: Literal["group", "batch"] = Field(
        "group",
        description=(
            "Std used as divisor: 'group' (each task's std of last-step rewards) or 'batch' (std over the "
            "last-step rewards of all runs of multi-run tasks). The mean is always the task's."
        ),
    )
    std_threshold: float | None = Field(
        None,
        ge=0,
        description="Drop tasks with a single run or whose last-step reward std is <= this; None keeps all.",
    )


def last_steps(runs: dict[str, list[Experience]]) -> dict[str, Experience]:
    """The last step of each run: the experience with the largest ``eid.step`` (ties: the later one)."""
    return {rid: max(reversed(steps), key=lambda e: e.eid.step) for rid, steps in runs.items()}


def _last_step_reward(exp: Experience, where: str) -> float:
    """The reward of a run's last step, or a ValueError saying that it is broadcast to the other steps."""
    return finite_reward(
        exp,
        where,
        role=" (the last step of its run)",
        requirement="the last step of every run needs a finite reward (it is broadcast to the earlier steps)",
    )


_EXPERIENCE_TYPE = attrgetter("experience_type")
_EID = attrgetter("eid")
_STEP = attrgetter("step")


def _step_numbers(exps: Sequence[Experience]) -> Tensor:
    """``(N,)`` int64 ``eid.step`` of each experience (read into an ``array``: no Python int list)."""
    eids = list(map(_EID, exps))
    if not eids:
        return torch.zeros(0, dtype=torch.int64)
    try:
        return torch.frombuffer(array("q", map(_STEP, eids)), dtype=torch.int64)
    except (TypeError, OverflowError):  # not an int: torch.tensor's conversion and its error
        return torch.tensor(list(map(_STEP, eids)), dtype=torch.int64)


class StepWiseGRPOAdvantageFn(GroupAdvantage):
    """Step-wise GRPO: the GRPO score of each run's last-step reward, broadcast to every step of the run.

    For multi-step rollouts (inspired by rLLM, https://github.com/rllm-org/rllm): within a task
    (``eid.tid``) each run (``eid.rid``) is one trajectory whose steps are separate experiences. The last
    step's reward ``R_k`` is compared with the other runs of the task,
    ``score_k = (R_k − mean_g R) / (σ + ε)`` (``σ`` the task's unbiased std, or ``σ_batch`` with
    ``std_cal_level="batch"``), and every step of run ``k`` gets ``A = score_k · action_mask``
    (``/ L_k`` with ``enable_step_norm``, ``L_k`` the number of experiences of the run in the batch);
    ``returns = advantages``. Exact formulas: :mod:`trinity_plugin_multistep.kernel`.

    Policies (differences from trinity-rft 0.6.0; reasons in docs/reference-differences.md):

    * the **last step** is the experience with the largest ``eid.step`` (the reference takes the last one in
      insertion order, wrong when a run's steps arrive out of order); only its reward is read, earlier
      steps may have ``reward=None``;
    * a task with a **single run** gets advantage 0 (the reference: ``R/(1+ε)``) and is excluded from all
      statistics (also from ``σ_batch``); zero-variance tasks get exactly 0;
    * output: kept experiences grouped by task in first-appearance order, batch order within a task (the
      reference orders by run within a task).

    ``enable_step_norm`` semantics: the reference divides by the number of experiences of the run, not by
    ``max(step) + 1``; so does this class (they differ when steps are missing from the batch).
    """

    Args: ClassVar[type[ComponentArgs]] = StepWiseGRPOArgs
    group_level: ClassVar[Literal["task", "run", "step"]] = "task"

    epsilon: float
    enable_step_norm: bool
    std_cal_level: Literal["group", "batch"]
    std_threshold: float | None

    # ------------------------------------------------------------------ per group (trinity-rft API)

    def run_scores(
        self, last: dict[str, Experience], precomputed_std: Tensor | None = None
    ) -> tuple[dict[str, float], Metrics, bool]:
        """Scores of one task's runs from their last steps: ``({rid: score}, metrics, skip)``."""
        where = f"{type(self).name()} advantage"
        rewards = torch.tensor([_last_step_reward(e, where) for e in last.values()], dtype=torch.float64)
        n = len(last)
        stats = group_stats(rewards, torch.zeros(n, dtype=torch.int64), 1)
        mean, std = stats.mean[0], stats.std_unbiased[0]
        sigma = precomputed_std if self.std_cal_level == "batch" and precomputed_std is not None else std
        flat = n < 2 or float(std) <= ZERO_STD_RTOL * float(rewards.abs().max())
        scores = {
            rid: 0.0 if flat else float((r - mean) / (sigma + self.epsilon))
            for rid, r in zip(last, rewards, strict=True)
        }
        skip = self.std_threshold is not None and (n < 2 or float(std) <= self.std_threshold)
        metrics: Metrics = {"reward_mean": mean, "reward_std": std, "valid": n > 1, "kept": not skip}
        return scores, metrics, skip

    def calculate_group_advantage(
        self, group_id: str, exps: list[Experience], precomputed_std: Tensor | None = None
    ) -> tuple[list[Experience], Metrics]:
        """Advantages of one task group (input order kept); ``[]`` when ``std_threshold`` drops it.

        ``precomputed_std`` is ``σ_batch`` (used with ``std_cal_level="batch"``).
        """
        runs = group_by(exps, "run")
        scores, metrics, skip = self.run_scores(last_steps(runs), precomputed_std)
        lengths = {rid: len(steps) for rid, steps in runs.items()}
        values = []
        for exp in exps:
            score = scores[exp.eid.rid]
            values.append(score / lengths[exp.eid.rid] if self.enable_step_norm else score)
        write_advantages(exps, torch.tensor(values, dtype=torch.float64))
        return ([] if skip else exps), metrics

    def batch_std(self, groups: dict[str, list[Experience]]) -> Tensor:
        """``σ_batch``: unbiased std of the last-step rewards of every run of a multi-run task."""
        where = f"{type(self).name()} advantage"
        values: list[float] = []
        for exps in groups.values():
            last = last_steps(group_by(exps, "run"))
            if len(last) > 1:
                values.extend(_last_step_reward(e, where) for e in last.values())
        t = torch.tensor(values, dtype=torch.float64)
        return group_stats(t, torch.zeros(len(values), dtype=torch.int64), 1).std_unbiased[0]

    def process_per_group(self, exps: list[Experience]) -> tuple[list[Experience], Metrics]:
        """Group by task, compute ``σ_batch`` if needed, call :meth:`calculate_group_advantage` per task."""
        if len(exps) == 0:
            return [], {}
        groups = self.group_experiences(list(exps))
        precomputed = self.batch_std(groups) if self.std_cal_level == "batch" else None
        out, per_group = run_per_group(self, exps, precomputed_std=precomputed)
        metrics = step_wise_metrics(
            metric_column(per_group, "reward_mean"),
            metric_column(per_group, "reward_std"),
            metric_column(per_group, "valid", torch.bool),
            metric_column(per_group, "kept", torch.bool),
            torch.tensor(len(out)),
            len(exps),
            precomputed,
        )
        return out, metrics

    # ------------------------------------------------------------------ vectorized

    def batch_fields(self) -> tuple[str, ...]:
        """:meth:`process_batch` reads rewards, EIDs and group indices only: no padded column."""
        return ()

    def batch_group_levels(self) -> tuple[Literal["task", "run", "step"], ...]:
        """Task groups for the statistics, run groups for the last step of each run."""
        return ("task", "run")

    def process_batch(self, batch: ExperienceBatch) -> tuple[Tensor, Metrics, Tensor]:
        """``(advantages (N,), metrics, keep (N,))`` of the whole batch.

        The last-step rewards are validated from the source experiences (Python floats) only when some
        reward is missing or not finite; step numbers come from the EIDs (metadata, no tensor read).
        """
        if not batch.rewards_are_finite():
            self.validate_last_rewards(batch.experiences)
        steps = _step_numbers(batch.experiences)
        return self.scores_from_tensors(
            batch.rewards,
            batch.group_index["task"],
            batch.num_groups["task"],
            batch.group_index["run"],
            batch.num_groups["run"],
            steps,
        )

    def columnar_equivalent(self) -> bool:
        """True unless a subclass replaces :meth:`process`, :meth:`process_vectorized` or
        :meth:`process_batch`: the list path is then :meth:`process_batch` on the list's columns."""
        cls = type(self)
        return (
            cls.process is GroupComputation.process
            and cls.process_vectorized is StepWiseGRPOAdvantageFn.process_vectorized
            and cls.process_batch is StepWiseGRPOAdvantageFn.process_batch
        )

    def process_vectorized(self, exps: list[Experience]) -> tuple[list[Experience], Metrics]:
        """What :meth:`process_batch` computes, from the list without building a batch.

        Reads the rewards (:func:`~trinity_core.batch.gather_rewards`), the task and run indices
        (:func:`~trinity_core.batch.gather_group_indices`) and the step numbers, then writes the
        advantages back and groups the output. DPO pairs (rejected there) and subclasses with their own
        :meth:`process_batch` take the batch path.
        """
        if len(exps) == 0:
            return [], {}
        if type(self).process_batch is not StepWiseGRPOAdvantageFn.process_batch or "dpo" in map(
            _EXPERIENCE_TYPE, exps
        ):
            return super().process_vectorized(exps)
        exps = list(exps)
        rewards, _ = gather_rewards(exps)
        if not bool(torch.isfinite(rewards).all()):  # host-side list path: a CPU tensor
            self.validate_last_rewards(exps)
        index, keys = gather_group_indices(exps, ("task", "run"))
        advantages, metrics, keep = self.scores_from_tensors(
            rewards, index["task"], len(keys["task"]), index["run"], len(keys["run"]), _step_numbers(exps)
        )
        write_advantages(exps, advantages)
        return grouped_order(exps, index["task"], keep if self.std_threshold is not None else None), metrics

    def validate_last_rewards(self, exps: Sequence[Experience]) -> None:
        """Raise the per-group path's error when the last step of some run has no finite reward."""
        where = f"{type(self).name()} advantage"
        for exp in last_steps(group_by(exps, "run")).values():
            _last_step_reward(exp, where)

    def scores_from_tensors(
        self,
        rewards: Tensor,
        task_index: Tensor,
        num_tasks: int,
        run_index: Tensor,
        num_runs: int,
        steps: Tensor,
    ) -> tuple[Tensor, Metrics, Tensor]:
        """The numeric core of :meth:`process_batch` on raw tensors (no host synchronisation)."""
        last = last_step_mask(steps.to(run_index.device), run_index, num_runs)
        s = step_wise_scores(
            rewards,
            task_index,
            num_tasks,
            run_index,
            num_runs,
            last,
            epsilon=self.epsilon,
            enable_step_norm=self.enable_step_norm,
            std_cal_level=self.std_cal_level,
            std_threshold=self.std_threshold,
        )
        metrics = step_wise_metrics(
            s.group_mean,
            s.group_std,
            s.group_valid,
            s.group_kept,
            s.keep.sum(),
            rewards.shape[0],
            s.batch_std if self.std_cal_level == "batch" else None,
        )
        return s.advantages, metrics, s.keep
