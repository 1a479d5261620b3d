"""``gdpo`` advantage function: :class:`GDPOAdvantage` (GRPO per reward component, summed, whitened)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
from pydantic import Field, model_validator
from torch import Tensor

from trinity_core.components import ComponentArgs, Metrics, TrainerAdvantage
from trinity_core.ops import masked_whiten
from trinity_plugin_grpo.baselines import centred_scores
from trinity_plugin_grpo.kernel import grpo_scores
from trinity_plugin_grpo.metrics import PREFIX

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["GDPOAdvantage", "GDPOArgs"]


class GDPOArgs(ComponentArgs):
    """Arguments of :class:`GDPOAdvantage` (verl's ``gdpo_reward_keys`` / ``gdpo_reward_weights``)."""

    gdpo_reward_keys: list[str] | None = Field(
        None,
        description=(
            "Names of the reward components, each a per-experience scalar in batch.extras[key] (N,) or "
            "exp.info[key]. None: one component, the summed token-level scores (GRPO then whitening)."
        ),
    )
    gdpo_reward_weights: list[float] | None = Field(
        None, description="Weight w_k of each component (same length as gdpo_reward_keys); None: all 1."
    )
    epsilon: float = Field(1e-6, ge=0, description="Added to each group's reward std before dividing.")
    norm_adv_by_std_in_grpo: bool = Field(
        True, description="Divide each component by (group std + epsilon); False: mean-centred only."
    )

    @model_validator(mode="after")
    def _weights_match_keys(self) -> GDPOArgs:
        if self.gdpo_reward_weights is not None:
            keys = self.gdpo_reward_keys or []
            if len(self.gdpo_reward_weights) != max(len(keys), 1):
                raise ValueError(
                    f"gdpo_reward_weights has {len(self.gdpo_reward_weights)} weights for "
                    f"{max(len(keys), 1)} reward components (gdpo_reward_keys={keys})"
                )
        return self


class GDPOAdvantage(TrainerAdvantage):
    """GDPO: GRPO-normalise each reward component per group, sum with weights, whiten over the batch.

    Group reward-Decoupled normalization Policy Optimization (arXiv:2601.05242; verl ``gdpo``). With
    components ``k`` (``gdpo_reward_keys``), sequence ``i`` in task group ``g``::

        A_k,i = (r_k,i − μ_g(r_k)) / (σ_g(r_k) + ε)     (σ unbiased; r_k,i − μ_g without std)
        S_i   = Σ_k w_k A_k,i                            (w = gdpo_reward_weights, default 1)
        A_i,t = (S_i − μ) / sqrt(σ² + 1e-8) · m_i,t      (μ, σ² unbiased: over every selected token)

    Normalising each component in its group before summing keeps a reward with a large spread from
    drowning a small one (GRPO sums first). The batch whitening runs over tokens, so a long response
    weighs more in ``μ`` and ``σ²`` (as verl). ``advantages = returns``.

    Component rewards are per-experience scalars: ``batch.extras[key]`` ``(N,)`` when the trainer set
    it, else ``exp.info[key]``. Without ``gdpo_reward_keys`` the single component is the summed
    token-level scores. As the plugin's ``grpo_verl``, a singleton group contributes 0 (verl: mean 0,
    std 1) and a zero-variance group exactly 0. Metric: ``group_advantages/gdpo_singleton_count``.
    """

    Args: ClassVar[type[ComponentArgs]] = GDPOArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2601.05242"
    groups_independent: ClassVar[bool] = False
    """Whitening over every action token of the batch makes each advantage depend on all groups."""

    gdpo_reward_keys: list[str] | None
    gdpo_reward_weights: list[float] | None
    epsilon: float
    norm_adv_by_std_in_grpo: bool

    def component_rewards(self, batch: ExperienceBatch) -> list[Tensor]:
        """One ``(N,)`` float64 reward tensor per component (see the class docstring)."""
        mask = batch.response_mask
        if not self.gdpo_reward_keys:
            scores = batch.token_level_scores().to(mask.device, torch.float64)
            return [torch.where(mask, scores, 0.0).sum(dim=-1)]
        out = []
        for key in self.gdpo_reward_keys:
            column = batch.extras.get(key)
            if column is None:
                missing = [i for i, e in enumerate(batch.experiences) if key not in e.info]
                if missing:
                    raise KeyError(
                        f"{type(self).name()} advantage: reward component {key!r} is neither in "
                        f"batch.extras nor in exp.info of experiences {missing[:5]}; the reward function "
                        "must report every key of gdpo_reward_keys"
                    )
                column = torch.tensor([float(e.info[key]) for e in batch.experiences])
            out.append(column.reshape(-1).to(mask.device, torch.float64))
        return out

    def compute(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor, Metrics]:
        """``(advantages, returns, metrics)``, both ``(N, R)`` float32."""
        mask = batch.response_mask
        mask = (batch.action_mask if batch.action_mask is not None else mask).to(torch.bool)
        index = batch.group_index["task"].to(mask.device)
        num_groups = batch.num_groups["task"]
        weights = self.gdpo_reward_weights or [1.0] * len(self.component_names())
        summed = torch.zeros(len(batch), dtype=torch.float64, device=mask.device)
        valid = None
        for weight, rewards in zip(weights, self.component_rewards(batch), strict=True):
            stats = grpo_scores(rewards, index, num_groups, epsilon=self.epsilon)
            valid = stats.group_valid[index]
            scores = stats.advantages
            if not self.norm_adv_by_std_in_grpo:
                scores = centred_scores(rewards, index, num_groups).advantages
            summed = summed + weight * scores
        per_token = summed[:, None].expand(mask.shape)
        advantages = masked_whiten(per_token, mask).to(torch.float32)
        metrics: Metrics = {}
        if valid is not None:
            metrics[f"{PREFIX}/gdpo_singleton_count"] = (~valid).sum()
        return advantages, advantages, metrics

    def component_names(self) -> list[str]:
        """The component names (``["score"]`` for the single summed-score component)."""
        return list(self.gdpo_reward_keys) if self.gdpo_reward_keys else ["score"]
