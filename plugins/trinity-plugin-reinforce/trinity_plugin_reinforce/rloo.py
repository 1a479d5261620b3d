"""``rloo`` advantage function: :class:`RLOOAdvantageFn` (trainer side, leave-one-out baseline)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from torch import Tensor

from trinity_core.components import Metrics, TrainerAdvantage
from trinity_plugin_reinforce.columns import loss_mask
from trinity_plugin_reinforce.kernel import leave_one_out, sequence_scores

if TYPE_CHECKING:
    from trinity_core.batch import ExperienceBatch

__all__ = ["RLOOAdvantageFn"]


class RLOOAdvantageFn(TrainerAdvantage):
    """RLOO: A_i = s_i − mean of the other responses to the same task (leave-one-out baseline).

    REINFORCE Leave-One-Out (Kool et al. 2019; Ahmadian et al., arXiv:2402.14740). In the trainer, with
    ``s_i = Σ_t r_{i,t}`` the outcome score of response ``i`` (sum over its real tokens of
    ``batch.token_level_scores()``) and ``n`` the size of its task group (``eid.tid``):

        ``A_i = s_i − (Σ_{j≠i} s_j)/(n − 1) = n/(n − 1) · (s_i − mean_g(s))``  (float64),

    broadcast over the response, zero outside the action mask; ``returns = advantages``.

    Policies: a **singleton** group (``n = 1``) has no other response to compare with and gets
    ``A = 0`` (the reference uses the raw score ``s_i``); a zero-variance group gets
    exactly 0 (exact float64 group mean). Metrics ``singleton_count`` and ``score_mean`` (0-d tensors).
    No host synchronisation.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2402.14740"
    required_fields: ClassVar[tuple[str, ...]] = ("reward", "action_mask")
    group_level: ClassVar[Literal["task", "run", "step"]] = "task"

    def compute(self, batch: ExperienceBatch) -> tuple[Tensor, Tensor, Metrics]:
        """``(advantages, returns, metrics)`` as described in the class docstring (float32 ``(N, R)``)."""
        mask = loss_mask(batch)
        scores = sequence_scores(batch.token_level_scores(), batch.response_mask)
        index = batch.group_index[self.group_level].to(scores.device)
        per_response, sizes = leave_one_out(scores, index, batch.num_groups[self.group_level])
        advantages = per_response[:, None].expand_as(mask).float()
        metrics: Metrics = {"singleton_count": (sizes == 1).sum(), "score_mean": scores.mean()}
        return advantages, advantages.clone(), metrics
