"""Checks of KL functions, on both paths: the KL loss (``calculate_kl_loss``, in the actor loss) and the
KL penalty (``apply_kl_penalty_to_reward``, on token rewards).

The loss path gets every loss check (gradients must reach ``logprob``). The penalty path returns
penalised token rewards: they must be finite at selected positions, unchanged there when NaN/inf are
planted at masked positions, and come with detached 0-d metrics and no host synchronisation.
"""

from __future__ import annotations

from typing import Any

from trinity_core.testing import _loss
from trinity_core.testing._core import Subject, check
from trinity_core.testing.common import BUILT

__all__ = ["LOSS_PROBE", "PENALTY_PROBE"]


def _invoke_loss(instance: Any, inputs: dict[str, Any], extra: tuple[str, ...]) -> Any:
    return instance.calculate_kl_loss(
        inputs["logprob"], inputs["ref_logprob"], inputs["action_mask"], old_logprob=inputs["old_logprob"]
    )


def _invoke_penalty(instance: Any, inputs: dict[str, Any], extra: tuple[str, ...]) -> Any:
    return instance.apply_kl_penalty_to_reward(
        inputs["token_level_scores"], inputs["old_logprob"], inputs["ref_logprob"], inputs["action_mask"]
    )


LOSS_PROBE = _loss.LossProbe(
    "calculate_kl_loss", _invoke_loss, lambda _: ["logprob", "ref_logprob", "old_logprob", "action_mask"]
)
"""How the kit calls the KL loss path."""
PENALTY_PROBE = _loss.LossProbe(
    "apply_kl_penalty_to_reward",
    _invoke_penalty,
    lambda _: ["token_level_scores", "old_logprob", "ref_logprob", "action_mask"],
    grad_inputs=(),
    token_output=True,
)
"""How the kit calls the KL penalty path."""


@check("kl_fn", requires=BUILT)
def check_kl_loss_is_finite(subject: Subject) -> None:
    """the KL loss is a finite 0-d tensor on random inputs"""
    _loss.check_finite(subject, LOSS_PROBE)


@check("kl_fn", requires=BUILT)
def check_kl_loss_is_differentiable(subject: Subject) -> None:
    """the gradient of the KL loss reaches logprob and is finite"""
    _loss.check_differentiable(subject, LOSS_PROBE)


@check("kl_fn", requires=BUILT)
def check_kl_loss_masked_positions_ignored(subject: Subject) -> None:
    """NaN/inf at masked positions change neither KL loss, metrics nor gradient"""
    _loss.check_masked_ignored(subject, LOSS_PROBE)


@check("kl_fn", requires=BUILT)
def check_kl_loss_metrics_are_detached_scalars(subject: Subject) -> None:
    """KL loss metrics are detached 0-d tensors"""
    _loss.check_detached_metrics(subject, LOSS_PROBE)


@check("kl_fn", requires=BUILT)
def check_kl_loss_no_host_sync(subject: Subject) -> None:
    """the KL loss call makes no host synchronisation"""
    _loss.check_no_host_sync(subject, LOSS_PROBE)


@check("kl_fn", requires=BUILT)
def check_kl_penalty_is_finite(subject: Subject) -> None:
    """penalised rewards are finite at selected positions"""
    _loss.check_finite(subject, PENALTY_PROBE)


@check("kl_fn", requires=BUILT)
def check_kl_penalty_masked_positions_ignored(subject: Subject) -> None:
    """NaN/inf at masked positions change neither the selected rewards nor the metrics"""
    _loss.check_masked_ignored(subject, PENALTY_PROBE)


@check("kl_fn", requires=BUILT)
def check_kl_penalty_metrics_are_detached_scalars(subject: Subject) -> None:
    """KL penalty metrics are detached 0-d tensors"""
    _loss.check_detached_metrics(subject, PENALTY_PROBE)


@check("kl_fn", requires=BUILT)
def check_kl_penalty_no_host_sync(subject: Subject) -> None:
    """the KL penalty call makes no host synchronisation"""
    _loss.check_no_host_sync(subject, PENALTY_PROBE)
