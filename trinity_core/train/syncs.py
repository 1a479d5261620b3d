"""Host syncs in the loss and advantage path: make them errors, on GPU and (for the usual culprits) on CPU.

The losses and advantage functions claim to run without a device-to-host synchronisation, so a step
never waits for the GPU in the middle of its update. :func:`strict_loss_path` makes that checkable: while
it is active, every call of the step's policy loss, KL loss, entropy loss and trainer-side advantage
function runs with

* ``torch.cuda.set_sync_debug_mode("error")`` on CUDA (any synchronising CUDA call raises), and
* the tensor methods that read a value on the host (``item``, ``tolist``, ``numpy``, ``bool()``,
  ``int()``, ``float()``) raising :class:`HostSyncError` on every device, so that a regression shows on
  CPU too, before a GPU is lent.

Generation, metrics reduction and logging synchronise by design and run outside.
``benchmarks/gpu_sync_check.py`` runs one training step under it; ``tests/train/test_host_syncs.py`` on
CPU.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["HOST_READS", "HostSyncError", "no_host_reads", "strict_loss_path"]

HOST_READS = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__")
"""The ``torch.Tensor`` methods that copy a value to the host (a sync on an accelerator)."""


class HostSyncError(RuntimeError):
    """A tensor value was read on the host inside the loss or advantage path."""


@contextlib.contextmanager
def no_host_reads(where: str) -> Iterator[None]:
    """Make the :data:`HOST_READS` of any tensor raise :class:`HostSyncError` naming ``where``; on CUDA,
    also any synchronising CUDA call (``set_sync_debug_mode("error")``)."""
    saved = {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def refuse(name: str) -> Callable[..., Any]:
        def read(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            raise HostSyncError(f"Tensor.{name} in {where}: a host sync in the loss path; keep it a tensor")

        return read

    cuda = torch.cuda.is_available()
    for name in HOST_READS:
        setattr(torch.Tensor, name, refuse(name))
    if cuda:
        torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


def _guarded(method: Callable[..., Any], where: str) -> Callable[..., Any]:
    @functools.wraps(method)  # keeps the signature, which the learner inspects for extra inputs
    def call(*args: Any, **kwargs: Any) -> Any:
        with no_host_reads(where):
            return method(*args, **kwargs)

    return call


@contextlib.contextmanager
def strict_loss_path(components: Any) -> Iterator[list[str]]:
    """Run the loss and advantage methods of ``components`` (a :class:`~trinity_core.train.build.
    Components`) under :func:`no_host_reads` until the block ends; yields the guarded methods' names.

    The methods are replaced on the components' classes (the learner calls ``loss_fn(...)``, which looks
    ``__call__`` up on the class) and restored afterwards.
    """
    targets = [
        (components.policy_loss, "__call__"),
        (components.kl_loss, "calculate_kl_loss"),
        (components.entropy, "__call__"),
        # Explorer-side advantages (add strategies) work on host-side experiences: no device to sync.
        (components.advantage if components.advantage_in_trainer else None, "__call__"),
    ]
    patched: list[tuple[type, str, Any]] = []
    names = []
    try:
        for component, attr in targets:
            if component is None:
                continue
            cls = type(component)
            where = f"{cls.__name__}.{attr}"
            patched.append((cls, attr, cls.__dict__.get(attr)))
            setattr(cls, attr, _guarded(getattr(cls, attr), where))
            names.append(where)
        yield names
    finally:
        for cls, attr, original in reversed(patched):
            if original is None:
                delattr(cls, attr)
            else:
                setattr(cls, attr, original)
