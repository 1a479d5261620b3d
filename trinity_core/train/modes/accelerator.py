"""The run's ``Accelerator``: device, mixed precision, trackers, and a check that every process joined.

Mixed precision is Accelerate's (``trainer.mixed_precision``): the forward runs under autocast while the
weights, the optimizer state and the gradients stay float32; :func:`~trinity_core.train.learner.logprobs.
response_logprobs` casts the logits to float32 before the log-softmax, so log-probs, entropies and every
loss statistic (ratios, advantages, normalizers) are float32 whatever the autocast dtype.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig
from trinity_core.train.models.dtype import check_weights_dtype
from trinity_core.train.modes.sharding import warn_sharding_fallback

__all__ = ["check_launch", "check_precision", "make_accelerator"]


def check_precision(mixed_precision: str, cpu: bool) -> None:
    """Refuse a precision the device cannot run: fp16 autocast and its loss scaler need CUDA.

    Raises:
        ConfigError: at ``trainer.mixed_precision``, naming what to use instead.
    """
    if mixed_precision == "fp16" and cpu:
        raise ConfigError(
            [
                ConfigProblem(
                    "trainer.mixed_precision",
                    "fp16 needs a CUDA device (its loss scaler does not run on CPU)",
                    hint="use bf16 on CPU, or no",
                )
            ]
        )


def make_accelerator(config: ResolvedConfig, run_dir: Path) -> Any:
    """An ``Accelerator`` for the config; checks that the launcher's processes all joined the run.

    Raises:
        ConfigError: CUDA asked for but absent, fp16 on CPU, or a ``model.dtype`` it refuses.
        LaunchError: ``WORLD_SIZE`` says N processes but Accelerate sees another number (e.g.
            ``accelerate launch --cpu --num_processes 2``, or ``--multi_gpu`` without a usable backend).
    """
    import torch
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration

    tcfg = config.trainer
    cpu = tcfg.device == "cpu" or (tcfg.device == "auto" and not torch.cuda.is_available())
    if tcfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError([ConfigProblem("trainer.device", "cuda requested but no CUDA device is available")])
    check_precision(tcfg.mixed_precision, cpu)
    check_weights_dtype(config, cpu)  # model.dtype
    _forget_other_precision(tcfg.mixed_precision)
    if tcfg.threads is not None:
        torch.set_num_threads(tcfg.threads)
    trackers: Any = tcfg.trackers
    if trackers == "auto":
        trackers = ["tensorboard"] if importlib.util.find_spec("tensorboard") else []
    acc = Accelerator(
        cpu=cpu,
        mixed_precision=tcfg.mixed_precision,
        log_with=trackers or None,
        project_config=ProjectConfiguration(project_dir=str(run_dir), logging_dir=str(run_dir / "logs")),
    )
    check_launch(acc.num_processes, os.environ)
    warn_sharding_fallback(acc.distributed_type, os.environ, acc.is_main_process)  # FSDP asked, DDP ran
    return acc


def _forget_other_precision(mixed_precision: str) -> None:
    """Let this process make an ``Accelerator`` of another precision than its last one.

    Accelerate keeps one state per process and refuses to change its precision; a second run in the same
    process (the Python API, a notebook, tests) may ask for another. The process group is kept.
    """
    from accelerate.state import AcceleratorState

    shared = AcceleratorState._shared_state
    if shared and shared.get("_mixed_precision") != mixed_precision:
        AcceleratorState._reset_state(reset_partial_state=False)


def check_launch(num_processes: int, environ: Mapping[str, str]) -> None:
    """Raise :class:`~trinity_core.train.report.result.LaunchError` unless ``num_processes == WORLD_SIZE``.

    Catches launches where every process would train alone (duplicated work, diverging copies).
    """
    from trinity_core.train.report.result import LaunchError

    expected = int(environ.get("WORLD_SIZE", "1"))
    if num_processes != expected:
        raise LaunchError(
            f"the launcher started {expected} processes (WORLD_SIZE={expected}) but Accelerate sees "
            f"{num_processes}: each process would train alone and duplicate the work. On CPU launch with "
            "`accelerate launch --multi_gpu --num_processes N` or `torchrun --nproc_per_node N` (not "
            "`accelerate launch --cpu --num_processes N`)"
        )
