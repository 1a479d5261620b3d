"""Rejection sampling of the rollout correction (verl's ``rollout_rs``), vectorised over the batch.

With ``δ_t = old_logprob_t − rollout_logprob_t`` on the response tokens (mask ``m``), clamped to
``±LOG_RATIO_CLAMP``, each option scores tokens with one divergence and keeps a token or a response
when its score passes the option's threshold:

* ``k1``: ``δ_t`` (the log-ratio), kept when ``log(lower) ≤ score ≤ log(upper)`` (a ratio band);
* ``k2``: ``½ δ_t²``, kept when ``score ≤ upper``;
* ``k3``: ``exp(δ_t) − 1 − δ_t``, kept when ``score ≤ upper``.

``token_kN`` tests each token; ``seq_sum_kN``, ``seq_mean_kN`` and ``seq_max_kN`` test the sum, mean and
maximum of a response's token scores and keep or reject the whole response. Several options (a
comma-separated list) must all keep a token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from trinity_core.ops import LOG_RATIO_CLAMP

__all__ = ["REJECTION_OPTIONS", "RejectionCriterion", "parse_rejection", "rejection_keep"]

REJECTION_OPTIONS = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)
"""verl's ``rollout_rs`` options (``seq_max_k1`` does not exist there either)."""


@dataclass(frozen=True)
class RejectionCriterion:
    """One ``rollout_rs`` option with its bounds: ``lower``/``upper`` are ratio bounds for ``k1``; for
    ``k2``/``k3`` only ``upper`` applies, a bound on the divergence."""

    option: str
    lower: float
    upper: float


def parse_rejection(options: str, thresholds: str | float | None) -> list[RejectionCriterion]:
    """verl's spelling: ``options`` comma-separated (duplicates dropped), ``thresholds`` one per option,
    comma-separated, or a single one for all. A ``k1`` threshold is ``"lower_upper"`` or an upper ratio
    bound (lower: its reciprocal); a ``k2``/``k3`` threshold is a positive upper bound. Raises
    ``ValueError`` naming the argument and what to write instead."""
    names = list(dict.fromkeys(o.strip() for o in options.split(",") if o.strip()))
    unknown = [n for n in names if n not in REJECTION_OPTIONS]
    if unknown or not names:
        raise ValueError(
            f"rollout_rs: unknown option(s) {unknown or [options]}; options: {', '.join(REJECTION_OPTIONS)} "
            "(comma-separated to combine)"
        )
    if thresholds is None:
        raise ValueError(f"rollout_rs {options!r} needs rollout_rs_threshold (one per option or one for all)")
    values: list[str | float] = (
        [t.strip() for t in thresholds.split(",")] if isinstance(thresholds, str) else [thresholds]
    )
    if len(values) == 1:
        values = values * len(names)
    if len(values) != len(names):
        raise ValueError(
            f"rollout_rs_threshold {thresholds!r}: {len(values)} values for {len(names)} options {names}; "
            "give one per option or one for all"
        )
    return [_criterion(name, value) for name, value in zip(names, values, strict=True)]


def _criterion(name: str, value: str | float) -> RejectionCriterion:
    text = str(value)
    try:
        if name.endswith("k1") and "_" in text:
            lower, upper = (float(v) for v in text.split("_"))
        else:
            upper = float(text)
            lower = 1.0 / upper if name.endswith("k1") and upper > 0 else 0.0
    except ValueError:
        raise ValueError(
            f"rollout_rs_threshold for {name}: {text!r} is not a number"
            + (' or "lower_upper" (e.g. "0.5_2.0")' if name.endswith("k1") else "")
        ) from None
    if upper <= 0 or lower < 0 or lower > upper:
        raise ValueError(f"rollout_rs_threshold for {name}: need 0 ≤ lower ≤ upper, upper > 0; got {text!r}")
    return RejectionCriterion(name, lower, upper)


@torch.no_grad()
def rejection_keep(
    old_logprob: Tensor, rollout_logprob: Tensor, mask: Tensor, criteria: list[RejectionCriterion]
) -> tuple[Tensor, dict[str, Tensor]]:
    """The ``(B, T)`` boolean mask of the response tokens every criterion keeps, and the metrics
    ``rollout_rs_masked_frac`` (share of the response tokens rejected) and, per option,
    ``rollout_rs_<option>_frac`` (share rejected by that option alone)."""
    valid = mask.bool()
    delta = torch.where(valid, old_logprob.double() - rollout_logprob.double(), 0.0)
    delta = delta.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    scores = {"k1": delta, "k2": 0.5 * delta.square(), "k3": torch.expm1(delta) - delta}
    count = valid.sum(-1, keepdim=True)
    total = valid.sum().clamp(min=1).double()
    keep, metrics = valid.clone(), {}
    for c in criteria:
        kind = c.option[-2:]
        score = torch.where(valid, scores[kind], 0.0)  # every kN is 0 at δ = 0, so padding adds nothing
        if c.option.startswith("seq_sum"):
            score = score.sum(-1, keepdim=True)
        elif c.option.startswith("seq_mean"):
            score = score.sum(-1, keepdim=True) / count.clamp(min=1)
        elif c.option.startswith("seq_max"):
            score = score.amax(-1, keepdim=True)  # k2, k3 ≥ 0: padding's 0 never wins over a token
        if kind == "k1":
            low = math.log(c.lower) if c.lower > 0 else -math.inf
            ok = (score >= low) & (score <= math.log(c.upper))
        else:
            ok = score <= c.upper
        ok = ok.expand_as(valid) & valid
        metrics[f"rollout_rs_{c.option}_frac"] = (valid & ~ok).sum().double() / total
        keep &= ok
    metrics["rollout_rs_masked_frac"] = (valid & ~keep).sum().double() / total
    return keep, metrics
