"""The policy update: ``trainer.epochs`` × ``trainer.minibatches`` optimizer steps, each over micro-batches.

The loss convention (:mod:`trinity_core.ops.loss_scale`): every micro-batch's loss is normalised by the
token / sequence counts of the whole optimizer step across micro-batches *and* ranks, the micro-batch
losses are summed (gradient accumulation) and DDP averages the gradients, so the update equals the
single-process, single-micro-batch update. Each micro-batch is trimmed to the tokens it needs
(:mod:`~trinity_core.train.learner.trim`) before its forward pass.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor

from trinity_core.components.micro_batch_loss import builds_loss_scale, micro_batch_loss, own_loss_scale
from trinity_core.config import TrainerConfig
from trinity_core.lm.distribution import SamplingDistribution
from trinity_core.ops import LossScale, global_normalizers
from trinity_core.train.learner.logprobs import response_logprobs
from trinity_core.train.learner.micro_batches import micro_batches, row_ranges, row_tokens
from trinity_core.train.learner.trim import trim_micro_batch
from trinity_core.train.report.profile import StepProfiler

__all__ = ["PolicyUpdate"]


class PolicyUpdate:
    """Updates the policy on a step's rows and columns.

    Args:
        trainer: the ``trainer`` section (epochs, minibatches, micro-batching, clipping, prompts shared).
        loss_agg_mode: ``algorithm.loss_agg_mode``.
        accelerator: the run's ``Accelerator``.
        model, optimizer, scheduler: as ``accelerator.prepare`` returned them.
        components: the run's components (policy loss, KL loss, entropy loss).
        profiler: times the forward-backward and optimizer sections.
        train_mode: switch the policy to training mode for the update (activation checkpointing, LoRA
            dropout act in training mode only).
        distribution: the distribution the rows were sampled from, whose log-probs and entropy the loss
            reads (None: ``softmax(logits)``, e.g. stored or preference data).
    """

    def __init__(
        self,
        trainer: TrainerConfig,
        loss_agg_mode: str | None,
        accelerator: Any,
        *,
        model: Any,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        components: Any,
        profiler: StepProfiler,
        train_mode: bool,
        distribution: SamplingDistribution | None = None,
    ) -> None:
        """Hold the parts; nothing is computed here."""
        self.distribution = distribution
        self.trainer, self.loss_agg_mode, self.acc = trainer, loss_agg_mode, accelerator
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.policy = accelerator.unwrap_model(model)
        self.components, self.profiler, self.train_mode = components, profiler, train_mode
        self.use_entropy = components.entropy is not None
        self.entropy_grad = getattr(components.entropy, "entropy_coef", 1.0) != 0.0  # 0: a metric only

    def __call__(
        self, ids: Tensor, attn: Tensor | None, P: int, columns: dict[str, Tensor], n: int
    ) -> dict[str, Tensor]:
        """The optimizer steps on the ``n`` rows, then the scheduler's step.

        Returns the loss terms (means over micro-batches), ``actor/grad_norm`` and ``actor/kl_coef``.
        """
        tcfg, prof = self.trainer, self.profiler
        loss_terms: list[dict[str, Tensor]] = []
        grad_norms: list[Tensor] = []
        if self.train_mode:
            self.policy.train()
        for _epoch in range(tcfg.epochs):
            for rows in row_ranges(n, tcfg.minibatches):
                loss_terms += self.backward_minibatch(ids, attn, P, columns, rows)
                with prof.section("optimizer"):
                    if tcfg.grad_clip is not None:
                        grad_norms.append(self.acc.clip_grad_norm_(self.model.parameters(), tcfg.grad_clip))
                    self.optimizer.step()
                    self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        metrics = {
            k: torch.stack([t[k].detach().to(torch.float64) for t in loss_terms if k in t]).mean()
            for k in {k for t in loss_terms for k in t}
        }
        if grad_norms:
            metrics["actor/grad_norm"] = torch.stack(
                [g.detach().to(torch.float64) for g in grad_norms]
            ).mean()
        if self.components.kl_loss is not None:
            metrics["actor/kl_coef"] = self.components.kl_loss.update_kl_coef()
        return metrics

    def backward_minibatch(
        self, ids: Tensor, attn: Tensor | None, P: int, columns: dict[str, Tensor], rows: slice | Tensor
    ) -> list[dict[str, Tensor]]:
        """Accumulate the gradient of one optimizer step over the rows ``rows`` of the batch.

        ``rows`` is a range of rows (micro-batches are then views, no copies) or an index tensor.

        The rows are cut into micro-batches (``trainer.micro_batch_size``, and at most
        ``trainer.max_tokens_per_micro_batch`` tokens); every micro-batch loss uses the step's global
        normalizers (all micro-batches, all ranks), the losses are summed by accumulation and DDP
        synchronises on the last micro-batch only. Returns each micro-batch's loss terms (0-d tensors).
        """
        mask, budget = columns["action_mask"], self.trainer.max_tokens_per_micro_batch
        tokens = None if budget is None else row_tokens(attn, mask, P)
        micro = micro_batches(rows, self.trainer.micro_batch_size, tokens=tokens, max_tokens=budget)
        scale = global_normalizers([mask[m] for m in micro])
        pg_scale = self._policy_loss_scale(columns, micro, scale)
        terms_list = []
        for i, m in enumerate(micro):
            ctx = contextlib.nullcontext() if i == len(micro) - 1 else self.acc.no_sync(self.model)
            with self.profiler.section("forward_backward"), ctx:
                cut = trim_micro_batch(
                    ids[m], None if attn is None else attn[m], P, {k: v[m] for k, v in columns.items()}
                )
                loss, terms = self._loss(
                    cut.input_ids, cut.attention_mask, cut.prompt_width, cut.columns, scale, pg_scale
                )
                self.acc.backward(loss)
            terms_list.append(terms)
        return terms_list

    def _policy_loss_scale(self, columns: dict[str, Tensor], micro: list[Any], scale: LossScale) -> Any:
        """The step's ``scale``, unless the policy loss builds its own (MIX losses count subsets apart)."""
        loss_class = type(self.components.policy_loss)
        if not builds_loss_scale(loss_class):
            return scale
        parts = [{k: v[m] for k, v in columns.items()} for m in micro]
        return own_loss_scale(loss_class, parts, max_tokens=scale.max_tokens, all_reduce=True)

    def _loss(
        self,
        ids: Tensor,
        attn: Tensor | None,
        P: int,
        cols: dict[str, Tensor],
        scale: LossScale,
        pg_scale: Any,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """One micro-batch's loss (:func:`~trinity_core.components.micro_batch_loss.micro_batch_loss`)."""
        comps = self.components
        logprob, entropy = response_logprobs(
            self.model,
            ids,
            attn,
            P,
            self.use_entropy,
            self.entropy_grad,
            share_prompts=self.trainer.share_prompts,
            distribution=self.distribution,
            action_mask=cols["action_mask"],
        )
        return micro_batch_loss(
            comps.policy_loss,
            comps.kl_loss,
            comps.entropy,
            loss_agg_mode=self.loss_agg_mode,
            logprob=logprob,
            columns=cols,
            scale=scale,
            entropy=entropy,
            pg_scale=pg_scale,
        )
