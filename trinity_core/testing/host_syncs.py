"""Host synchronisations in the loss and advantage path: count them, or make them errors.

On a GPU a call that copies a tensor's value to Python or to host memory waits for every queued kernel;
in a loss that runs once per micro-batch it serialises the whole step. Two tools:

* :func:`count_host_syncs` (the conformance kit's check) patches the ``torch.Tensor`` methods of
  :data:`SYNC_METHODS` for the duration of a ``with`` block and records where each call came from.
  ``.cpu()`` counts even on a CPU tensor: the same code on a GPU would synchronise.
* :func:`strict_loss_path` makes every host read an error while a run's policy loss, KL loss, entropy
  loss and trainer-side advantage function run: ``torch.cuda.set_sync_debug_mode("error")`` on CUDA,
  and the value-reading methods of :data:`HOST_READS` raising :class:`HostSyncError` on every device, so
  a regression shows on CPU too. :func:`strict_step` runs one training step under it
  (``tests/train/test_host_syncs.py`` on CPU, ``benchmarks/gpu_sync_check.py`` on a GPU). Generation,
  metrics reduction and logging synchronise by design and run outside.
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "HOST_READS",
    "SYNC_METHODS",
    "HostSyncError",
    "SyncLog",
    "count_host_syncs",
    "no_host_reads",
    "strict_loss_path",
    "strict_step",
]

SYNC_METHODS: tuple[str, ...] = (
    "item",
    "tolist",
    "cpu",
    "numpy",
    "__bool__",
    "__float__",
    "__int__",
    "__index__",
)
"""``torch.Tensor`` methods counted as host synchronisations."""

_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_KIT_DIR = str(Path(__file__).resolve().parent)


@dataclass
class SyncLog:
    """Host synchronisations seen inside :func:`count_host_syncs`: ``(method, "file:line")`` each."""

    calls: list[tuple[str, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.calls)

    def describe(self) -> str:
        """One line per distinct call site: ``Tensor.item() at plugin/loss.py:42 (2x)``."""
        counts: dict[tuple[str, str], int] = {}
        for call in self.calls:
            counts[call] = counts.get(call, 0) + 1
        return "\n".join(f"  Tensor.{m}() at {where} ({n}x)" for (m, where), n in counts.items())


def _caller() -> str:
    """The innermost frame outside torch and this kit: the component code that made the call."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        filename = str(Path(frame.filename).resolve())
        if not filename.startswith((_TORCH_DIR, _KIT_DIR)):
            return f"{frame.filename}:{frame.lineno}"
    return "<unknown>"


_MISSING = object()


@contextmanager
def count_host_syncs() -> Iterator[SyncLog]:
    """Patch the :data:`SYNC_METHODS` of ``torch.Tensor`` to record calls; restore them on exit.

    The original methods still run, so the code under test behaves as usual.
    """
    log = SyncLog()
    saved: dict[str, Any] = {}
    for name in SYNC_METHODS:
        original = getattr(torch.Tensor, name, None)
        if original is None:
            continue
        saved[name] = torch.Tensor.__dict__.get(name, _MISSING)
        setattr(torch.Tensor, name, _counting(name, original, log))
    try:
        yield log
    finally:
        for name, previous in saved.items():
            if previous is _MISSING:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, previous)


def _counting(name: str, original: Callable[..., Any], log: SyncLog) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        log.calls.append((name, _caller()))
        return original(self, *args, **kwargs)

    return wrapper


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


def strict_step(data: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Run step 0 of the run ``data`` describes (a config mapping) in a temporary run directory, with the
    loss and advantage path guarded; returns the guarded methods' names and the step's metrics.

    Raises:
        HostSyncError: a guarded method read a tensor value on the host.
    """
    from trinity_core.config import resolve_config
    from trinity_core.train.modes.runner import Runner
    from trinity_core.train.run import make_accelerator, prepare_run_dir

    config = resolve_config(data)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        acc = make_accelerator(config, run_dir)
        prepare_run_dir(run_dir, config, resume=False, overwrite=True, is_main=True)
        trainer = Runner(config, run_dir, accelerator=acc)
        try:
            with strict_loss_path(trainer.learner.components) as names:
                metrics = trainer.step(0)
        finally:
            trainer.event_loop.close()
    return names, metrics
