"""One training step under :func:`~trinity_core.train.syncs.strict_loss_path`: the host-sync check that
``tests/train/test_host_syncs.py`` runs on CPU and ``benchmarks/gpu_sync_check.py`` on a GPU."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from trinity_core.config import resolve_config
from trinity_core.train.loop import Trainer
from trinity_core.train.run import make_accelerator, prepare_run_dir
from trinity_core.train.syncs import strict_loss_path

__all__ = ["strict_step"]


def strict_step(data: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Run step 0 of the run ``data`` describes (a config mapping) in a temporary run directory, with the
    loss and advantage path guarded; returns the guarded methods' names and the step's metrics.

    Raises:
        HostSyncError: a guarded method read a tensor value on the host.
    """
    config = resolve_config(data)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        acc = make_accelerator(config, run_dir)
        prepare_run_dir(run_dir, config, resume=False, overwrite=True, is_main=True)
        trainer = Trainer(config, run_dir, accelerator=acc)
        try:
            with strict_loss_path(trainer.learner.components) as names:
                metrics = trainer.step(0)
        finally:
            trainer.event_loop.close()
    return names, metrics
