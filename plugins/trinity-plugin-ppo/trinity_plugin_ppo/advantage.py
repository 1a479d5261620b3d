"""``ppo`` advantage function: :class:`PPOAdvantageFn` (GAE, computed in the trainer)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, TrainerAdvantage
from trinity_core.components.base import Metrics
from trinity_core.ops import masked_whiten
from trinity_plugin_ppo.gae import masked_gae

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["GAEArgs", "PPOAdvantageFn"]


class GAEArgs(ComponentArgs):
    """Arguments of :class:`PPOAdvantageFn` (defaults: the reference's)."""

    gamma: float = Field(1.0, ge=0, le=1, description="Discount factor γ per action token.")
    lam: float = Field(
        1.0, ge=0, le=1, description="GAE λ: 0 is the one-step TD error, 1 the Monte-Carlo return minus V."
    )


class PPOAdvantageFn(TrainerAdvantage):
    """GAE with a critic: A = whiten(Σ_k (γλ)^k δ_{t+k}), δ_t = r_t + γV_{t+1} − V_t; returns A_raw + V.

    Generalised advantage estimation (Schulman et al. 2015, arXiv:1506.02438) per row over the action
    tokens only (:func:`~trinity_plugin_ppo.gae.masked_gae`: masked positions are skipped by the
    recursion, so multi-turn observation tokens neither discount nor leak values). Returns ``G`` are the
    raw advantages plus the values (the critic's target); the advantages are then whitened over all
    selected tokens of the batch with :func:`trinity_core.ops.masked_whiten` (mean 0, unbiased
    variance, ``rsqrt(var + 1e-8)``) and are exactly 0 outside the mask.

    Inputs: ``batch.extras["token_level_rewards"]`` (the rewards after a KL penalty) when the trainer put
    it there, else ``batch.token_level_scores()``; ``batch.column("values")`` ``(N, R)``; the mask is
    ``batch.action_mask`` (else ``response_mask``). No host synchronisation; metrics are empty.

    Differences from trinity-rft 0.6.0 (docs/reference-differences.md, "gae-masks"): its recursion
    ignores the mask (padding values feed the last real token's TD error, observation tokens are
    discounted and their values used) and its whitened advantages are not re-masked; it also raises on a
    batch with fewer than two selected tokens, where this whitening returns 0. On right-padded rows with
    zero rewards and values in the padding both agree.
    """

    Args: ClassVar[type[ComponentArgs]] = GAEArgs
    groups_independent: ClassVar[bool] = False
    """Whitening over every selected token of the batch makes each advantage depend on all groups."""
    paper: ClassVar[str | None] = "https://arxiv.org/abs/1506.02438"
    required_fields: ClassVar[tuple[str, ...]] = ("reward", "action_mask", "values")

    gamma: float
    lam: float

    def compute(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor, Metrics]:
        """``(whitened advantages, returns, {})``, both ``(N, R)`` float32 (float64 inside)."""
        where = f"advantage_fn {type(self).name()!r}"
        values = batch.column("values", needed_by=where)
        rewards = batch.extras.get("token_level_rewards")
        if rewards is None:
            rewards = batch.token_level_scores()
        mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
        if values.shape != mask.shape or rewards.shape != mask.shape:
            raise ValueError(
                f"{where}: values {tuple(values.shape)}, rewards {tuple(rewards.shape)} and the response "
                f"mask {tuple(mask.shape)} must all be (N, R); the trainer must pad the critic's values "
                "like the responses"
            )
        mask = mask.to(device=values.device)
        raw, returns = masked_gae(rewards.to(values.device), values, mask, self.gamma, self.lam)
        out = torch.promote_types(values.dtype, torch.float32)
        advantages = masked_whiten(raw, mask)
        return advantages.to(out), returns.to(out), {}
