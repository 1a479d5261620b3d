"""``dro`` policy loss: :class:`DROPolicyLossFn` (verl ``loss_mode=dro``)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs, StandardPolicyLossFn
from trinity_core.ops import PolicyInputs, masked_mean

__all__ = ["DROArgs", "DROPolicyLossFn"]


class DROArgs(LossAggArgs):
    """Arguments of :class:`DROPolicyLossFn`."""

    dro_beta: float = Field(
        1.0,
        gt=0,
        allow_inf_nan=False,
        description=(
            "β > 0, strength of the quadratic log-ratio penalty β/2·(log π − log π_old)² (the paper's "
            "regularisation temperature τ). verl has no default and requires it to be set; 1.0 here."
        ),
    )


class DROPolicyLossFn(StandardPolicyLossFn):
    """DRO: offline policy loss L = agg(−(A · log π − β/2 · (log π − log π_old)²)).

    Direct Reward Optimisation (Richemond et al., *Offline Regularised Reinforcement Learning for Large
    Language Models Alignment*, arXiv:2405.19107) fits a policy to single-trajectory offline data
    ``(x, y, r)`` by minimising ``½(r − V(x) − τ·ℓ)²`` with ``ℓ = log π(y|x)/π_ref(y|x)``; its policy
    gradient, divided by ``τ``, is ``(−A + τ ℓ) ∇ℓ`` with ``A = r − V``. The peers' ``dro`` loss (verl,
    ``loss_mode=dro``) is the token-level form of this, with ``β = τ`` and the data policy ``π_old`` as the
    anchor:

        ``ℓ_t = −(A_t · log π_t − β/2 · δ_t²)``,   ``δ_t = log π_t − log π_old,t``,
        ``∇ℓ_t = (−A_t + β δ_t) ∇log π_t``:

    the penalty pulls every token back towards the data policy in proportion to how far it has moved,
    instead of PPO's hard clip. ``A`` is whatever advantage the caller provides (e.g. ``r − V``).

    The log-ratio is **not** clamped: there is no ``exp`` to overflow, and a clamp would remove the
    restoring gradient exactly where it matters most (``|δ| > 20``). ``log π``, ``log π_old`` and ``A`` are
    set to 0 at masked positions first, so NaN/inf stored there reach neither loss nor gradient.
    Aggregation uses ``loss_agg_mode`` with the trainer's global normalizers (``loss_scale=``), so the
    gradient does not depend on micro-batching. Metrics (detached 0-d, no host sync): ``dro_loss``,
    ``ppo_kl`` (masked mean of ``−δ``), ``dro_penalty`` (masked mean of ``β/2 · δ²``).
    """

    Args: ClassVar[type[ComponentArgs]] = DROArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2405.19107"
    microbatch_invariant: ClassVar[bool] = True
    """Summing micro-batch losses aggregated with the step's global normalizers gives the full batch's."""

    dro_beta: float
    loss_agg_mode: str

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """``DROPolicyLossFn(backend="verl", dro_beta=1.0, loss_agg_mode="token-mean")``."""
        super().__init__(backend=backend, **args)

    def compute(self, inputs: PolicyInputs, **kwargs: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss ``agg(−(A · log π − β/2 · δ²))`` over the ``action_mask`` tokens, and metrics."""
        mask, lp, delta = inputs.mask, inputs.logprob, inputs.delta
        penalty = 0.5 * self.dro_beta * delta.square()
        per_token = -(inputs.advantages * lp - penalty)
        loss = self.aggregate(per_token, mask)
        with torch.no_grad():
            metrics = {
                "dro_loss": loss.detach(),
                "ppo_kl": masked_mean(-delta, mask),
                "dro_penalty": masked_mean(penalty, mask),
            }
        return loss, metrics
