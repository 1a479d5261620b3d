"""Input builders shared by this plugin's tests (module name unique across plugins)."""

from __future__ import annotations

import torch


def loss_inputs(seed: int, b: int = 5, t: int = 9, spread: float = 0.6) -> dict[str, torch.Tensor]:
    """Random float64 loss inputs in verl names: right padding plus an interior hole, >= 1 token per row."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    hole = torch.rand(b, t, generator=g) < 0.2
    mask = mask & ~(hole & (torch.arange(t)[None, :] > 0))
    return {
        "log_prob": old + spread * torch.randn(b, t, generator=g, dtype=torch.float64),
        "old_log_probs": old,
        "response_mask": mask,
        "advantages": torch.randn(b, t, generator=g, dtype=torch.float64),
    }


def grad_of(
    fn: object, inputs: dict[str, torch.Tensor], **extra: object
) -> tuple[torch.Tensor, dict, torch.Tensor]:
    """``(loss, metrics, d loss / d log_prob)`` of ``fn(log_prob, **rest)``."""
    lp = inputs["log_prob"].clone().requires_grad_(True)
    rest = {k: v for k, v in inputs.items() if k != "log_prob"}
    loss, metrics = fn(lp, **rest, **extra)  # type: ignore[operator]
    loss.backward()
    assert lp.grad is not None
    return loss.detach(), metrics, lp.grad
