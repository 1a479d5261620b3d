"""Say when the launch asked for sharding (FSDP, DeepSpeed) and Accelerate runs plain data parallelism.

``accelerate launch --config_file examples/accelerate/fsdp.yaml`` sets ``ACCELERATE_USE_FSDP=true``, but
Accelerate (1.15) turns FSDP and DeepSpeed on only for GPU-like devices: on CPU the same launch runs DDP
over gloo, every rank holding the whole model, optimizer state and gradients. The run is correct, only
not sharded, so this is a warning, not an error: a memory plan made for sharding would not hold.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["sharding_fallback", "warn_sharding_fallback"]

_ASKED = {"FSDP": "ACCELERATE_USE_FSDP", "DEEPSPEED": "ACCELERATE_USE_DEEPSPEED"}


def sharding_fallback(distributed_type: Any, environ: Mapping[str, str]) -> str | None:
    """The warning for a launch that asked for a sharding backend Accelerate did not enable; else None."""
    running = getattr(distributed_type, "value", str(distributed_type))
    for kind, variable in _ASKED.items():
        if environ.get(variable, "false").lower() == "true" and running != kind:
            return (
                f"the launch config asks for {kind} ({variable}=true) but Accelerate runs {running}: every "
                f"process holds the whole model, gradients and optimizer state (Accelerate enables {kind} "
                "only on GPUs); the training is correct, not sharded"
            )
    return None


def warn_sharding_fallback(distributed_type: Any, environ: Mapping[str, str], is_main: bool) -> None:
    """Print :func:`sharding_fallback`'s warning on the main process, if there is one."""
    message = sharding_fallback(distributed_type, environ)
    if message and is_main:
        print(f"trinity train: warning: {message}", file=sys.stderr)
