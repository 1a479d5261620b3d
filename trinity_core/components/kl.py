"""KL functions: one class serves as KL *penalty* (on rewards) and as KL *loss* (in the actor loss).

The API of trinity-rft's ``trinity.algorithm.kl_fn``. Unlike trinity-rft 0.6.0, the penalty path checks
for missing reference log-probs before using them, the adaptive coefficient can be updated from either
path, and the reported ``kl_coef`` is the value after the update (the one the next step uses).

Coefficient controllers (Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences"):

* fixed: ``beta`` never changes;
* adaptive: ``e = clip(KL / target_kl - 1, -0.2, 0.2)``, ``beta <- beta * (1 + e * n / horizon)``, where
  ``KL`` is the observed mean per-sequence KL and ``n`` the number of sequences it was measured on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from pydantic import Field, model_validator
from torch import Tensor

from trinity_core.components._aggregation import LossAggMode, LossAggregation
from trinity_core.components.base import Component, ComponentArgs

if TYPE_CHECKING:
    from trinity_core.ops import LossScale

__all__ = ["AdaptiveKLController", "FixedKLController", "KLController", "KLFn", "sequence_mean_kl"]

#: Bound of the proportional error of the adaptive controller.
ADAPTIVE_ERROR_CLIP = 0.2


class FixedKLController:
    """A constant KL coefficient ``beta`` (0-d float64 tensor)."""

    def __init__(self, kl_coef: float) -> None:
        self.value: Tensor = torch.tensor(kl_coef, dtype=torch.float64)

    def update(self, current_kl: Tensor | float, n_steps: int) -> Tensor:
        """Return ``beta`` unchanged."""
        return self.value


class AdaptiveKLController:
    """Adaptive KL coefficient: ``beta <- beta * (1 + clip(KL/target - 1, -0.2, 0.2) * n / horizon)``."""

    def __init__(self, kl_coef: float, target_kl: float, horizon: float) -> None:
        if target_kl <= 0 or horizon <= 0:
            raise ValueError(f"adaptive KL needs target_kl > 0 and horizon > 0, got {target_kl}, {horizon}")
        self.value: Tensor = torch.tensor(kl_coef, dtype=torch.float64)
        self.target_kl = target_kl
        self.horizon = horizon

    def update(self, current_kl: Tensor | float, n_steps: int) -> Tensor:
        """Update ``beta`` from the observed KL over ``n_steps`` sequences; return the new value.

        Stays on the device of ``current_kl`` (no host synchronisation).
        """
        kl = torch.as_tensor(current_kl, dtype=torch.float64).detach()
        error = (kl / self.target_kl - 1.0).clamp(-ADAPTIVE_ERROR_CLIP, ADAPTIVE_ERROR_CLIP)
        self.value = self.value.to(kl.device) * (1.0 + error * n_steps / self.horizon)
        return self.value


KLController = FixedKLController | AdaptiveKLController


def sequence_mean_kl(kl: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``(Σ_b mean_t kl_b, #rows)`` over rows with at least one selected token (float64, no sync)."""
    m = mask != 0
    count = m.sum(dim=-1)
    per_row = torch.where(m, kl.detach().to(torch.float64), 0.0).sum(dim=-1) / count.clamp_min(1)
    return per_row.sum(), (count > 0).sum()


def _zero_masked(valid: Tensor, values: Tensor) -> Tensor:
    """``values`` with masked positions set to 0 before any estimator sees them.

    Masking only the estimator's output is not enough: the gradient of a non-linear estimator at a
    NaN input is NaN, and ``0 * NaN`` is NaN, so a NaN planted at a padded position would reach the
    parameters. Zeroing the inputs with ``torch.where`` keeps both value and gradient clean for every
    KL function, including third-party ones.
    """
    return torch.where(valid, values, torch.zeros((), dtype=values.dtype, device=values.device))


