"""The loss of one micro-batch: policy loss + KL loss − entropy bonus, as ``trinity train`` forms it.

One function, :func:`micro_batch_loss`, used by the learner's update (:meth:`~trinity_core.train.
learner.learner.Learner.backward_minibatch`) and by the integrations (TRL's trainer, through
:func:`trinity_core.integrations.components.total_loss`), so that every way of training with our
components computes the same loss and the same gradient::

    loss = policy_loss(logprob, ..., loss_scale=pg_scale)
         + kl_loss.calculate_kl_loss(logprob, ref_logprob, mask, old_logprob=..., loss_scale=scale)
         − entropy_loss(entropy, mask, ..., loss_scale=scale)

``scale`` holds the optimizer step's global normalizers (:class:`~trinity_core.ops.LossScale`);
``pg_scale`` is the policy loss's own, which differs only for losses that normalise subsets of the rows
separately (the MIX losses' rollout / expert counts). Every term is aggregated with the same
``loss_agg_mode``. The returned terms are detached 0-d tensors named ``actor/<metric>`` (no host sync),
and a ``_finite/<kind>`` flag per term (:mod:`trinity_core.components.faults`). A component that raises,
exits, or returns a loss that is not a 0-d tensor with a gradient is a
:class:`~trinity_core.components.faults.ComponentFault` naming it.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor

from trinity_core.components.faults import call_component, checked_loss, finite_flag
from trinity_core.ops.loss_scale import LossScale

__all__ = [
    "LOSS_SCALE_BUILDER",
    "builds_loss_scale",
    "extra_inputs",
    "micro_batch_loss",
    "own_loss_scale",
]

LOSS_SCALE_BUILDER = "build_loss_scale"
"""Name of the classmethod ``build_loss_scale(micro_batches, *, max_tokens, all_reduce)`` with which a
policy loss builds its own ``loss_scale`` from the step's micro-batches (a dict of columns each), when a
plain :class:`~trinity_core.ops.LossScale` does not fit it (the MIX losses count rollout and expert rows
separately)."""

_OLD_BUILDER = "conformance_loss_scale"


def _name(component: Any) -> str:
    name = getattr(type(component), "name", None)
    return str(name()) if callable(name) else type(component).__name__


def extra_inputs(component: Any, columns: Mapping[str, Tensor], given: Sequence[str]) -> dict[str, Tensor]:
    """The batch columns a component's ``__call__`` names besides ``given`` (e.g. the ``expert_mask`` of
    the ``mix`` entropy loss), among those the step has."""
    params = inspect.signature(type(component).__call__).parameters
    return {k: columns[k] for k in params if k in columns and k not in given}


def own_loss_scale(
    loss_class: type,
    micro_batches: Sequence[Mapping[str, Tensor]],
    *,
    max_tokens: float | None,
    all_reduce: bool,
) -> Any | None:
    """The ``loss_scale`` a policy loss class builds for itself (:data:`LOSS_SCALE_BUILDER`), or None when
    it builds none (the caller then uses the step's :class:`~trinity_core.ops.LossScale`).

    ``conformance_loss_scale``, the builder's name before, still works for one release, with a warning.
    """
    builder = getattr(loss_class, LOSS_SCALE_BUILDER, None)
    if builder is None and callable(getattr(loss_class, _OLD_BUILDER, None)):
        warnings.warn(
            f"{loss_class.__qualname__}.{_OLD_BUILDER} is read as {LOSS_SCALE_BUILDER}; rename it (the old "
            "name goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        builder = getattr(loss_class, _OLD_BUILDER)
    if not callable(builder):
        return None
    return builder(list(micro_batches), max_tokens=max_tokens, all_reduce=all_reduce)


def builds_loss_scale(loss_class: type) -> bool:
    """Whether ``loss_class`` builds its own ``loss_scale`` (see :func:`own_loss_scale`)."""
    return callable(getattr(loss_class, LOSS_SCALE_BUILDER, None)) or callable(
        getattr(loss_class, _OLD_BUILDER, None)
    )


def micro_batch_loss(
    policy_loss: Any,
    kl_loss: Any | None,
    entropy_loss: Any | None,
    *,
    loss_agg_mode: str | None,
    logprob: Tensor,
    columns: Mapping[str, Tensor],
    scale: LossScale,
    entropy: Tensor | None = None,
    pg_scale: Any = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The loss of one micro-batch and its terms.

    Args:
        policy_loss: the policy loss component; it reads the columns named in its ``select_keys``.
        kl_loss: the KL loss component, or None.
        entropy_loss: the entropy regularizer, or None (an ``entropy_coef`` of 0 still adds its
            metrics; whether its gradient flows is decided where ``entropy`` is computed).
        loss_agg_mode: the aggregation mode passed to every term (None: each component's own).
        logprob: current log-probs of the response tokens ``(B, T)``, differentiable.
        columns: in trinity names: ``action_mask`` ``(B, T)``, ``advantages``, ``ref_logprob`` when a
            KL loss is selected, and whatever else the components ask for. Without ``old_logprob``
            the sampling policy is the current one (``logprob.detach()``: one update per step).
        scale: the optimizer step's global normalizers.
        entropy: per-token entropies ``(B, T)``; required when an entropy regularizer is selected.
        pg_scale: the policy loss's ``loss_scale`` when it differs from ``scale`` (MIX losses).

    Returns:
        ``(loss, terms)``: ``loss = pg_loss + kl_loss − entropy_loss``; ``terms`` are detached 0-d
        tensors named ``actor/<metric>``, ``actor/pg_loss`` and ``actor/loss`` included.

    Raises:
        KeyError: a component needs a column that ``columns`` lacks.
        ValueError: an entropy regularizer is selected but ``entropy`` is None.
    """
    cols = dict(columns)
    cols.setdefault("old_logprob", logprob.detach())
    mask = cols["action_mask"]
    trinity_keys = {key: policy_loss.mapper.to_trinity(key) for key in policy_loss.select_keys}
    missing = sorted(name for name in trinity_keys.values() if name not in cols)
    if missing:
        raise KeyError(
            f"policy loss {_name(policy_loss)!r} needs the batch columns {missing}; the batch has "
            f"{sorted(cols)}"
        )
    kwargs = {key: cols[name] for key, name in trinity_keys.items()}
    pg_scale = scale if pg_scale is None else pg_scale
    result = call_component(
        "policy_loss",
        policy_loss,
        policy_loss,
        logprob,
        **kwargs,
        loss_scale=pg_scale,
        loss_agg_mode=loss_agg_mode,
    )
    pg_loss, pg_metrics = checked_loss("policy_loss", policy_loss, result, logprob)
    total = pg_loss
    terms = {f"actor/{k}": v for k, v in pg_metrics.items() if isinstance(v, Tensor)}
    terms["actor/pg_loss"] = pg_loss.detach()
    terms.update([finite_flag("policy_loss", pg_loss)])
    if kl_loss is not None:
        if "ref_logprob" not in cols:
            raise KeyError(
                f"KL loss {_name(kl_loss)!r} needs the reference log-probs (column 'ref_logprob'); "
                "load a reference model or switch the KL loss off"
            )
        result = call_component(
            "kl_fn",
            kl_loss,
            kl_loss.calculate_kl_loss,
            logprob,
            cols["ref_logprob"],
            mask,
            loss_agg_mode=loss_agg_mode,
            old_logprob=cols["old_logprob"],
            loss_scale=scale,
        )
        kl_value, kl_metrics = checked_loss("kl_fn", kl_loss, result, logprob)
        terms.update([finite_flag("kl_fn", kl_value)])
        total = total + kl_value
        terms.update({f"actor/{k}": v for k, v in kl_metrics.items() if k != "kl_coef"})
    if entropy_loss is not None:
        if entropy is None:
            raise ValueError(
                f"entropy loss {_name(entropy_loss)!r} needs per-token entropies; compute them with the "
                "log-probs (e.g. response_logprobs(..., with_entropy=True))"
            )
        more = extra_inputs(entropy_loss, cols, ("entropy", "action_mask"))
        result = call_component(
            "entropy_loss",
            entropy_loss,
            entropy_loss,
            entropy,
            mask,
            loss_scale=scale,
            loss_agg_mode=loss_agg_mode,
            **more,
        )
        ent_value, ent_metrics = checked_loss("entropy_loss", entropy_loss, result, entropy)
        terms.update([finite_flag("entropy_loss", ent_value)])
        total = total - ent_value
        terms.update({f"actor/{k}": v for k, v in ent_metrics.items()})
    terms["actor/loss"] = total.detach()
    return total, terms
