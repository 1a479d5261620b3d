"""``remax`` advantage function: :class:`REMAXAdvantageFn` (trainer side, greedy-response baseline)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from torch import Tensor

from trinity_core.components import Metrics, TrainerAdvantage
from trinity_plugin_reinforce.columns import loss_mask, reward_baselines
from trinity_plugin_reinforce.kernel import discounted_returns

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["REMAXAdvantageFn"]


class REMAXAdvantageFn(TrainerAdvantage):
    """ReMax: A_t = (reward-to-go from token t) − b, b the reward of the greedy response to the prompt.

    Li et al., arXiv:2310.10505. In the trainer, with ``r = batch.token_level_scores()``:

    * returns ``H_t = Σ_{k≥t} r_k`` over the real response tokens (the masked recursion of
      :func:`~trinity_plugin_reinforce.kernel.discounted_returns` with ``γ = 1``);
    * advantages ``A_t = H_t − b_i`` with ``b = batch.extras["reward_baselines"]`` ``(N,)``;
    * both zero outside the action mask.

    The baseline is a trainer-side column: the trainer must generate a greedy response per prompt, score
    it and store the scores as ``batch.extras["reward_baselines"]`` (hence ``"reward_baselines"`` in
    ``required_fields``). Without it the call raises a ``KeyError`` that says so (the reference failed
    with a bare ``KeyError`` and no algorithm produced the column). No per-group statistic; no host sync.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2310.10505"
    required_fields: ClassVar[tuple[str, ...]] = ("reward", "action_mask", "reward_baselines")

    def compute(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor, Metrics]:
        """``(advantages, returns, metrics)`` as described in the class docstring (float32 ``(N, R)``)."""
        baselines = reward_baselines(batch, f"{type(self).name()} advantage")
        mask = loss_mask(batch)
        returns = discounted_returns(batch.token_level_scores(), batch.response_mask, mask, 1.0)
        advantages = returns - baselines.to(returns.device)[:, None]
        metrics: Metrics = {"reward_baseline_mean": baselines.mean()}
        return advantages.float(), returns.float(), metrics
