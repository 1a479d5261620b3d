"""The optimizer of the update (``trainer.optimizer``) and its learning-rate schedule."""

from __future__ import annotations

from typing import Any

import torch

from trinity_core.config import TrainerConfig

__all__ = ["lr_scheduler", "make_optimizer"]


def lr_scheduler(optimizer: torch.optim.Optimizer, kind: str, warmup_steps: int, total_steps: int) -> Any:
    """The learning-rate schedule ``kind`` (constant, linear, cosine) from ``transformers.get_scheduler``.

    The factor on ``trainer.lr`` at 0-based step ``s``, warm-up ``W`` and ``T`` total steps: ``s / W``
    while ``s < W``, then 1 (constant), ``(T - s) / (T - W)`` (linear) or
    ``(1 + cos(pi * (s - W) / (T - W))) / 2`` (cosine).
    """
    from transformers import get_scheduler

    # transformers' "constant" ignores the warm-up; "constant_with_warmup" with W = 0 is the same constant.
    name = "constant_with_warmup" if kind == "constant" else kind
    return get_scheduler(name, optimizer, num_warmup_steps=warmup_steps, num_training_steps=total_steps)


def make_optimizer(model: Any, tcfg: TrainerConfig) -> torch.optim.Optimizer:
    """``trainer.optimizer`` (adamw, adam, sgd) over the trainable parameters of ``model``.

    Adam and AdamW use torch's fused kernel (one pass over all parameters instead of a loop of small
    ops: about half the optimizer time on CPU) when every parameter is a float tensor on CPU or CUDA.
    """
    groups = [p for p in model.parameters() if p.requires_grad]
    if tcfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=tcfg.lr, weight_decay=tcfg.weight_decay)
    cls = torch.optim.AdamW if tcfg.optimizer == "adamw" else torch.optim.Adam
    fused = bool(groups) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in groups)
    return cls(groups, lr=tcfg.lr, betas=tcfg.betas, weight_decay=tcfg.weight_decay, fused=fused or None)
