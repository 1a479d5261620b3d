"""Shared machinery of ``mix`` and ``mix_chord``: PPO on rollout rows plus SFT on expert rows."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import torch
from pydantic import Field, model_validator
from torch import Tensor
from trinity_plugin_sft import SFTTokenLoss

from trinity_core.components import ComponentArgs, LossAggArgs, LossAggMode, PolicyLossFn
from trinity_core.ops import aggregate_loss, masked_mean
from trinity_plugin_mix.loss_scale import MixLossScale, mix_normalizers, subset_masks
from trinity_plugin_mix.ppo_clip import ppo_clip_terms

__all__ = ["MixedArgs", "MixedPolicyLoss"]


class MixedArgs(LossAggArgs):
    """Arguments common to ``mix`` and ``mix_chord`` (names and defaults of trinity-rft 0.6.0)."""

    clip_range: float | None = Field(0.2, gt=0, description="PPO clip ε for both sides unless set per side.")
    clip_range_low: float | None = Field(None, gt=0, description="PPO clip ε below 1 (default clip_range).")
    clip_range_high: float | None = Field(None, gt=0, description="PPO clip ε above 1 (default clip_range).")
    use_dynamic_bsz: bool | None = Field(
        None, description="Without loss_scale: weight by experiences per GPU / rows (True) or accumulation."
    )
    ppo_mini_batch_size: int = Field(1, ge=1, description="Experiences per optimizer step (local weights).")
    ppo_micro_batch_size_per_gpu: int = Field(1, ge=1, description="Experiences per micro-batch per GPU.")
    ngpus_trainer: int = Field(1, ge=1, description="Data-parallel trainer GPUs (local weights).")
    train_batch_size_usual: int = Field(1, ge=1, description="Rollout experiences per step (local weights).")
    train_batch_size_expert: int = Field(1, ge=1, description="Expert experiences per step (local weights).")
    sft_loss_agg_mode: LossAggMode | None = Field(
        None, description="Aggregation of the SFT term (None: loss_agg_mode)."
    )
    grpo_loss_agg_mode: LossAggMode | None = Field(
        None, description="Aggregation of the RL term (None: loss_agg_mode)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> MixedArgs:
        if self.clip_range is None and (self.clip_range_low is None or self.clip_range_high is None):
            raise ValueError("set clip_range, or both clip_range_low and clip_range_high")
        for name in ("train_batch_size_usual", "train_batch_size_expert", "ppo_mini_batch_size"):
            if getattr(self, name) < self.ngpus_trainer:
                raise ValueError(
                    f"{name} ({getattr(self, name)}) is smaller than ngpus_trainer ({self.ngpus_trainer}): "
                    "the per-GPU share would be 0; use per-step totals, which are divided by ngpus_trainer"
                )
        return self


class MixedPolicyLoss(PolicyLossFn):
    """Base of the MIX losses: ``L = (1 − μ) · L_rl + μ · L_sft`` over disjoint row subsets.

    ``L_rl`` is the PPO clip (with dual clip ``c = 3``) over the tokens of rows with ``expert_mask`` False,
    ``L_sft`` an SFT loss (:meth:`make_sft_loss`) over the tokens of rows with ``expert_mask`` True. Rows
    are selected with masks, never by indexing (which would synchronise with the host); an empty subset
    contributes exactly 0. Inputs are set to 0 outside their subset before any arithmetic, so NaN/inf in
    padding, or in the ``old_logprob``/``advantages`` of expert rows, reach neither loss nor gradient.

    Normalisation:

    * ``loss_scale=`` a :class:`~trinity_plugin_mix.loss_scale.MixLossScale` (the trainer builds it with
      :func:`~trinity_plugin_mix.loss_scale.mix_normalizers`): each term is divided by its subset's
      global count; the batch-size arguments are not used; summing the micro-batch losses of a step gives
      the full-batch loss and gradient.
    * no ``loss_scale`` (the reference): each term is aggregated over this call's subset and multiplied by
      its row count ``n`` and weight ``w = grad_acc / bs`` (or ``experiences_per_gpu / (B · bs)`` with
      ``use_dynamic_bsz``), with ``grad_acc = ppo_mini_batch_size // ppo_micro_batch_size_per_gpu`` and
      ``bs = train_batch_size_<subset> // ngpus_trainer``.
    * a plain :class:`~trinity_core.ops.LossScale` is a ``TypeError``: it counts both subsets together.

    Metrics (detached, this call, **not** multiplied by ``n · w``, unlike the reference):
    ``usual/pg_loss``, ``usual/pg_clipfrac``, ``usual/pg_clipfrac_lower``, ``usual/ppo_kl``,
    ``expert/<sft metric>``, ``loss``.
    """

    Args: ClassVar[type[ComponentArgs]] = MixedArgs
    requires: ClassVar[frozenset[str]] = frozenset({"expert_data"})

    clip_range: float | None
    clip_range_low: float | None
    clip_range_high: float | None
    use_dynamic_bsz: bool | None
    ppo_mini_batch_size: int
    ppo_micro_batch_size_per_gpu: int
    ngpus_trainer: int
    train_batch_size_usual: int
    train_batch_size_expert: int
    loss_agg_mode: str
    sft_loss_agg_mode: str | None
    grpo_loss_agg_mode: str | None

    def __init__(self, backend: str = "verl", **args: Any) -> None:
        """Validate the arguments and build the SFT term (:meth:`make_sft_loss`)."""
        super().__init__(backend=backend, **args)
        self.clip_low = float(self.clip_range_low if self.clip_range_low is not None else self.clip_range)  # type: ignore[arg-type]
        self.clip_high = float(self.clip_range_high if self.clip_range_high is not None else self.clip_range)  # type: ignore[arg-type]
        self.grpo_mode = self.grpo_loss_agg_mode or self.loss_agg_mode
        self.sft_mode = self.sft_loss_agg_mode or self.loss_agg_mode
        self.sft_loss_fn = self.make_sft_loss(self.sft_mode)

    @classmethod
    def build_loss_scale(
        cls, micro_batches: list[dict[str, Any]], *, max_tokens: float, all_reduce: bool
    ) -> MixLossScale:
        """The ``loss_scale`` of a step (the learner's and the conformance kit's): a plain
        :class:`~trinity_core.ops.LossScale` counts both subsets together, so these losses need
        :func:`~trinity_plugin_mix.loss_scale.mix_normalizers` over the micro-batches' masks."""
        return mix_normalizers(
            [b["action_mask"] for b in micro_batches],
            [b["expert_mask"] for b in micro_batches],
            max_tokens=max_tokens,
            all_reduce=all_reduce,
        )

    @abstractmethod
    def make_sft_loss(self, loss_agg_mode: str) -> SFTTokenLoss:
        """The SFT loss applied to expert rows."""

    def local_weights(self, rows: int) -> tuple[float, float]:
        """The reference's per-row weights ``(w_usual, w_expert)`` for a call with ``rows`` rows."""
        usual = self.train_batch_size_usual // self.ngpus_trainer
        expert = self.train_batch_size_expert // self.ngpus_trainer
        if self.use_dynamic_bsz:
            per_gpu = self.ppo_mini_batch_size // self.ngpus_trainer
            return per_gpu / (max(rows, 1) * usual), per_gpu / (max(rows, 1) * expert)
        accumulation = self.ppo_mini_batch_size // self.ppo_micro_batch_size_per_gpu
        return accumulation / usual, accumulation / expert

    def combine(
        self,
        logprob: Tensor,
        old_logprob: Tensor,
        action_mask: Tensor,
        advantages: Tensor,
        expert_mask: Tensor,
        mu: Tensor | float,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``(1 − mu) · L_rl + mu · L_sft`` and the metrics (see the class docstring)."""
        rows = logprob.shape[0]
        if expert_mask.shape != (rows,):
            raise ValueError(
                f"policy loss {type(self).name()!r}: expert_mask has shape {tuple(expert_mask.shape)}, "
                f"expected ({rows},), one flag per row (True for expert/SFT rows)"
            )
        usual_mask, expert_tokens = subset_masks(action_mask, expert_mask)
        dtype = torch.promote_types(logprob.dtype, torch.float32)
        zero = torch.zeros((), dtype=dtype, device=logprob.device)
        terms = ppo_clip_terms(
            torch.where(usual_mask, logprob.to(dtype), zero),
            torch.where(usual_mask, old_logprob.to(dtype), zero),
            torch.where(usual_mask, advantages.to(dtype), zero),
            self.clip_low,
            self.clip_high,
        )
        sft_values = self.sft_loss_fn.token_loss(logprob, expert_tokens).to(dtype)
        scale = self.loss_scale
        if isinstance(scale, MixLossScale):
            rl = scale.usual.aggregate(terms.loss, usual_mask, self.grpo_mode)
            sft = scale.expert.aggregate(sft_values, expert_tokens, self.sft_mode)
            rl_weighted, sft_weighted = rl, sft
        elif scale is None:
            rl = aggregate_loss(terms.loss, usual_mask, self.grpo_mode)
            sft = aggregate_loss(sft_values, expert_tokens, self.sft_mode)
            w_usual, w_expert = self.local_weights(rows)
            expert_rows = (expert_mask != 0).sum().to(dtype)
            rl_weighted = rl * (rows - expert_rows) * w_usual
            sft_weighted = sft * expert_rows * w_expert
        else:
            raise TypeError(
                f"policy loss {type(self).name()!r} got loss_scale={type(scale).__name__}, which counts "
                "rollout and expert tokens together; pass "
                "trinity_plugin_mix.mix_normalizers(masks, expert_masks) (a MixLossScale) or no loss_scale"
            )
        loss = (1 - mu) * rl_weighted + mu * sft_weighted
        with torch.no_grad():
            metrics = {
                "usual/pg_loss": rl.detach(),
                "usual/pg_clipfrac": masked_mean(terms.clipped.to(dtype), usual_mask),
                "usual/pg_clipfrac_lower": masked_mean(terms.clipped_lower.to(dtype), usual_mask),
                "usual/ppo_kl": masked_mean(-terms.log_ratio, usual_mask),
                f"expert/{self.sft_loss_fn.metric_name}": sft.detach(),
                "loss": loss.detach(),
            }
        return loss, metrics