class KLFn(LossAggregation, Component, ABC):
    """Base of KL functions: implement :meth:`calculate_kl`; penalty and loss paths come with it.

    Example (k2 = 0.5 (logp - ref)^2)::

        class K2Fn(KLFn):
            \"\"\"k2 estimator: 0.5 (logp - ref)^2.\"\"\"

            def calculate_kl(self, logprob, ref_logprob, old_logprob=None):
                return 0.5 * (logprob - ref_logprob).square()
    """

    kind: ClassVar[str] = "kl_fn"

    class Args(ComponentArgs):
        """Arguments of every KL function."""

        adaptive: bool = Field(False, description="Adapt the coefficient towards target_kl.")
        kl_coef: float = Field(0.001, ge=0, description="(Initial) KL coefficient beta.")
        target_kl: float | None = Field(None, gt=0, description="Target KL of the adaptive controller.")
        horizon: float | None = Field(
            None, gt=0, description="Horizon (in sequences) of the adaptive controller."
        )
        loss_agg_mode: LossAggMode | None = Field(
            None, description="Aggregation of the KL loss; None uses the algorithm's loss_agg_mode."
        )

        @model_validator(mode="after")
        def _adaptive_needs_target(self) -> KLFn.Args:
            if self.adaptive and (self.target_kl is None or self.horizon is None):
                raise ValueError("adaptive KL needs target_kl and horizon; set both or set adaptive: false")
            return self

    adaptive: bool
    target_kl: float | None
    horizon: float | None
    loss_agg_mode: LossAggMode | None

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        settings: Any = self.args
        self.controller: KLController
        if settings.adaptive:
            self.controller = AdaptiveKLController(settings.kl_coef, settings.target_kl, settings.horizon)
        else:
            self.controller = FixedKLController(settings.kl_coef)
        self._observed = (torch.zeros((), dtype=torch.float64), torch.zeros((), dtype=torch.int64))

    @property
    def kl_coef(self) -> Tensor:
        """The current coefficient ``beta`` (0-d float64 tensor)."""
        return self.controller.value

    @abstractmethod
    def calculate_kl(self, logprob: Tensor, ref_logprob: Tensor, old_logprob: Tensor | None = None) -> Tensor:
        """Per-token KL estimate between the policy (``logprob``) and the reference (``ref_logprob``)."""

    def update_kl_coef(
        self, current_kl: Tensor | float | None = None, batch_size: int | None = None
    ) -> Tensor:
        """Update the coefficient once per step and return the new value.

        With no arguments, uses the mean per-sequence KL observed by :meth:`calculate_kl_loss` since the
        last update (and the number of sequences observed); the observation is then reset. A fixed
        controller returns its constant.
        """
        total, rows = self._observed
        self._observed = (torch.zeros((), dtype=torch.float64), torch.zeros((), dtype=torch.int64))
        if current_kl is None:
            current_kl = total / rows.clamp_min(1)
        if batch_size is None:
            if not isinstance(self.controller, AdaptiveKLController):
                return self.controller.value
            batch_size = int(rows)  # one host read per optimizer step, outside the loss
        return self.controller.update(current_kl, batch_size)

    def apply_kl_penalty_to_reward(
        self,
        token_level_scores: Tensor,
        logprob: Tensor,
        ref_logprob: Tensor | None,
        response_mask: Tensor,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Penalise rewards: ``rewards = scores - beta * kl * mask``, then update ``beta``.

        ``logprob`` are the rollout (old) log-probs, ``(B, T)`` like the rest. Without reference log-probs
        the scores pass through unchanged with zero KL. Metrics: ``kl`` (mean over sequences of the
        masked per-token mean) and ``kl_coef`` (after the update).
        """
        if ref_logprob is None:
            zero = torch.zeros((), dtype=torch.float64, device=token_level_scores.device)
            return token_level_scores, {"kl": zero, "kl_coef": self.kl_coef}
        valid = response_mask.bool()
        logprob, ref_logprob = _zero_masked(valid, logprob), _zero_masked(valid, ref_logprob)
        kl = torch.where(valid, self.calculate_kl(logprob, ref_logprob), 0.0)
        beta = self.kl_coef.to(kl.device)
        rewards = token_level_scores - (beta * kl).to(token_level_scores.dtype)
        total, rows = sequence_mean_kl(kl, response_mask)
        current_kl = total / rows.clamp_min(1)
        new_coef = self.controller.update(current_kl, int(response_mask.shape[0]))
        return rewards, {"kl": current_kl, "kl_coef": new_coef}

    def calculate_kl_loss(
        self,
        logprob: Tensor,
        ref_logprob: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str | None = None,
        old_logprob: Tensor | None = None,
        loss_scale: LossScale | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """KL loss ``beta * agg(kl, mask)`` with metrics ``kl_loss`` (unscaled) and ``kl_coef``.

        ``loss_agg_mode`` is the algorithm's mode, used when this component's own is unset. For an
        adaptive coefficient the per-sequence KL is recorded (on device) for :meth:`update_kl_coef`.
        """
        valid = response_mask.bool()
        kl = self.calculate_kl(
            _zero_masked(valid, logprob),
            _zero_masked(valid, ref_logprob),
            None if old_logprob is None else _zero_masked(valid, old_logprob),
        )
        with self._aggregation_context(loss_scale, loss_agg_mode):
            value = self.aggregate(kl, response_mask)
        if isinstance(self.controller, AdaptiveKLController):
            total, rows = sequence_mean_kl(kl, response_mask)
            seen_total, seen_rows = self._observed
            self._observed = (seen_total.to(total.device) + total, seen_rows.to(rows.device) + rows)
        beta = self.kl_coef.to(value.device)
        return value * beta.to(value.dtype), {"kl_loss": value.detach(), "kl_coef": beta}
