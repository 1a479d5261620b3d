"""The dtype the policy's weights are loaded in (``model.dtype``), and the settings it refuses.

A full fine-tune keeps float32 weights: AdamW's moments and the updates of a step (``lr x`` a unit-scale
direction, about 1e-5 of the weight) vanish in bf16's 8-bit mantissa, and mixed precision
(``trainer.mixed_precision``) already runs the forward in bf16. Under LoRA the base weights are frozen:
nothing updates them, so they can stay in the low precision, as PEFT and TRL recipes load them
(``torch_dtype=torch.bfloat16``), while PEFT keeps the adapters and their optimizer state float32
(``autocast_adapter_dtype``). That halves the largest block of a LoRA step's memory.

``auto`` (the default) picks that for you: the mixed-precision dtype for LoRA's frozen base under bf16 or
fp16, float32 otherwise.
"""

from __future__ import annotations

import torch

from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig

__all__ = ["DTYPES", "check_weights_dtype", "weights_dtype"]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
"""The torch dtype of each ``model.dtype`` name but ``auto``."""

_OF_PRECISION = {"bf16": torch.bfloat16, "fp16": torch.float16}


def weights_dtype(config: ResolvedConfig) -> torch.dtype:
    """The dtype of the policy's weights for ``config`` (``model.dtype``, ``auto`` resolved)."""
    name = config.model.dtype
    if name != "auto":
        return DTYPES[name]
    if config.model.lora is not None:
        return _OF_PRECISION.get(config.trainer.mixed_precision, torch.float32)
    return torch.float32


def check_weights_dtype(config: ResolvedConfig, cpu: bool) -> None:
    """Refuse low-precision weights that would train, and float16 weights on CPU.

    Raises:
        ConfigError: at ``model.dtype``, saying why and what to set instead.
    """
    dtype = weights_dtype(config)
    problems: list[ConfigProblem] = []
    if dtype != torch.float32 and config.model.lora is None:
        problems.append(
            ConfigProblem(
                "model.dtype",
                f"{config.model.dtype} weights in a full fine-tune: AdamW's state and the small updates of "
                "each step are lost in the low precision",
                hint="keep model.dtype float32 (or auto) with trainer.mixed_precision: bf16, or train LoRA "
                "adapters (model.lora) over a frozen low-precision base",
            )
        )
    if dtype == torch.float16 and cpu:
        problems.append(
            ConfigProblem(
                "model.dtype",
                "float16 weights need a CUDA device (CPU kernels for float16 are partial)",
                hint="use bfloat16 on CPU",
            )
        )
    if problems:
        raise ConfigError(problems)
