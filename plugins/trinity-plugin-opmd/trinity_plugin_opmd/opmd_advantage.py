"""``opmd`` advantage function: :class:`OPMDGroupAdvantage` (experience pipeline)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from torch import Tensor

from trinity_core.components import ComponentArgs
from trinity_plugin_opmd.baseline_group import BaselineGroupAdvantage
from trinity_plugin_opmd.kernel import GroupBaselines, group_baselines

__all__ = ["OPMDArgs", "OPMDGroupAdvantage"]


class OPMDArgs(ComponentArgs):
    """Arguments of :class:`OPMDGroupAdvantage` and the ``opmd`` add strategy (the earlier API's defaults)."""

    opmd_baseline: Literal["mean", "logavgexp"] = Field(
        "mean",
        description="Group baseline: 'mean' of the rewards, or 'logavgexp' = tau·log(mean(exp(r/tau))).",
    )
    tau: float = Field(1.0, gt=0, description="Temperature of the 'logavgexp' baseline (unused by 'mean').")


class OPMDGroupAdvantage(BaselineGroupAdvantage):
    """OPMD: A_i = r_i − b_g, b_g the task group's mean reward or its log-avg-exp τ·log(mean(exp(r/τ))).

    Online policy mirror descent (Kimi k1.5, arXiv:2501.12599, section 2.3.2; Trinity-RFT's ``opmd``).
    Computed in the experience pipeline over task groups (``eid.tid``), float64:

    * ``opmd_baseline="mean"``: ``b_g = mean(r)``;
    * ``opmd_baseline="logavgexp"``: ``b_g = τ·log((1/n) Σ exp(r_i/τ))`` (max-shifted, never overflows;
      between the mean and the maximum), the baseline of the KL-regularised objective with temperature τ.

    ``exp.advantages = A_i · action_mask``, ``exp.returns`` a copy. Pair it with the ``opmd`` policy loss.

    Policies: a **singleton** group's baseline is its own reward under either baseline, so ``A = 0`` (the
    reference uses ``b = 0``, i.e. the raw reward); a **zero-variance** group gets exactly 0.
    Unknown ``opmd_baseline`` values are rejected (the reference silently used log-avg-exp).
    """

    Args: ClassVar[type[ComponentArgs]] = OPMDArgs
    paper: ClassVar[str | None] = "https://arxiv.org/abs/2501.12599"

    opmd_baseline: Literal["mean", "logavgexp"]
    tau: float

    def baselines(self, rewards: Tensor, index: Tensor, num_groups: int) -> GroupBaselines:
        """``mean`` or ``logavgexp`` baselines (:func:`~trinity_plugin_opmd.kernel.group_baselines`)."""
        return group_baselines(rewards, index, num_groups, self.opmd_baseline, self.tau)
