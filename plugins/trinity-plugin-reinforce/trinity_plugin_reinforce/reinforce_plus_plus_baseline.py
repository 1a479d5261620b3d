"""``reinforce_plus_plus_baseline`` advantage (trainer side): group-mean baseline, batch whitening."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from torch import Tensor

from trinity_core.components import Metrics, TrainerAdvantage
from trinity_core.ops import group_stats, masked_whiten, segment_count
from trinity_plugin_reinforce.columns import loss_mask
from trinity_plugin_reinforce.kernel import sequence_scores

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["REINFORCEPlusPlusBaselineAdvantageFn"]


class REINFORCEPlusPlusBaselineAdvantageFn(TrainerAdvantage):
    """REINFORCE++-baseline: subtract the task-group mean score, then whiten over the batch's action tokens.

    verl's ``reinforce_plus_plus_baseline`` (Hu et al., arXiv:2501.03262). In the trainer, with
    ``s_i = Σ_t r_{i,t}`` the outcome score of response ``i`` (sum over its real tokens of
    ``batch.token_level_scores()``) and ``g(i)`` its task group (``eid.tid``):

    * ``c_i = s_i − mean_{g(i)}(s)`` (float64, the mean exact for equal scores);
    * ``A_{i,t} = (c_i − μ) / sqrt(σ² + 1e-8)`` on action tokens, with ``μ``, ``σ²`` the mean and
      unbiased variance of ``c`` over all action tokens of the batch (token-weighted, as in verl);
      ``returns = advantages``; both zero outside the action mask.

    Policies: a singleton group's baseline is its own score, so ``c = 0`` — the same as a zero-variance
    group (verl uses a baseline of 0 for singletons, i.e. the raw score). After whitening both get
    ``−μ / sqrt(σ² + 1e-8)``, the shift every response receives. Metric ``singleton_count``.
    No host synchronisation.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2501.03262"
    required_fields: ClassVar[tuple[str, ...]] = ("reward", "action_mask")
    groups_independent: ClassVar[bool] = False
    """Whitening over every action token of the batch makes each advantage depend on all groups."""
    group_level: ClassVar[Literal["task", "run", "step"]] = "task"

    def compute(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor, Metrics]:
        """``(advantages, returns, metrics)`` as described in the class docstring (float32 ``(N, R)``)."""
        mask = loss_mask(batch)
        scores = sequence_scores(batch.token_level_scores(), batch.response_mask)
        index = batch.group_index[self.group_level].to(scores.device)
        num_groups = batch.num_groups[self.group_level]
        centred = scores - group_stats(scores, index, num_groups).mean[index]
        advantages = masked_whiten(centred[:, None].expand_as(mask), mask).float()
        sizes = segment_count(index, num_groups)
        metrics: Metrics = {"singleton_count": (sizes == 1).sum()}
        return advantages, advantages.clone(), metrics
