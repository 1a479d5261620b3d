"""The learner: buffer -> batch -> trainer-side advantages -> update -> metrics. It owns the weights.

Step ``s`` of mode ``both`` (:meth:`Learner.step`)::

    batch     = buffer.read_batch()                          # what the explorer wrote for step s
    batch     = rows of batch made by a policy at most max_staleness versions old
    old, ref  = no-grad passes; trainer-side advantage fn on the batch (after a KL penalty)
    values    = the critic's no-grad pass (presets with use_critic; then critic.update on the returns)
    for epoch, minibatch: for micro-batch:                   # PPO-style update
        loss = policy_loss + kl_loss - entropy_loss   (global normalizers: LossScale)
        accelerator.backward(loss)
    clip, optimizer.step(), scheduler.step()                 # the policy version is now s + 1

In mode ``train`` (:meth:`Learner.offline_step`) the batch is ``data.batch_size`` stored items (DPO
pairs split into adjacent chosen/rejected rows, :mod:`trinity_core.train.data.stored`) and the same update
follows. Metrics are 0-d tensors; :meth:`Learner.reduce` reduces them over ranks once per step.

The loss convention (``trinity_core.ops.loss_scale``): every micro-batch's loss is normalised by the
token / sequence counts of the whole optimizer step across micro-batches *and* ranks, the micro-batch
losses are summed (gradient accumulation) and DDP averages the gradients, so the update equals the
single-process, single-micro-batch update.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import torch
from torch import Tensor

from trinity_core.batch import GROUP_LEVELS, ExperienceBatch
from trinity_core.buffer import BufferReader, MemoryReader
from trinity_core.components.micro_batch_loss import micro_batch_loss
from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig
from trinity_core.ops import LossScale, global_normalizers
from trinity_core.train.data.stored import StoredExperiences
from trinity_core.train.learner.balance import balance_batch, balances
from trinity_core.train.learner.critic import build_critic
from trinity_core.train.learner.expert import ExpertData, policy_loss_scale
from trinity_core.train.learner.teacher import load_teacher, score_with_teacher
from trinity_core.train.learner.trim import trim_micro_batch
from trinity_core.train.learner.update import micro_batches, response_logprobs, row_ranges, row_tokens
from trinity_core.train.models.policy import needs_train_mode
from trinity_core.train.modes.synchronizer import keep_fresh
from trinity_core.train.report.profile import StepProfiler

__all__ = ["Learner", "check_loss_inputs"]


def check_loss_inputs(
    config: ResolvedConfig,
    components: Any,
    has_ref: bool,
    data: StoredExperiences | None,
    expert: ExpertData | None = None,
) -> None:
    """Fail before training when the policy loss asks for a column the learner cannot provide."""
    provided = {"old_logprob", "action_mask", *(["ref_logprob"] if has_ref else [])}
    provided.update(("expert_mask", "step") if expert is not None else ())
    if data is None:
        provided.update(("advantages", "rollout_logprob"))
    else:
        provided.update(data.pair_columns(2, torch.device("cpu")))
        if data.has_advantages:
            provided.add("advantages")
    loss_fn = components.policy_loss
    missing = [k for k in loss_fn.select_keys if loss_fn.mapper.to_trinity(k) not in provided]
    if missing:
        raise ConfigError(
            [
                ConfigProblem(
                    "algorithm.policy_loss_fn",
                    f"policy loss {config.algorithm.policy_loss_fn!r} needs {missing}, which "
                    f"trinity train does not provide (it provides {sorted(provided)})",
                    hint="in mode train, store advantages in the experiences or pick another loss"
                    if data is not None
                    else None,
                )
            ]
        )


class Learner:
    """Reads what the explorer wrote, updates the policy, and reports the step's metrics.

    ``model`` and ``optimizer`` are the ones ``accelerator.prepare`` returned; ``policy`` is the
    unwrapped model (the weights the synchronizer sends to the explorer); ``version`` counts the
    updates made, so the experiences of a policy ``k`` updates old have staleness ``k``.
    """

    def __init__(
        self,
        config: ResolvedConfig,
        accelerator: Any,
        *,
        model: Any,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        ref: Any | None,
        components: Any,
        reader: BufferReader,
        pad_token_id: int,
        data: StoredExperiences | None,
        profiler: StepProfiler,
        event_loop: asyncio.AbstractEventLoop,
        expert: ExpertData | None = None,
    ) -> None:
        """Hold the parts of the update and build the critic when the preset has ``use_critic``."""
        tcfg = config.trainer
        self.config, self.acc, self.components = config, accelerator, components
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.policy = accelerator.unwrap_model(model)
        self.ref, self.reader, self.data = ref, reader, data
        self.expert = expert  # MIX's expert rows; the teacher of distillation (model.teacher_path):
        self.teacher = load_teacher(config, self.policy, accelerator.device)
        self.pad_token_id, self.profiler, self.event_loop = pad_token_id, profiler, event_loop
        self.rank = accelerator.process_index
        self.use_entropy = components.entropy is not None
        self.entropy_grad = getattr(components.entropy, "entropy_coef", 1.0) != 0.0  # 0: a metric only
        self.need_old_pass = tcfg.epochs * tcfg.minibatches > 1
        self.share_prompts = tcfg.share_prompts
        self.max_staleness = config.synchronizer.max_staleness
        self.train_mode = needs_train_mode(config)
        self.balance = balances(config, components.preset, accelerator.num_processes)
        self.version = 0
        self.critic = build_critic(config, accelerator, self.policy, components, profiler)

    # ------------------------------------------------------------------ mode both

    def step(self, step: int) -> dict[str, Tensor]:
        """Train on the experiences the explorer wrote for step ``step`` (0-based); return its metrics."""
        prof, acc, comps = self.profiler, self.acc, self.components
        metrics: dict[str, Tensor] = {}
        in_trainer = comps.advantage_in_trainer

        # 1. Batch from the buffer (on-policy: everything written for this step). Without a
        #    trainer-side advantage the update reads only these columns (and no group index).
        batch = self.event_loop.run_until_complete(
            self.reader.read_batch(
                pad_token_id=self.pad_token_id,
                fields=None if in_trainer else ("input_ids", "action_mask", "advantages", "logprobs"),
                group_levels=GROUP_LEVELS if in_trainer else (),
            )
        )
        self.trim_buffer()
        if len(batch) == 0:
            raise RuntimeError(
                f"step {step}: no experiences reached the buffer on rank {self.rank} (every response was "
                "filtered); check the reward functions, trinity_process_experiences hooks and std_threshold"
            )

        # 2. Staleness: how many updates ago each row's policy was; rows past max_staleness are dropped.
        fresh, staleness = keep_fresh(batch, self.version, self.max_staleness)
        metrics.update(staleness)
        if fresh is None:  # every row too old: no update this step, the version stays
            return metrics
        if self.balance:  # about the same tokens on every rank (whole groups move)
            levels = GROUP_LEVELS if in_trainer else ()
            fresh, shares = balance_batch(fresh, acc, pad_token_id=self.pad_token_id, group_levels=levels)
            metrics.update(shares)
        batch = fresh.to(acc.device)
        if self.expert is not None:
            batch = self.expert.mix(batch, step)
        ids, P = batch.input_ids.long(), batch.max_prompt_length
        attn = None if int(batch.prompt_lengths.min()) == P else batch.attention_mask
        mask = batch.action_mask if batch.action_mask is not None else batch.response_mask

        # 3. No-grad passes and trainer-side advantages.
        if self.need_old_pass:
            with prof.section("old_logprob"), torch.no_grad():
                batch.extras["old_logprobs"] = self._logprobs(self.policy, ids, attn, P)
        if self.ref is not None:
            with prof.section("reference"), torch.no_grad():
                batch.extras["ref_logprobs"] = self._logprobs(self.ref, ids, attn, P)
        if self.critic is not None:
            batch.extras["values"] = self.critic.values(ids, attn, P)
        if self.teacher is not None:
            score_with_teacher(self.teacher, self.policy, batch, ids, attn, P, prof, self.share_prompts)
        if in_trainer:
            if comps.kl_penalty is not None:
                old = batch.extras.get("old_logprobs")
                if old is None:
                    with torch.no_grad():
                        old = self._logprobs(self.policy, ids, attn, P)
                scores, kl_metrics = comps.kl_penalty.apply_kl_penalty_to_reward(
                    batch.token_level_scores(), old, batch.extras["ref_logprobs"], mask
                )
                batch.token_level_reward = scores
                metrics.update({f"kl_penalty/{k}": v for k, v in kl_metrics.items()})
            batch, adv_metrics = comps.advantage(batch)
            metrics.update(
                {
                    f"advantage/{k}": torch.as_tensor(v)
                    for k, v in adv_metrics.items()
                    if isinstance(v, Tensor | float | int)
                }
            )
        if batch.advantages is None:
            raise RuntimeError(
                f"step {step}: the batch has no advantages; the add strategy / advantage function "
                f"{self.config.algorithm.add_strategy or self.config.algorithm.advantage_fn!r} set none"
            )

        # 4. Update: epochs x minibatches optimizer steps, each over micro-batches.
        columns = {
            "action_mask": mask,
            "advantages": batch.advantages.to(torch.float32),
            **{k[:-1] if k.endswith("logprobs") else k: v for k, v in batch.extras.items()},
        }
        if batch.logprobs is not None:  # the explorer's, for off-policy corrections (train/behaviour.py)
            columns["rollout_logprob"] = batch.logprobs.to(torch.float32)
        n = len(batch)
        if self.critic is not None:
            assert batch.returns is not None  # a trainer-side advantage function sets returns
            metrics.update(self.critic.update(ids, attn, P, {**columns, "returns": batch.returns}, n))
        if self.critic is not None and self.critic.warming_up(step):
            self.version += 1  # the policy is frozen while only the critic learns
        else:
            metrics.update(self.update(ids, attn, P, columns, n))

        # 5. Metrics of the batch trained on.
        metrics["reward/mean"] = torch.nanmean(batch.rewards)
        metrics["reward/std"] = (
            batch.rewards[batch.has_reward].std(correction=0) if n > 1 else torch.zeros(())
        )
        metrics["response/length"] = batch.response_lengths.double().mean()
        metrics["learner/experiences"] = torch.tensor(float(n))
        metrics["learner/tokens"] = batch.response_lengths.double().sum()
        return metrics

    # ------------------------------------------------------------------ mode train

    def offline_step(self, step: int) -> dict[str, Tensor]:
        """Run step ``step`` (0-based) of mode ``train`` on stored experiences; return its metrics.

        Stored experiences replace the rollout: no generation, rewards or advantages are computed.
        """
        prof, acc, data = self.profiler, self.acc, self.data
        assert data is not None  # mode train always loads its data
        metrics: dict[str, Tensor] = {}

        # 1. Batch: this rank's items of the step; a DPO pair is two adjacent rows, chosen first.
        exps = data.step_rows(step, self.rank)
        batch = ExperienceBatch.from_experiences(exps, pad_token_id=self.pad_token_id).to(acc.device)
        ids, P = batch.input_ids.long(), batch.max_prompt_length
        attn = None if all(e.prompt_length == P for e in exps) else batch.attention_mask
        mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
        columns: dict[str, Tensor] = {"action_mask": mask, **data.pair_columns(len(batch), acc.device)}
        if batch.logprobs is not None:  # the behaviour policy's log-probs, when stored
            columns["old_logprob"] = batch.logprobs.to(torch.float32)
        if batch.advantages is not None:
            columns["advantages"] = batch.advantages.to(torch.float32)

        # 2. Reference pass: π_ref log-probs for the DPO loss and KL losses.
        if self.ref is not None:
            with prof.section("reference"), torch.no_grad():
                columns["ref_logprob"] = self._logprobs(self.ref, ids, attn, P)

        # 3. Update: one optimizer step over micro-batches (global normalizers, as in mode both).
        metrics.update(self.update(ids, attn, P, columns, len(batch)))

        # 4. Metrics.
        if data.has_rewards:
            metrics["reward/mean"] = torch.nanmean(batch.rewards)
        metrics["response/length"] = batch.response_lengths.double().mean()
        return metrics

    # ------------------------------------------------------------------ the update

    def update(
        self, ids: Tensor, attn: Tensor | None, P: int, columns: dict[str, Tensor], n: int
    ) -> dict[str, Tensor]:
        """``trainer.epochs`` × ``trainer.minibatches`` optimizer steps on the ``n`` rows, then the scheduler.

        Returns the loss terms (means over micro-batches), ``actor/grad_norm`` and ``actor/kl_coef``.
        """
        prof, acc, tcfg = self.profiler, self.acc, self.config.trainer
        metrics: dict[str, Tensor] = {}
        loss_terms: list[dict[str, Tensor]] = []
        grad_norms: list[Tensor] = []
        if self.train_mode:  # activation checkpointing and LoRA dropout act in training mode only
            self.policy.train()
        for _epoch in range(tcfg.epochs):
            for rows in row_ranges(n, tcfg.minibatches):
                loss_terms += self.backward_minibatch(ids, attn, P, columns, rows)
                with prof.section("optimizer"):
                    if tcfg.grad_clip is not None:
                        grad_norms.append(acc.clip_grad_norm_(self.model.parameters(), tcfg.grad_clip))
                    self.optimizer.step()
                    self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.version += 1
        for k in {k for t in loss_terms for k in t}:
            metrics[k] = torch.stack([t[k].detach().to(torch.float64) for t in loss_terms if k in t]).mean()
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

        The rows are cut into micro-batches (``trainer.micro_batch_size``); every micro-batch loss uses
        the step's global normalizers (all micro-batches, all ranks), the losses are summed by
        accumulation and DDP synchronises on the last micro-batch only. Returns each micro-batch's loss
        terms (0-d tensors).
        """
        acc, mask = self.acc, columns["action_mask"]
        tcfg = self.config.trainer
        budget = tcfg.max_tokens_per_micro_batch
        tokens = None if budget is None else row_tokens(attn, mask, P)
        micro = micro_batches(rows, tcfg.micro_batch_size, tokens=tokens, max_tokens=budget)
        scale = global_normalizers([mask[m] for m in micro])
        pg_scale = policy_loss_scale(self.components.policy_loss, columns, micro, scale)
        terms_list = []
        for i, m in enumerate(micro):
            ctx = contextlib.nullcontext() if i == len(micro) - 1 else acc.no_sync(self.model)
            with self.profiler.section("forward_backward"), ctx:
                sub_attn = None if attn is None else attn[m]
                cut = trim_micro_batch(ids[m], sub_attn, P, {k: v[m] for k, v in columns.items()})
                loss, terms = self._loss(
                    cut.input_ids, cut.attention_mask, cut.prompt_width, cut.columns, scale, pg_scale
                )
                acc.backward(loss)
            terms_list.append(terms)
        return terms_list

    def _loss(
        self,
        ids: Tensor,
        attn: Tensor | None,
        P: int,
        cols: dict[str, Tensor],
        scale: LossScale,
        pg_scale: Any = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """One micro-batch's loss (:func:`~trinity_core.components.micro_batch_loss.micro_batch_loss`)."""
        comps = self.components
        logprob, entropy = response_logprobs(
            self.model, ids, attn, P, self.use_entropy, self.entropy_grad, share_prompts=self.share_prompts
        )
        return micro_batch_loss(
            comps.policy_loss,
            comps.kl_loss,
            comps.entropy,
            loss_agg_mode=self.config.algorithm.loss_agg_mode,
            logprob=logprob,
            columns=cols,
            scale=scale,
            entropy=entropy,
            pg_scale=pg_scale,  # MIX losses normalise per subset (expert.py)
        )

    # ------------------------------------------------------------------ helpers

    def _logprobs(self, model: Any, ids: Tensor, attn: Tensor | None, P: int) -> Tensor:
        """Log-probs of the response tokens under ``model`` without entropy (call it under no_grad)."""
        return response_logprobs(model, ids, attn, P, False, share_prompts=self.share_prompts)[0]

    def reduce(self, metrics: dict[str, Tensor]) -> dict[str, float]:
        """The step's metrics averaged over ranks: one reduction, one host transfer."""
        keys = sorted(metrics)
        stacked = torch.stack(
            [torch.as_tensor(metrics[k]).to(self.acc.device, torch.float64).reshape(()) for k in keys]
        )
        if self.acc.num_processes > 1:
            stacked = self.acc.reduce(stacked, reduction="mean")
        return dict(zip(keys, stacked.tolist(), strict=True))

    def trim_buffer(self) -> None:
        """Free what was read: the memory buffer keeps every item it was given, and an on-policy learner
        has read them all."""
        if isinstance(self.reader, MemoryReader) and len(self.reader) == 0:
            self.reader.discard_read()
