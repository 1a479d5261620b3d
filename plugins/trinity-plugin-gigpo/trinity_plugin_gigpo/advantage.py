"""``gigpo`` advantage function: :class:`GiGPOAdvantageFn` (reference
``trinity.algorithm.advantage_fn.gigpo_advantage``; Feng et al., arXiv:2505.10978)."""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, GroupAdvantage, Metrics, write_advantages
from trinity_core.components.group_kernels import group_ranks
from trinity_core.components.group_metrics import metric_column, run_per_group
from trinity_core.experience import Experience, group_by
from trinity_plugin_gigpo.kernel import gigpo_scores, normalize_groups
from trinity_plugin_gigpo.metrics import gigpo_metrics

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["GiGPOAdvantageFn", "GiGPOArgs"]


class GiGPOArgs(ComponentArgs):
    """Arguments of :class:`GiGPOAdvantageFn` (the reference's ``default_args()``)."""

    omega: float = Field(1.0, ge=0, description="Weight of the step-level (anchor group) advantage A_S.")
    gamma: float = Field(1.0, ge=0, le=1, description="Discount of the step returns R_t.")
    fnorm: Literal["std", "none"] = Field(
        "none", description="Group normaliser: 'std' (unbiased std, GRPO-like) or 'none' (1, the paper's)."
    )
    epsilon: float = Field(1e-6, ge=0, description="Added to the normaliser before dividing.")
    step_reward_key: str = Field(
        "step_reward", description="experience.info key of the immediate reward r_t of a step."
    )
    env_state_hash_key: str = Field(
        "env_state_hash", description="experience.info key of the environment-state identity (anchor state)."
    )


def _finite(value: Any, what: str, exp: Experience) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise ValueError(
            f"gigpo advantage: experience {exp.eid.uid} has {what} {value!r}; it must be a finite number "
            "(fix the workflow that records it)"
        )
    return number


