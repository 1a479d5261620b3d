"""Timing of the parts of a training step (``trinity train --profile``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["SECTIONS", "StepProfiler", "format_profile"]

SECTIONS = (
    "generation",
    "old_logprob",
    "reference",
    "teacher",
    "critic_values",
    "forward_backward",
    "optimizer",
    "critic_update",
)
"""Named parts of a step (``teacher``: the teacher's no-grad forward; ``critic_values``: the critic's
no-grad forward; ``critic_update``: its forward, backward and optimizer step; each 0 when the run has no
such model); the rest of the step (rewards, EIDs, hooks, advantages, buffer, batch, metrics, logging,
checkpoints) is reported as ``other``."""


class StepProfiler:
    """Accumulates wall time per section over steps; disabled profilers cost one branch per section.

    On CUDA the device is synchronised at section boundaries when enabled (the timings then include
    the kernels launched in the section).
    """

    def __init__(self, enabled: bool, device: torch.device) -> None:
        self.enabled = enabled
        self.sync = enabled and device.type == "cuda"
        self.totals = dict.fromkeys((*SECTIONS, "step"), 0.0)
        self.steps = 0

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        """Time the enclosed block as ``name``."""
        if not self.enabled:
            yield
            return
        if self.sync:
            torch.cuda.synchronize()
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.sync:
                torch.cuda.synchronize()
            self.totals[name] = self.totals.get(name, 0.0) + time.perf_counter() - start

    def report(self, skip_steps: int = 0) -> dict[str, float]:
        """Mean milliseconds per step of every section, ``other`` and ``step``, and their shares (%)."""
        steps = max(self.steps, 1)
        ms = {k: 1000 * v / steps for k, v in self.totals.items()}
        named = sum(ms[k] for k in SECTIONS)
        ms["other"] = max(ms["step"] - named, 0.0)
        out = {f"{k}_ms": v for k, v in ms.items()}
        total = ms["step"] or 1.0
        out.update({f"{k}_pct": 100 * ms[k] / total for k in (*SECTIONS, "other")})
        out["steps"] = float(self.steps)
        return out


def format_profile(report: dict[str, float]) -> str:
    """A small table of the profile report."""
    lines = [f"step profile (mean over {int(report['steps'])} steps, {report['step_ms']:.1f} ms/step):"]
    for name in (*SECTIONS, "other"):
        lines.append(f"  {name:<17}{report[name + '_ms']:8.2f} ms  {report[name + '_pct']:5.1f} %")
    return "\n".join(lines)
