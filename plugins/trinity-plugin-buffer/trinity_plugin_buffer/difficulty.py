"""``difficulty_based`` task selector: rows near a target pass rate, from an online Beta estimate."""

from __future__ import annotations

import math
from typing import Any

import torch
from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs, TaskSelector

__all__ = ["DifficultyBasedSelector"]


class DifficultyBasedSelector(TaskSelector):
    """Rows whose estimated pass rate is nearest ``target``: P(row i) ∝ exp(−|p̂_i − target| / τ).

    Each row's pass rate has a Beta(α_i, β_i) estimate, starting at the prior (α₀, β₀). Feedback of a
    mean reward ``v`` (clamped to [0, 1]; NaN: no update) counts as ``m = responses`` Bernoulli trials::

        α ← (1 − λ) α + λ α₀ + m v        β ← (1 − λ) β + λ β₀ + m (1 − v)

    (``λ = decay`` pulls every row back toward the prior at each update, forgetting old evidence as the
    policy changes; repeated rows add their evidence). ``p̂ = α / (α + β)``. A step draws its rows with
    the run's task generator from the softmax of ``−|p̂ − target| / τ`` without replacement (with
    replacement past ``size``); ``τ = 0`` takes the best rows (ties: lower row first). Unseen rows sit
    at the prior's mean, ``α₀ / (α₀ + β₀)`` (0.5 by default, the default target), so they are explored
    first. Trinity-RFT's ``difficulty_based`` selector scores rows the same way; its estimate
    interpolates two offline columns instead (docs/buffer.md).
    """

    class Args(ComponentArgs):
        target: float = Field(0.5, ge=0, le=1, description="Pass rate to select near.")
        temperature: float = Field(
            0.1, ge=0, description="Softmax temperature τ over −|p̂ − target| (0: the nearest rows, greedily)."
        )
        prior_alpha: float = Field(1.0, gt=0, description="α₀: prior successes of every row.")
        prior_beta: float = Field(1.0, gt=0, description="β₀: prior failures of every row.")
        responses: float = Field(
            8.0,
            gt=0,
            description="Trials one feedback counts for (algorithm.repeat_times gives the Beta posterior "
            "of 0/1 rewards).",
        )
        decay: float = Field(0.0, ge=0, lt=1, description="λ: pull toward the prior at each update.")

    target: float
    temperature: float
    prior_alpha: float
    prior_beta: float
    responses: float
    decay: float

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alpha = torch.full((self.size,), self.prior_alpha, dtype=torch.float64)
        self.beta = torch.full((self.size,), self.prior_beta, dtype=torch.float64)
        self.seen = torch.zeros(self.size, dtype=torch.bool)

    def estimate(self) -> Tensor:
        """p̂ of every row, ``(size,)`` float64."""
        return self.alpha / (self.alpha + self.beta)

    def scores(self) -> Tensor:
        """−|p̂ − target| of every row."""
        return -(self.estimate() - self.target).abs()

    def probabilities(self) -> Tensor:
        """Each row's chance to be drawn first, ``softmax(scores / τ)`` (τ > 0)."""
        return torch.softmax(self.scores() / self.temperature, dim=0)

    def get_indices(self, batch_size: int) -> Tensor:
        """``batch_size`` rows near the target (see the class docstring)."""
        if self.temperature == 0:
            return (
                torch.sort(-self.scores(), stable=True)
                .indices[:batch_size]
                .repeat(math.ceil(batch_size / self.size))[:batch_size]
            )
        return torch.multinomial(
            self.probabilities(), batch_size, replacement=batch_size > self.size, generator=self.generator
        )

    def update(self, indices: Tensor, values: Tensor) -> None:
        """Add each row's evidence (see the class docstring)."""
        valid = ~torch.isnan(values)
        rows, v = indices[valid].to(torch.int64), values[valid].to(torch.float64).clamp(0, 1)
        lam = self.decay
        self.alpha = (1 - lam) * self.alpha + lam * self.prior_alpha
        self.beta = (1 - lam) * self.beta + lam * self.prior_beta
        self.alpha.index_add_(0, rows, self.responses * v)
        self.beta.index_add_(0, rows, self.responses * (1 - v))
        self.seen[rows] = True

    def metrics(self, indices: Tensor) -> dict[str, Tensor]:
        """``predicted_pass_rate`` (mean p̂ of the rows just drawn; NaN for none) and ``seen_fraction``."""
        p = self.estimate()[indices.to(torch.int64)]
        return {
            "predicted_pass_rate": p.mean() if p.numel() else torch.tensor(math.nan, dtype=torch.float64),
            "seen_fraction": self.seen.double().mean(),
        }

    def state_dict(self) -> dict[str, Any]:
        """α, β and the rows seen."""
        return {"alpha": self.alpha.clone(), "beta": self.beta.clone(), "seen": self.seen.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`; another number of rows is a ValueError."""
        alpha = torch.as_tensor(state["alpha"], dtype=torch.float64)
        if alpha.shape != (self.size,):
            raise ValueError(
                f"difficulty_based: the checkpoint has estimates for {alpha.shape[0]} rows, the task set has "
                f"{self.size}; resume with the same task set"
            )
        self.alpha = alpha.clone()
        self.beta = torch.as_tensor(state["beta"], dtype=torch.float64).clone()
        self.seen = torch.as_tensor(state["seen"], dtype=torch.bool).clone()
