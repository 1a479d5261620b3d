"""``mix_chord`` policy loss: :class:`MIXCHORDPolicyLossFn` and its μ schedule."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from pydantic import Field
from torch import Tensor
from trinity_plugin_sft import SFTLossFn, SFTPhiLossFn, SFTTokenLoss

from trinity_core.components import ComponentArgs
from trinity_plugin_mix.mixed import MixedArgs, MixedPolicyLoss

__all__ = ["MIXCHORDArgs", "MIXCHORDPolicyLossFn", "mu_schedule"]


def mu_schedule(step: Tensor, warmup_steps: int, decay_steps: int, peak: float, valley: float) -> Tensor:
    """CHORD's μ at training step ``s`` (a tensor; computed on its device, float64).

    ``μ = s / W · peak`` for ``s < W``; ``valley`` for ``s ≥ W + D``; otherwise
    ``valley + (peak − valley) · (1 + cos(π (s − W) / D)) / 2`` (cosine decay from peak to valley).
    With ``W = D = 0`` it is always ``valley``.
    """
    s = step.to(torch.float64)
    warm = s / max(warmup_steps, 1) * peak
    phase = (s - warmup_steps) / max(decay_steps, 1)
    decay = valley + (peak - valley) * 0.5 * (1 + torch.cos(math.pi * phase))
    valley_t = torch.full_like(s, valley)
    return torch.where(s < warmup_steps, warm, torch.where(s >= warmup_steps + decay_steps, valley_t, decay))


class MIXCHORDArgs(MixedArgs):
    """Arguments of :class:`MIXCHORDPolicyLossFn`."""

    mu_warmup_steps: int = Field(0, ge=0, description="Steps W of the linear warm-up of μ from 0 to mu_peak.")
    mu_decay_steps: int = Field(
        0, ge=0, description="Steps D of the cosine decay of μ from mu_peak to mu_valley."
    )
    mu_peak: float = Field(0.1, ge=0.0, le=1.0, description="μ at the end of the warm-up.")
    mu_valley: float = Field(0.1, ge=0.0, le=1.0, description="μ after warm-up and decay.")
    enable_phi_function: bool = Field(
        True, description="Weight the SFT term by φ(p) = p(1 − p) (sft_phi) instead of plain NLL (sft)."
    )


class MIXCHORDPolicyLossFn(MixedPolicyLoss):
    """CHORD: MIX with a scheduled μ and a φ-weighted SFT term, L = (1 − μ(s)) L_rl + μ(s) L_sft_φ.

    CHORD (arXiv:2508.11408): the SFT term on expert rows is ``sft_phi`` (``φ(p) = p(1 − p)``, no
    cut-off) when ``enable_phi_function``, else ``sft``; ``μ(s)`` follows :func:`mu_schedule` at the
    step ``s`` given per row in ``step`` (the largest value of the call is used; the reference asserts
    they are equal, which needs a host synchronisation). Everything else as
    :class:`~trinity_plugin_mix.mixed.MixedPolicyLoss`. Unlike the reference, an empty subset contributes
    0 (the reference runs the inner losses on empty tensors: NaN in ``seq-mean-*`` modes) and
    metrics are not multiplied by the sample weights. Extra metric: ``mu``.
    """

    Args: ClassVar[type[ComponentArgs]] = MIXCHORDArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2508.11408"

    mu_warmup_steps: int
    mu_decay_steps: int
    mu_peak: float
    mu_valley: float
    enable_phi_function: bool

    def make_sft_loss(self, loss_agg_mode: str) -> SFTTokenLoss:
        """``sft_phi`` (cut-off 1) when ``enable_phi_function``, else ``sft``."""
        if self.enable_phi_function:
            return SFTPhiLossFn(backend=self.backend, loss_agg_mode=loss_agg_mode, cutoff_prob=1.0)
        return SFTLossFn(backend=self.backend, loss_agg_mode=loss_agg_mode)

    def __call__(  # type: ignore[override]
        self,
        logprob: Tensor,
        old_logprob: Tensor,
        action_mask: Tensor,
        advantages: Tensor,
        expert_mask: Tensor,
        step: Tensor,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Mixed loss and metrics; ``step`` is ``(B,)`` (the training step of each row)."""
        if step.shape != (logprob.shape[0],):
            raise ValueError(
                f"policy loss 'mix_chord': step has shape {tuple(step.shape)}, expected ({logprob.shape[0]},)"
            )
        mu = mu_schedule(step.max(), self.mu_warmup_steps, self.mu_decay_steps, self.mu_peak, self.mu_valley)
        dtype = torch.promote_types(logprob.dtype, torch.float32)
        loss, metrics = self.combine(logprob, old_logprob, action_mask, advantages, expert_mask, mu.to(dtype))
        metrics["mu"] = mu.to(dtype)
        return loss, metrics
