"""Helpers of the trinity-plugin-dpo tests: random pair batches and gradients."""

from __future__ import annotations

from typing import Any

import torch


def pair_batch(seed: int, pairs: int = 3, t: int = 6) -> dict[str, torch.Tensor]:
    """``2 · pairs`` rows (chosen at even rows), float64 log-probs, >= 1 selected token per row."""
    g = torch.Generator().manual_seed(seed)
    b = 2 * pairs
    logprob = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    ref = logprob + 0.4 * torch.randn(b, t, generator=g, dtype=torch.float64)
    mask = torch.rand(b, t, generator=g) > 0.3
    mask[:, 0] = True
    return {"logprob": logprob, "ref_logprob": ref, "action_mask": mask}


def loss_and_grad(fn: Any, logprob: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, dict, torch.Tensor]:
    """``fn(leaf, **kwargs)`` back-propagated: ``(loss, metrics, d loss / d logprob)``."""
    leaf = logprob.detach().clone().requires_grad_(True)
    loss, metrics = fn(leaf, **kwargs)
    loss.backward()
    assert leaf.grad is not None
    return loss.detach(), metrics, leaf.grad
