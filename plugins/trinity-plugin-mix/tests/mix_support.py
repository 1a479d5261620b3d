"""Helpers of the trinity-plugin-mix tests: random mixed batches and gradients."""

from __future__ import annotations

from typing import Any

import torch


def mixed_batch(
    seed: int, b: int = 6, t: int = 7, experts: list[int] | None = None
) -> dict[str, torch.Tensor]:
    """float64 inputs; ``experts`` lists the expert rows (default: every third row); >= 1 token per row."""
    g = torch.Generator().manual_seed(seed)
    logprob = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3 - 1e-3
    old = logprob + 0.4 * torch.randn(b, t, generator=g, dtype=torch.float64)
    mask = torch.rand(b, t, generator=g) > 0.3
    mask[:, 0] = True
    expert = torch.zeros(b, dtype=torch.bool)
    expert[experts if experts is not None else list(range(0, b, 3))] = True
    return {
        "logprob": logprob,
        "old_logprob": old,
        "action_mask": mask,
        "advantages": torch.randn(b, 1, generator=g, dtype=torch.float64).expand(b, t).clone(),
        "expert_mask": expert,
    }


def loss_and_grad(fn: Any, logprob: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, dict, torch.Tensor]:
    """``fn(leaf, **kwargs)`` back-propagated: ``(loss, metrics, d loss / d logprob)``."""
    leaf = logprob.detach().clone().requires_grad_(True)
    loss, metrics = fn(leaf, **kwargs)
    loss.backward()
    assert leaf.grad is not None
    return loss.detach(), metrics, leaf.grad


def rest(x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every input but ``logprob``."""
    return {k: v for k, v in x.items() if k != "logprob"}
