"""``gpg`` policy loss: :class:`GPGPolicyLossFn` (verl ``loss_mode=gpg``)."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from trinity_core.components import ComponentArgs, LossAggArgs, PolicyLossFn
from trinity_core.ops import as_bool_mask, compute_dtype, select

__all__ = ["GPGArgs", "GPGPolicyLossFn"]


class GPGArgs(LossAggArgs):
    """Arguments of :class:`GPGPolicyLossFn`: only ``loss_agg_mode`` (default ``token-mean``, as verl)."""


class GPGPolicyLossFn(PolicyLossFn):
    """GPG: the plain policy-gradient loss L = agg(−A · log π), with no ratio and no clipping.

    Group Policy Gradient (Chu et al., *GPG: A Simple and Strong Reinforcement Learning Baseline for Model
    Reasoning*, arXiv:2504.02546) drops PPO's surrogate: per selected token the loss is

        ``ℓ_t = −A_t · log π_t``,   ``∇ℓ_t = −A_t ∇log π_t``,

    reduced with ``loss_agg_mode`` and the trainer's global normalizers (``loss_scale=``). GPG's other
    ingredients (the batch-level correction ``α`` and the advantage normalisation) live in the advantage
    function (``gpg`` of trinity-plugin-grpo), not here. Old log-probs are not needed (verl receives them
    but ignores them).

    Numerics: ``log π`` and ``A`` are set to 0 at masked positions before any arithmetic, so NaN/inf
    stored there reach neither the loss nor the gradient. Metrics (detached 0-d, no host sync):
    ``gpg_loss``.
    """

    Args: ClassVar[type[ComponentArgs]] = GPGArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2504.02546"
    microbatch_invariant: ClassVar[bool] = True
    """Summing micro-batch losses aggregated with the step's global normalizers gives the full batch's."""

    loss_agg_mode: str

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """``GPGPolicyLossFn(backend="verl", loss_agg_mode="token-mean")``."""
        super().__init__(backend=backend, **args)

    def __call__(  # type: ignore[override]
        self, logprob: Tensor, action_mask: Tensor, advantages: Tensor, **kwargs: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss ``agg(−A · log π)`` over the ``action_mask`` tokens, and metrics.

        Args:
            logprob: current log-probs ``(B, T)`` (differentiable).
            action_mask: ``(B, T)``, True / non-zero on the tokens that count.
            advantages: ``(B, T)`` (or broadcastable) advantages.
        """
        mask = as_bool_mask(action_mask)
        dtype = compute_dtype(logprob)
        per_token = -select(advantages, mask, dtype) * select(logprob, mask, dtype)
        loss = self.aggregate(per_token, mask)
        return loss, {"gpg_loss": loss.detach()}
