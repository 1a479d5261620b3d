"""``reinforceplusplus`` advantage function: :class:`REINFORCEPLUSPLUSAdvantageFn` (trainer side)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, Metrics, TrainerAdvantage
from trinity_core.ops import masked_mean, masked_var, masked_whiten
from trinity_plugin_reinforce.columns import loss_mask
from trinity_plugin_reinforce.kernel import discounted_returns

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["REINFORCEPLUSPLUSAdvantageFn", "REINFORCEPlusPlusArgs"]


class REINFORCEPlusPlusArgs(ComponentArgs):
    """Arguments of :class:`REINFORCEPLUSPLUSAdvantageFn` (the reference's ``default_args()``)."""

    gamma: float = Field(1.0, ge=0.0, le=1.0, description="Discount between consecutive action tokens.")


class REINFORCEPLUSPLUSAdvantageFn(TrainerAdvantage):
    """REINFORCE++: discounted token returns, whitened over every action token of the batch.

    Hu et al., arXiv:2501.03262. In the trainer, on ``r = batch.token_level_scores()`` (the KL-penalised
    rewards when a KL penalty is configured) and ``m`` the action mask (response mask when absent):

    * returns ``H_t = r_t + d_t H_{t+1}``, ``d_t = γ`` when token ``t+1`` is an action token, else 1
      (masked recursion: rewards on non-action tokens belong to the preceding action, undiscounted;
      :func:`~trinity_plugin_reinforce.kernel.discounted_returns`);
    * advantages ``A_t = (H_t − μ) / sqrt(σ² + 1e-8)`` with ``μ``, ``σ²`` the mean and unbiased variance
      of ``H`` over all action tokens of the batch (float64; fewer than two tokens give ``σ² = 0``);
    * both are zero outside ``m``; metrics ``returns_mean`` and ``returns_std`` (0-d tensors).

    No per-group statistic, so no singleton or zero-variance policy is involved: every response gets the
    same treatment. No host synchronisation; rewards are not validated here (that would need one).
    """

    Args: ClassVar[type[ComponentArgs]] = REINFORCEPlusPlusArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2501.03262"
    required_fields: ClassVar[tuple[str, ...]] = ("reward", "action_mask")
    groups_independent: ClassVar[bool] = False
    """Whitening over every action token of the batch makes each advantage depend on all groups."""

    gamma: float

    def compute(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor, Metrics]:
        """``(advantages, returns, metrics)`` as described in the class docstring (float32 ``(N, R)``)."""
        mask = loss_mask(batch)
        returns = discounted_returns(batch.token_level_scores(), batch.response_mask, mask, self.gamma)
        advantages = masked_whiten(returns, mask)
        metrics: Metrics = {
            "returns_mean": masked_mean(returns, mask),
            "returns_std": masked_var(returns, mask).sqrt(),
        }
        return advantages.float(), returns.float(), metrics
