"""Helpers of the trinity-plugin-sft tests: random loss inputs and gradients."""

from __future__ import annotations

from typing import Any

import torch

MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")


def random_inputs(seed: int, b: int = 5, t: int = 7) -> dict[str, torch.Tensor]:
    """float64 log-probs in (-4, 0) and a mask with padding, a hole, and >= 1 token per row."""
    g = torch.Generator().manual_seed(seed)
    logprob = -torch.rand(b, t, generator=g, dtype=torch.float64) * 4 - 1e-3
    mask = torch.rand(b, t, generator=g) > 0.35
    mask[:, 0] = True
    return {"logprob": logprob, "action_mask": mask}


def loss_and_grad(fn: Any, logprob: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, dict, torch.Tensor]:
    """Call ``fn(logprob=leaf, **kwargs)``, back-propagate, return ``(loss, metrics, d loss / d logprob)``."""
    leaf = logprob.detach().clone().requires_grad_(True)
    loss, metrics = fn(leaf, **kwargs)
    loss.backward()
    assert leaf.grad is not None
    return loss.detach(), metrics, leaf.grad
