"""Loss aggregation shared by policy, KL and entropy losses: the ``loss_agg_mode`` argument and the
global normalizers (:class:`~trinity_core.ops.LossScale`) that the trainer passes to each call.

A loss calls ``self.aggregate(values, mask)``; which mode and which normalizers apply is decided here:

* mode: the explicit ``loss_agg_mode`` argument of ``aggregate``; else the component's own
  ``loss_agg_mode`` argument when set; else the mode the trainer passed to the call (the algorithm's
  ``loss_agg_mode``); else ``"token-mean"``.
* normalizers: the ``loss_scale`` keyword the trainer passes to the call (global token and sequence
  counts of the optimizer step); without it, the counts of this call's mask.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field
from torch import Tensor

from trinity_core.components.base import ComponentArgs
from trinity_core.ops.aggregate import aggregate_loss
from trinity_core.ops.fused import aggregate_row_sums

if TYPE_CHECKING:
    from trinity_core.ops import LossScale

__all__ = ["LossAggArgs", "LossAggMode", "LossAggregation"]

LossAggMode = Literal[
    "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum"
]
"""The valid ``loss_agg_mode`` names (:data:`trinity_core.ops.LOSS_AGG_MODES`)."""

#: Keywords the trainer may pass to every loss call; consumed here unless the function declares them.
RESERVED_CALL_KEYWORDS = ("loss_scale", "loss_agg_mode")


class LossAggArgs(ComponentArgs):
    """``Args`` mixin with ``loss_agg_mode``; subclass it: ``class Args(LossAggArgs): ...``."""

    loss_agg_mode: LossAggMode = Field(
        "token-mean",
        description=(
            "How per-token losses are reduced: token-mean, seq-mean-token-sum, seq-mean-token-mean, "
            "seq-mean-token-sum-norm or token-sum (formulas in trinity_core.ops.aggregate)."
        ),
    )


class LossAggregation:
    """Mixin giving a loss ``aggregate(values, mask)`` and the per-call aggregation context."""

    _loss_scale: LossScale | None = None
    _call_mode: str | None = None

    @property
    def loss_scale(self) -> LossScale | None:
        """The global normalizers the trainer passed to the current call (``loss_scale=``), if any.

        Losses that need more than :meth:`aggregate` (e.g. separate normalizers per subset of rows)
        read it here during their call.
        """
        return self._loss_scale

    def aggregate(self, values: Tensor, mask: Tensor, loss_agg_mode: str | None = None) -> Tensor:
        """Reduce per-token ``values`` ``(B, T)`` selected by ``mask`` to a 0-d loss.

        Uses :func:`trinity_core.ops.aggregate_loss`, with the global normalizers of the call's
        ``loss_scale`` when the trainer passed one (mode precedence in the module docstring).
        """
        mode = loss_agg_mode or self._mode()
        if self._loss_scale is not None:
            return self._loss_scale.aggregate(values, mask, mode)
        return aggregate_loss(values, mask, mode)

    def _mode(self) -> str:
        """The component's ``loss_agg_mode``, else the mode passed to the call, else ``token-mean``."""
        return getattr(self, "loss_agg_mode", None) or self._call_mode or "token-mean"

    def aggregation(self) -> tuple[str, Tensor | None, Tensor | None, float | None, int]:
        """``(loss_agg_mode, normalizer, seq_normalizer, max_tokens, world_size)`` of the current call.

        The mode precedence of :meth:`aggregate` and the global normalizers of the call's ``loss_scale``
        (``None`` and ``1`` without one): the keyword arguments of
        :func:`~trinity_core.ops.fused.aggregate_row_sums` and
        :func:`~trinity_core.ops.fused.aggregate_row_weights`, in order.
        """
        scale = self._loss_scale
        if scale is None:
            return self._mode(), None, None, None, 1
        return self._mode(), scale.num_tokens, scale.num_sequences, scale.max_tokens, scale.world_size

    def aggregate_rows(self, row_sum: Tensor, row_count: Tensor) -> Tensor:
        """What :meth:`aggregate` returns, from the values' per-row sums ``(B,)`` and counts ``(B,)``."""
        mode, normalizer, seq_normalizer, max_tokens, world_size = self.aggregation()
        return aggregate_row_sums(
            row_sum,
            row_count,
            mode,
            normalizer=normalizer,
            seq_normalizer=seq_normalizer,
            max_tokens=max_tokens,
            world_size=world_size,
        )

    @contextmanager
    def _aggregation_context(self, loss_scale: Any, mode: Any) -> Iterator[None]:
        # Nested calls (a subclass calling super().__call__) pass nothing: keep the outer context.
        previous = (self._loss_scale, self._call_mode)
        if loss_scale is not None:
            self._loss_scale = loss_scale
        if mode is not None:
            self._call_mode = mode
        try:
            yield
        finally:
            self._loss_scale, self._call_mode = previous


def declared_parameters(func: Callable[..., Any]) -> tuple[str, ...]:
    """Named parameters of ``func`` (``self`` and ``*args``/``**kwargs`` excluded), in order."""
    params = inspect.signature(func).parameters.values()
    return tuple(
        p.name
        for p in params
        if p.name != "self"
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    )


def wrap_loss_call(
    func: Callable[..., Any],
    rename: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None,
) -> Callable[..., Any]:
    """Wrap a loss ``__call__``: consume the reserved keywords, optionally rename/filter the others,
    run inside the aggregation context and detach metric tensors."""
    declared = set(declared_parameters(func))
    if getattr(func, "_trinity_loss_wrapped", False):
        return func

    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        reserved = {
            key: kwargs.pop(key) for key in RESERVED_CALL_KEYWORDS if key in kwargs and key not in declared
        }
        if rename is not None:
            kwargs = rename(self, kwargs)
        with self._aggregation_context(reserved.get("loss_scale"), reserved.get("loss_agg_mode")):
            result = func(self, *args, **kwargs)
        if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict):
            loss, metrics = result
            result = (
                loss,
                {
                    k: v.detach() if isinstance(v, Tensor) and v.requires_grad else v
                    for k, v in metrics.items()
                },
            )
        return result

    wrapper._trinity_loss_wrapped = True  # type: ignore[attr-defined]
    return wrapper
