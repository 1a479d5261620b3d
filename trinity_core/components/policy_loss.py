"""Policy losses (the API of trinity-rft's ``trinity.algorithm.policy_loss_fn``).

A policy loss maps the current log-probs and the batch tensors it asks for to ``(loss, metrics)``. The
tensors it asks for are the named parameters of its ``__call__`` (besides ``logprob``); the trainer
reads them as :attr:`PolicyLossFn.select_keys`, in its backend's names (verl by default), and passes
them by keyword in those names. Renaming back to the loss's names and dropping keys the loss did not
ask for happens in the base class.

The standard inputs of a ratio-based loss, in trinity names: ``logprob`` the current log-probs
``(B, T)`` (differentiable); ``old_logprob`` the sampling policy's log-probs ``(B, T)``;
``action_mask`` ``(B, T)``, True / non-zero on the tokens that count; ``advantages`` ``(B, T)`` (or
broadcastable). :func:`trinity_core.ops.policy_inputs` selects them under the mask.

Unlike trinity-rft 0.6.0, ``__call__`` need not appear in every subclass body: a subclass
that only changes defaults inherits ``__call__`` and its ``select_keys``.

A loss that takes exactly the standard inputs subclasses :class:`StandardPolicyLossFn` and implements
``compute(inputs, **kwargs)`` on the :class:`~trinity_core.ops.PolicyInputs` record instead of writing
``__call__`` and the preamble again::

    class ImportanceSamplingLossFn(StandardPolicyLossFn):
        \"\"\"Unclipped importance sampling: L = agg(-A r).\"\"\"

        def compute(self, inputs: PolicyInputs, **kwargs: Any) -> tuple[Tensor, dict[str, Tensor]]:
            loss = self.aggregate(-inputs.advantages * inputs.ratio, inputs.mask)
            return loss, {"pg_loss": loss.detach()}
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Final

from torch import Tensor

from trinity_core.components._aggregation import (
    RESERVED_CALL_KEYWORDS,
    LossAggArgs,
    LossAggMode,
    LossAggregation,
    declared_parameters,
    wrap_loss_call,
)
from trinity_core.components.base import Component
from trinity_core.ops.ratio import PolicyInputs, policy_inputs

__all__ = [
    "BACKEND_KEY_MAPPERS",
    "KeyMapper",
    "LossAggArgs",
    "LossAggMode",
    "PolicyLossFn",
    "StandardPolicyLossFn",
]


class KeyMapper:
    """Translate batch key names between a training backend and trinity.

    ``to_trinity`` maps backend names to trinity names; ``from_trinity`` is its inverse. Names missing
    from the table map to themselves (``expert_mask``, ``step``, ...).
    """

    def __init__(self, to_trinity: Mapping[str, str]) -> None:
        self.to_trinity_map = dict(to_trinity)
        self.from_trinity_map = {v: k for k, v in self.to_trinity_map.items()}

    def to_trinity(self, key: str) -> str:
        """The trinity name of backend key ``key``."""
        return self.to_trinity_map.get(key, key)

    def from_trinity(self, key: str) -> str:
        """The backend name of trinity key ``key``."""
        return self.from_trinity_map.get(key, key)


BACKEND_KEY_MAPPERS: Final[dict[str, KeyMapper]] = {
    "verl": KeyMapper(
        {
            "log_prob": "logprob",
            "old_log_probs": "old_logprob",
            "ref_log_prob": "ref_logprob",
            "response_mask": "action_mask",
            "advantages": "advantages",
        }
    ),
    "tinker": KeyMapper({}),
}
"""Key mappers per backend name (verl names: ``log_prob``, ``old_log_probs``, ``ref_log_prob``,
``response_mask``, ``advantages``)."""

_NOT_SELECTED = {"logprob", *RESERVED_CALL_KEYWORDS}


def _rename_and_select(self: PolicyLossFn, kwargs: dict[str, Any]) -> dict[str, Any]:
    selected: dict[str, Any] = {}
    wanted = type(self)._select_keys
    for key, value in kwargs.items():
        name = self.mapper.to_trinity(key)
        if name == "logprob" or name in wanted:
            selected[name] = value
    return selected


class PolicyLossFn(LossAggregation, Component, ABC):
    """Base of policy losses.

    Subclasses declare ``Args`` (derive from :class:`LossAggArgs` to get ``loss_agg_mode``) and
    implement ``__call__(logprob, <the tensors it needs>, **kwargs) -> (loss, metrics)``::

        class PPOPolicyLossFn(PolicyLossFn):
            \"\"\"PPO clipped surrogate: L = max(-A r, -A clip(r, 1-eps, 1+eps)), r = exp(logp - old).\"\"\"

            class Args(LossAggArgs):
                clip_range: float = Field(0.2, gt=0, description="PPO clip epsilon.")

            def __call__(self, logprob, old_logprob, action_mask, advantages, **kwargs):
                ratio = torch.exp((logprob - old_logprob).clamp(-20, 20))
                per_token = torch.maximum(-advantages * ratio,
                                          -advantages * ratio.clamp(1 - self.clip_range, 1 + self.clip_range))
                loss = self.aggregate(per_token, action_mask)
                return loss, {"pg_loss": loss.detach()}

    Conventions: tensors are padded ``(B, T)`` on the caller's device; compute there, never call
    ``.item()`` (metrics are 0-d tensors; any that still require grad are detached by the base class);
    aggregate with :meth:`aggregate`, which applies ``loss_agg_mode`` and the trainer's global
    normalizers (``loss_scale=`` keyword of the call).
    """

    kind: ClassVar[str] = "policy_loss"
    microbatch_invariant: ClassVar[bool] = True
    """Whether cutting a step into micro-batches (and ranks) leaves the gradient unchanged when every call
    gets the step's global normalizers (``loss_scale=``) and the micro-batch losses are summed. True for
    losses that aggregate per-token or per-row terms with :meth:`aggregate`; a loss whose terms depend on
    statistics of its call's rows (e.g. a top-k over the call's tokens) sets False and says why in its
    docstring. The conformance kit checks it (checks ``microbatch_invariant`` and ``rank_invariant``)."""
    _select_keys: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__call__" in cls.__dict__:
            cls.__call__ = wrap_loss_call(cls.__dict__["__call__"], _rename_and_select)  # type: ignore[method-assign]
        cls._select_keys = tuple(k for k in declared_parameters(cls.__call__) if k not in _NOT_SELECTED)

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """Validate ``args`` against ``Args`` and pick the key mapper of ``backend``."""
        try:
            self.mapper = BACKEND_KEY_MAPPERS[backend]
        except KeyError:
            raise ValueError(
                f"policy loss {type(self).name()!r}: unknown backend {backend!r}; known backends are "
                f"{sorted(BACKEND_KEY_MAPPERS)}"
            ) from None
        self.backend = backend
        super().__init__(**args)

    @property
    def select_keys(self) -> list[str]:
        """The batch keys this loss needs besides the log-probs, in the backend's names."""
        return [self.mapper.from_trinity(key) for key in type(self)._select_keys]

    @abstractmethod
    def __call__(self, logprob: Tensor, **kwargs: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """Compute the loss.

        Args:
            logprob: current-policy log-probs of the response tokens, ``(B, T)``.
            kwargs: the tensors named in :attr:`select_keys` (e.g. ``old_logprob``, ``action_mask``,
                ``advantages``), in backend or trinity names.

        Returns:
            ``(loss, metrics)``: a 0-d loss and metrics as detached 0-d tensors.
        """


class StandardPolicyLossFn(PolicyLossFn):
    """Base of policy losses that take exactly the standard inputs: implement :meth:`compute`.

    ``__call__(logprob, old_logprob, action_mask, advantages, **kwargs)`` is written once here: it
    builds :func:`trinity_core.ops.policy_inputs` (bool mask, compute dtype, the three tensors selected
    under the mask, lazy ``delta`` / ``log_ratio`` / ``ratio``) and returns ``self.compute(inputs,
    **kwargs)``. ``select_keys`` is therefore ``old_logprob``, ``action_mask``, ``advantages`` (in the
    backend's names), and the call, its keywords (``loss_scale=``, ``loss_agg_mode=``) and its metric
    detaching are those of :class:`PolicyLossFn`::

        class ImportanceSamplingLossFn(StandardPolicyLossFn):
            \"\"\"Unclipped importance sampling: L = agg(-A r).\"\"\"

            def compute(self, inputs: PolicyInputs, **kwargs: Any) -> tuple[Tensor, dict[str, Tensor]]:
                loss = self.aggregate(-inputs.advantages * inputs.ratio, inputs.mask)
                return loss, {"pg_loss": loss.detach()}

    A loss that needs other tensors (or must see the raw inputs, e.g. a fused kernel) subclasses
    :class:`PolicyLossFn` and writes its own ``__call__``.
    """

    def __call__(  # type: ignore[override]
        self,
        logprob: Tensor,
        old_logprob: Tensor,
        action_mask: Tensor,
        advantages: Tensor,
        **kwargs: Any,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss over the ``action_mask`` tokens, and metrics: :meth:`compute` on the selected inputs.

        Args:
            logprob: current log-probs ``(B, T)`` (differentiable).
            old_logprob: log-probs of the sampling policy ``(B, T)``.
            action_mask: ``(B, T)``, True / non-zero on the tokens that count.
            advantages: ``(B, T)`` (or broadcastable) advantages.
            kwargs: passed on to :meth:`compute`.

        Returns:
            ``(loss, metrics)``: a 0-d loss and metrics as detached 0-d tensors.
        """
        return self.compute(policy_inputs(logprob, old_logprob, action_mask, advantages), **kwargs)

    @abstractmethod
    def compute(self, inputs: PolicyInputs, **kwargs: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """The loss and metrics from the selected inputs (:class:`~trinity_core.ops.PolicyInputs`).

        Values at masked positions of ``inputs`` are 0; reduce with :meth:`aggregate` over
        ``inputs.mask``.
        """
