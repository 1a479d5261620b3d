"""What a model's forward call accepts, seen through the wrappers a run puts around the model.

The log-prob pass asks for the logits of the response positions only (``logits_to_keep``) and the
shared-prompt pass for a key-value cache; both depend on the transformers model under DDP,
``torch.compile``, PEFT or a LoRA reference stand-in, whose own ``forward`` signatures do not name
those arguments but pass them on.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["forward_parameters", "model_under_wrappers"]

_PARAMETERS: dict[type, frozenset[str]] = {}


def model_under_wrappers(model: Any) -> Any:
    """The module a forward call of ``model`` runs, looking through the wrappers that run it as it is
    and pass every keyword on: DDP, ``torch.compile``, PEFT, and any wrapper that names the module it
    calls in ``wrapped_module`` (the LoRA reference stand-in of ``trinity train``).

    A sharded engine (FSDP, DeepSpeed) is not looked through: it gathers parameters around its own call.
    """
    from torch.nn.parallel import DistributedDataParallel

    inner = model
    for _ in range(4):
        if isinstance(inner, DistributedDataParallel):
            inner = inner.module
        elif hasattr(inner, "wrapped_module"):
            inner = inner.wrapped_module
        elif hasattr(inner, "_orig_mod"):
            inner = inner._orig_mod
        elif hasattr(inner, "get_base_model"):
            inner = inner.get_base_model()
        else:
            break
    return inner


def forward_parameters(module: Any) -> frozenset[str]:
    """The parameter names of ``module``'s ``forward`` (its ``__call__`` where it has none), per class."""
    cls = type(module)
    if cls not in _PARAMETERS:
        call = getattr(cls, "forward", None) or cls.__call__
        _PARAMETERS[cls] = frozenset(inspect.signature(call).parameters)
    return _PARAMETERS[cls]