class GiGPOAdvantageFn(GroupAdvantage):
    """GiGPO: A = A_E (episode-level, over a task's runs) + omega * A_S (step-level, over anchor states).

    Group-in-Group Policy Optimization (Feng et al., arXiv:2505.10978) for multi-turn agents, computed in
    the experience pipeline. Each experience is one step (``eid.step``) of a run (``eid.rid``) of a task
    (``eid.tid``). Immediate rewards ``r_t``: when any step of the run has ``info[step_reward_key]``,
    every step uses ``info.get(step_reward_key, 0)``; otherwise the run's last step (largest ``eid.step``)
    gets ``exp.reward`` (``None`` counts as 0) and the others 0. Then (formulas in
    :mod:`trinity_plugin_gigpo.kernel`): ``R_t`` discounted by ``gamma``, episode returns ``R(τ) = Σ r_t``,
    ``A_E`` = normalised ``R(τ)`` over the task's runs, ``A_S`` = normalised ``R_t`` over the task's
    experiences with the same ``str(info[env_state_hash_key])``; ``advantages = A · action_mask``,
    ``returns = advantages``.

    Differences from the reference (trinity-rft 0.6.0; reasons in docs/reference-differences.md):

    * **anchor groups are scoped per task**: equal state hashes of different tasks (different prompts or
      environments) are different states; the reference buckets over the whole batch;
    * metric ``gigpo/episode_reward_std`` is the std of the episode returns (the reference reports the
      normaliser, 1.0 with ``fnorm="none"``);
    * tasks with a single run get ``A_E = 0`` (reference: ``R/(1+ε)``) and are excluded from the episode
      metrics; zero-variance groups get exactly 0; statistics are float64;
    * output: grouped by task in first-appearance order, batch order within a task (the reference keeps
      the batch order).
    """

    Args: ClassVar[type[ComponentArgs]] = GiGPOArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2505.10978"
    group_level: ClassVar[Literal["task", "run", "step"]] = "task"

    omega: float
    gamma: float
    fnorm: Literal["std", "none"]
    epsilon: float
    step_reward_key: str
    env_state_hash_key: str

    # ------------------------------------------------------------------ shared input extraction

    def immediate_rewards(self, run: list[Experience]) -> list[float]:
        """``r_t`` of each experience of one run (any order), by the rule of the class docstring."""
        key = self.step_reward_key
        if any(key in (e.info or {}) for e in run):
            return [_finite((e.info or {}).get(key, 0.0), f"info[{key!r}]", e) for e in run]
        last = max(reversed(run), key=lambda e: e.eid.step)
        return [_finite(e.reward, "reward", e) if e is last and e.reward is not None else 0.0 for e in run]

    def state_hash(self, exp: Experience) -> str | None:
        """``str(info[env_state_hash_key])``, or None without one."""
        value = (exp.info or {}).get(self.env_state_hash_key)
        return None if value is None else str(value)

    # ------------------------------------------------------------------ per group (trinity-rft API)

    def calculate_group_advantage(
        self, group_id: str, exps: list[Experience], precomputed_std: Tensor | None = None
    ) -> tuple[list[Experience], Metrics]:
        """Advantages of one task (input order kept); ``precomputed_std`` is ignored."""
        runs = group_by(exps, "run")
        returns: dict[int, float] = {}
        episode: dict[str, float] = {}
        for rid, run in runs.items():
            ordered = sorted(run, key=lambda e: e.eid.step)  # stable: equal steps keep batch order
            rewards = dict(zip(map(id, run), self.immediate_rewards(run), strict=True))
            running = 0.0
            for exp in reversed(ordered):
                running = rewards[id(exp)] + self.gamma * running
                returns[id(exp)] = running
            episode[rid] = math.fsum(rewards.values())
        ep = torch.tensor(list(episode.values()), dtype=torch.float64)
        one = torch.zeros(len(ep), dtype=torch.int64)
        a_e, ep_mean, ep_std, _ = normalize_groups(
            ep, one, 1, torch.ones_like(one, dtype=torch.bool), self.fnorm, self.epsilon
        )
        run_score = dict(zip(episode, a_e.tolist(), strict=True))
        buckets: dict[str, list[Experience]] = {}
        for exp in exps:
            state = self.state_hash(exp)
            if state is not None:
                buckets.setdefault(state, []).append(exp)
        a_s: dict[int, float] = {}
        for members in buckets.values():
            values = torch.tensor([returns[id(e)] for e in members], dtype=torch.float64)
            index = torch.zeros(len(members), dtype=torch.int64)
            s, _, _, _ = normalize_groups(
                values, index, 1, torch.ones_like(index, dtype=torch.bool), self.fnorm, self.epsilon
            )
            a_s.update(zip(map(id, members), s.tolist(), strict=True))
        e_values = [run_score[e.eid.rid] for e in exps]
        s_values = [a_s.get(id(e), 0.0) for e in exps]
        write_advantages(
            exps,
            torch.tensor(
                [x + self.omega * y for x, y in zip(e_values, s_values, strict=True)], dtype=torch.float64
            ),
        )
        metrics: Metrics = {
            "episode_reward_mean": ep_mean[0],
            "episode_reward_std": ep_std[0],
            "valid": len(runs) > 1,
            "anchors": len(buckets),
            "anchors_gt1": sum(len(m) > 1 for m in buckets.values()),
            "abs_a_e": math.fsum(abs(x) for x in e_values),
            "abs_a_s": math.fsum(abs(x) for x in s_values),
        }
        return exps, metrics

    def process_per_group(self, exps: list[Experience]) -> tuple[list[Experience], Metrics]:
        """Per-task path with the same metrics as the vectorized one."""
        if len(exps) == 0:
            return [], {}
        out, per_group = run_per_group(self, exps)
        metrics = gigpo_metrics(
            metric_column(per_group, "episode_reward_mean"),
            metric_column(per_group, "episode_reward_std"),
            metric_column(per_group, "valid", torch.bool),
            metric_column(per_group, "anchors", torch.int64).sum(),
            metric_column(per_group, "anchors_gt1", torch.int64).sum(),
            metric_column(per_group, "abs_a_e").sum(),
            metric_column(per_group, "abs_a_s").sum(),
            len(out),
        )
        return out, metrics

    # ------------------------------------------------------------------ vectorized

    def process_batch(self, batch: ExperienceBatch) -> tuple[Tensor, Metrics]:
        """``(advantages (N,), metrics)`` of the whole batch.

        Reads the metadata in Python once (step numbers, ``info`` keys, state hashes, run lengths), then
        computes with :func:`~trinity_plugin_gigpo.kernel.gigpo_scores`, which never reads a tensor on the
        host.
        """
        exps = batch.experiences
        rewards = [0.0] * len(exps)
        position_of = {id(e): i for i, e in enumerate(exps)}
        for run in group_by(exps, "run").values():
            for exp, value in zip(run, self.immediate_rewards(run), strict=True):
                rewards[position_of[id(exp)]] = value
        anchors: dict[tuple[str, str], int] = {}
        anchor_index = []
        for exp in exps:
            state = self.state_hash(exp)
            anchor_index.append(
                -1 if state is None else anchors.setdefault((exp.eid.tid, state), len(anchors))
            )
        max_length = max(Counter(e.eid.rid for e in exps).values())
        steps = torch.tensor([e.eid.step for e in exps], dtype=torch.int64)
        return self.scores_from_tensors(
            torch.tensor(rewards, dtype=torch.float64),
            batch.group_index["task"],
            batch.num_groups["task"],
            batch.group_index["run"],
            batch.num_groups["run"],
            steps,
            max_length,
            torch.tensor(anchor_index, dtype=torch.int64),
            len(anchors),
        )

    def scores_from_tensors(
        self,
        step_rewards: Tensor,
        task_index: Tensor,
        num_tasks: int,
        run_index: Tensor,
        num_runs: int,
        steps: Tensor,
        max_length: int,
        anchor_index: Tensor,
        num_anchors: int,
    ) -> tuple[Tensor, Metrics]:
        """The numeric core of :meth:`process_batch` on raw tensors (no host synchronisation)."""
        device = run_index.device
        # 0-based rank of each step inside its run (ties: batch order)
        position = group_ranks(steps.to(device).to(torch.int64), run_index.long(), num_runs)
        s = gigpo_scores(
            step_rewards.to(device),
            task_index,
            num_tasks,
            run_index,
            num_runs,
            position,
            max_length,
            anchor_index.to(device),
            num_anchors,
            omega=self.omega,
            gamma=self.gamma,
            fnorm=self.fnorm,
            epsilon=self.epsilon,
        )
        metrics = gigpo_metrics(
            s.episode_mean,
            s.episode_std,
            s.task_valid,
            torch.tensor(num_anchors, device=device),
            (s.anchor_size > 1).sum(),
            s.episode.abs().sum(),
            s.step.abs().sum(),
            step_rewards.shape[0],
        )
        return s.advantages, metrics
