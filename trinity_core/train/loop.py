"""The training loop of ``trinity train``: one step reads top to bottom, rollout to optimizer.

Step ``s`` on every rank::

    rows      = task.sample(prompts_per_step / world_size)                  # tasks
    rollout   = generate(policy, rows, G = algorithm.repeat_times)           # G responses per prompt
    rewards   = Σ_f w_f · f(prompts, completions, **fields)                  # reward functions
    exps      = Experience(EID(batch=s, task=i, run=j), ...)                 # one per response
    exps      = trinity_process_experiences(exps, s)                         # pluggy stage
    add strategy / pipeline advantage fn -> buffer                           # group advantages
    batch     = buffer.read_batch()                                          # trainer side
    old, ref  = no-grad passes; trainer-side advantage fn on the batch
    for epoch, minibatch: for micro-batch:                                   # PPO-style update
        loss = policy_loss + kl_loss - entropy_loss   (global normalizers: LossScale)
        accelerator.backward(loss)
    clip, optimizer.step(), scheduler.step()
    metrics -> gathered over ranks once -> metrics.jsonl, trackers, trinity_on_metrics

When no hook implements the pluggy stage, there is no add strategy, and the advantage function runs in
the trainer or has an exact columnar path, the experiences of a step are one columnar batch from the
rollout to the update, and the ``Experience`` objects are made only if something reads them
(:mod:`trinity_core.train.columnar`); the result is the same.

In mode ``train`` (:meth:`Trainer.offline_step`) there is no rollout: a step reads ``data.batch_size``
stored items (DPO pairs split into adjacent chosen/rejected rows, :mod:`trinity_core.train.offline`),
runs the reference pass when a KL loss or the loss needs ``ref_logprob``, and makes the same update.

The loss convention (``trinity_core.ops.loss_scale``): every micro-batch's loss is normalised by the
token / sequence counts of the whole optimizer step across micro-batches *and* ranks, the micro-batch
losses are summed (gradient accumulation) and DDP averages the gradients, so the update equals the
single-process, single-micro-batch update.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor

from trinity_core.batch import GROUP_LEVELS, ExperienceBatch
from trinity_core.buffer import MemoryReader, make_buffer
from trinity_core.components import GroupAdvantage, Metrics
from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig
from trinity_core.experience import Experience
from trinity_core.hooks import get_plugin_manager, notify_metrics, run_experience_pipeline
from trinity_core.ops import LossScale, global_normalizers
from trinity_core.train import checkpoint as ckpt
from trinity_core.train.build import build_components, build_rewards, build_task, frozen_copy, needs_reference
from trinity_core.train.columnar import columnar_levels, pipeline_advantage_on_batch
from trinity_core.train.dataset_io import TaskDataError
from trinity_core.train.experiences import rollout_batch, rollout_experiences
from trinity_core.train.export import save_policy
from trinity_core.train.model import load_policy
from trinity_core.train.offline import StoredExperiences, load_stored_experiences
from trinity_core.train.profile import StepProfiler
from trinity_core.train.rewards import combine_rewards
from trinity_core.train.rollout import Rollout, generate

__all__ = ["LaunchError", "TrainResult", "Trainer", "lr_scheduler", "response_logprobs"]


class LaunchError(RuntimeError):
    """The process layout does not match the launcher (a silently duplicated or single-process run)."""


@dataclass
class TrainResult:
    """What a finished run reports."""

    run_dir: Path
    steps: int
    reward_curve: list[tuple[int, float]]
    eval_accuracy: float | None
    wall_seconds: float
    profile: dict[str, float] | None = None
    final_reward: float = math.nan
    history: list[dict[str, float]] = field(default_factory=list)
    loss_curve: list[tuple[int, float]] = field(default_factory=list)


def response_logprobs(
    model: Any, input_ids: Tensor, attention_mask: Tensor | None, prompt_width: int, with_entropy: bool
) -> tuple[Tensor, Tensor | None]:
    """Log-probs ``(B, R)`` of the response tokens ``input_ids[:, P:]`` (and per-token entropy).

    Position ids follow the attention mask, as in ``generate`` with left-padded prompts. Pass
    ``attention_mask=None`` when no prompt is padded: right padding after the responses cannot affect
    earlier positions under causal attention, and without a mask the model takes its faster plain causal path.
    """
    if attention_mask is None:
        logits = model(input_ids=input_ids).logits
    else:
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)
        mask = attention_mask.long()
        logits = model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids).logits
    logits = logits[:, prompt_width - 1 : -1].float()
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, input_ids[:, prompt_width:, None].long()).squeeze(-1)
    entropy = None
    if with_entropy:
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def lr_scheduler(optimizer: torch.optim.Optimizer, kind: str, warmup_steps: int, total_steps: int) -> Any:
    """The learning-rate schedule ``kind`` (constant, linear, cosine) from ``transformers.get_scheduler``.

    The factor on ``trainer.lr`` at 0-based step ``s``, warm-up ``W`` and ``T`` total steps: ``s / W``
    while ``s < W``, then 1 (constant), ``(T - s) / (T - W)`` (linear) or
    ``(1 + cos(pi * (s - W) / (T - W))) / 2`` (cosine).
    """
    from transformers import get_scheduler

    # transformers' "constant" ignores the warm-up; "constant_with_warmup" with W = 0 is the same constant.
    name = "constant_with_warmup" if kind == "constant" else kind
    return get_scheduler(name, optimizer, num_warmup_steps=warmup_steps, num_training_steps=total_steps)


def _row_ranges(n: int, parts: int) -> list[slice]:
    """``n`` rows cut into ``parts`` contiguous ranges as ``torch.tensor_split`` cuts them (the first
    ``n % parts`` ranges one row longer); slicing by a range gives views, an index tensor copies."""
    size, extra = divmod(n, parts)
    bounds = [0]
    for i in range(parts):
        bounds.append(bounds[-1] + size + (i < extra))
    return [slice(a, b) for a, b in pairwise(bounds)]


def _check_offline_trainer(config: ResolvedConfig) -> None:
    """Mode ``train`` makes one optimizer update per step: passes over the data are ``data.epochs``."""
    problems = [
        ConfigProblem(
            f"trainer.{key}",
            f"mode 'train' makes one optimizer update per step on data.batch_size items, got {key} = {value}",
            hint=f"remove trainer.{key}; use data.epochs for passes over the data",
        )
        for key in ("epochs", "minibatches")
        if (value := getattr(config.trainer, key)) != 1
    ]
    if problems:
        raise ConfigError(problems)


def _check_vocabulary(data: StoredExperiences, model: Any) -> None:
    """Every stored token id must be an id of the model's vocabulary (else the embedding fails mid-run)."""
    vocab = int(model.get_input_embeddings().num_embeddings)
    highest = int(torch.cat([row.tokens for row in data.rows if row.tokens is not None]).max())
    if highest >= vocab:
        raise ConfigError(
            [
                ConfigProblem(
                    "data.experiences",
                    f"token id {highest} is outside the model's vocabulary of {vocab} ids",
                    hint="tokenize the experiences with the run's tokenizer (model.tokenizer_path)",
                )
            ]
        )


class Trainer:
    """One run: built from a resolved config and a run directory; :meth:`train` runs every step."""

    def __init__(
        self,
        config: ResolvedConfig,
        run_dir: Path,
        *,
        accelerator: Any,
        resume: bool = False,
        profile: bool = False,
    ) -> None:
        """Build everything and check it; every problem is raised before the first step."""
        self.config = config
        self.run_dir = run_dir
        self.acc = accelerator
        tcfg, rcfg, alg = config.trainer, config.rollout, config.algorithm
        world = accelerator.num_processes
        self.rank = accelerator.process_index
        self.is_main = accelerator.is_main_process
        self.offline = config.mode == "train"
        if self.offline:
            _check_offline_trainer(config)
        elif rcfg.prompts_per_step % world:
            raise ConfigError(
                [
                    ConfigProblem(
                        "rollout.prompts_per_step",
                        f"{rcfg.prompts_per_step} prompts cannot be split over {world} processes",
                        hint=f"use a multiple of {world}",
                    )
                ]
            )
        self.prompts_per_rank = rcfg.prompts_per_step // world
        self.group_size = alg.repeat_times

        # Task, rewards, buffer, components: cheap, so first (errors before the model loads).
        self.task = build_task(config)
        self.reward_names, self.reward_fns, self.reward_weights = build_rewards(config, self.task)
        self.writer, self.reader = make_buffer("memory")
        self.components = build_components(config, self.writer, offline=self.offline)
        self.data: StoredExperiences | None = None
        if self.offline:
            self.data = load_stored_experiences(config, world, schema=str(self.components.preset.schema))
            if self.data.paired and tcfg.micro_batch_size is not None and tcfg.micro_batch_size % 2:
                raise ConfigError(
                    [
                        ConfigProblem(
                            "trainer.micro_batch_size",
                            f"{tcfg.micro_batch_size} rows would cut a DPO pair (two rows) in half",
                            hint="use an even micro_batch_size",
                        )
                    ]
                )
        self.total_steps = (
            self.data.total_steps(tcfg.total_steps, config.data.epochs) if self.data else tcfg.total_steps
        )
        self.pm = get_plugin_manager()
        self.max_new_tokens = rcfg.max_new_tokens or self.task.max_response_tokens()

        # Seeds: the same model init on every rank, distinct sampling streams per rank.
        torch.manual_seed(tcfg.seed * 1_000_003 + self.rank)
        self.task_gen = torch.Generator().manual_seed(tcfg.seed * 7919 + self.rank)

        model, self.tokenizer = load_policy(
            config.model.model_path,
            config.model.tokenizer_path,
            config.model.config,
            self.task.alphabet(),
            seed=tcfg.seed,
        )
        if self.data is not None:
            _check_vocabulary(self.data, model)
        loss_fn = self.components.policy_loss
        loss_reads_ref = any(loss_fn.mapper.to_trinity(k) == "ref_logprob" for k in loss_fn.select_keys)
        self.use_ref = needs_reference(config) or loss_reads_ref
        ref = None
        if self.use_ref:
            if config.model.ref_model_path:
                ref, _ = load_policy(config.model.ref_model_path, None, {}, "", seed=tcfg.seed)
                ref.eval()
                ref.requires_grad_(False)
            else:
                ref = frozen_copy(model)
        self.use_entropy = self.components.entropy is not None
        self.need_old_pass = tcfg.epochs * tcfg.minibatches > 1

        groups = [p for p in model.parameters() if p.requires_grad]
        if tcfg.optimizer == "sgd":
            optimizer: torch.optim.Optimizer = torch.optim.SGD(
                groups, lr=tcfg.lr, weight_decay=tcfg.weight_decay
            )
        else:
            cls = torch.optim.AdamW if tcfg.optimizer == "adamw" else torch.optim.Adam
            optimizer = cls(groups, lr=tcfg.lr, betas=tcfg.betas, weight_decay=tcfg.weight_decay)
        scheduler = lr_scheduler(optimizer, tcfg.lr_scheduler, tcfg.warmup_steps, self.total_steps)
        self.model, self.optimizer = accelerator.prepare(model, optimizer)
        self.scheduler = scheduler
        self.policy = accelerator.unwrap_model(self.model)
        self.ref = ref.to(accelerator.device) if ref is not None else None
        self.profiler = StepProfiler(profile, accelerator.device)
        self.start_step = 0
        self.history: list[dict[str, float]] = []
        self.select_keys_check()
        if resume:
            self._load_checkpoint()
        # Made last, so that a check above that fails leaves no loop behind; whoever runs the trainer
        # closes it (an unclosed loop collected at exit prints "Exception ignored in ... __del__").
        self.event_loop = asyncio.new_event_loop()

    # ------------------------------------------------------------------ one step

    def step(self, step: int) -> dict[str, float]:
        """Run training step ``step`` (0-based) and return its metrics (gathered over ranks)."""
        prof, acc, comps = self.profiler, self.acc, self.components
        metrics: dict[str, Tensor] = {}
        G = self.group_size

        # 1. Rollout: G responses for each prompt of this rank.
        rows = self.task.sample(self.prompts_per_rank, self.task_gen)
        prompts = [r["prompt"] for r in rows]
        with prof.section("generation"):
            rollout = generate(
                self.policy,
                self.tokenizer,
                prompts,
                repeat=G,
                max_new_tokens=self.max_new_tokens,
                temperature=self.config.rollout.temperature,
                top_p=self.config.rollout.top_p,
                top_k=self.config.rollout.top_k,
            )

        # 2. Rewards: reward functions on decoded completions (rows repeated G times, prompt-major).
        completions, completion_ids = self._decode(rollout)
        fields = {k: [r[k] for r in rows for _ in range(G)] for k in self.task.fields if k != "prompt"}
        fields["truncated"] = rollout.truncated.tolist()
        rewards = combine_rewards(
            self.reward_fns,
            self.reward_weights,
            self.reward_names,
            [p for p in prompts for _ in range(G)],
            completions,
            fields,
            completion_ids=completion_ids,
        )

        # 3. Experiences with EIDs (batch = step, task = global prompt index, run = response index),
        #    the pluggy stage, then the preset's add strategy or pipeline advantage fn into the buffer.
        #    When every stage reads columns, the experiences travel as one columnar batch and are
        #    never made one by one (trinity_core.train.columnar).
        in_trainer = comps.advantage_in_trainer
        levels = GROUP_LEVELS if in_trainer else ()
        base = self.rank * self.prompts_per_rank
        adv_metrics: Metrics = {}
        columnar = columnar_levels(comps, self.pm)
        if columnar is not None:
            built = rollout_batch(
                rollout,
                rewards,
                step=step,
                group_size=G,
                task_offset=base,
                pad_token_id=self.tokenizer.pad_token_id,
                group_levels=columnar,
            )
            if in_trainer:
                written: ExperienceBatch | list[Experience] = built
            else:
                written, adv_metrics = pipeline_advantage_on_batch(
                    cast(GroupAdvantage, comps.advantage), built
                )
            if isinstance(written, ExperienceBatch):
                self.event_loop.run_until_complete(self.writer.write_batch(written))
            else:
                self.event_loop.run_until_complete(self.writer.write(written))
        else:
            exps = rollout_experiences(rollout, rewards, step=step, group_size=G, task_offset=base)
            exps = run_experience_pipeline(self.pm, exps, step)
            if comps.add_strategy is not None:
                _, adv_metrics = self.event_loop.run_until_complete(comps.add_strategy.add(exps, step))
            elif comps.advantage is not None and not in_trainer:
                exps, adv_metrics = comps.advantage(exps)
                self.event_loop.run_until_complete(self.writer.write(exps))
            else:
                self.event_loop.run_until_complete(self.writer.write(exps))

        # 4. The trainer's batch, from the buffer (on-policy: everything written this step). Without a
        #    trainer-side advantage the update reads only these columns (and no group index).
        batch = self.event_loop.run_until_complete(
            self.reader.read_batch(
                pad_token_id=self.tokenizer.pad_token_id,
                fields=None if in_trainer else ("input_ids", "action_mask", "advantages"),
                group_levels=levels,
            )
        )
        self._trim_buffer()
        if len(batch) == 0:
            raise RuntimeError(
                f"step {step}: no experiences reached the buffer on rank {self.rank} (every response was "
                "filtered); check the reward functions, trinity_process_experiences hooks and std_threshold"
            )
        batch = batch.to(acc.device)
        ids, P = batch.input_ids.long(), batch.max_prompt_length
        attn = None if int(batch.prompt_lengths.min()) == P else batch.attention_mask
        mask = batch.action_mask if batch.action_mask is not None else batch.response_mask
        if self.need_old_pass:
            with prof.section("old_logprob"), torch.no_grad():
                batch.extras["old_logprobs"] = response_logprobs(self.policy, ids, attn, P, False)[0]
        if self.ref is not None:
            with prof.section("reference"), torch.no_grad():
                batch.extras["ref_logprobs"] = response_logprobs(self.ref, ids, attn, P, False)[0]
        if in_trainer:
            if comps.kl_penalty is not None:
                old = batch.extras.get("old_logprobs")
                if old is None:
                    with torch.no_grad():
                        old = response_logprobs(self.policy, ids, attn, P, False)[0]
                scores, kl_metrics = comps.kl_penalty.apply_kl_penalty_to_reward(
                    batch.token_level_scores(), old, batch.extras["ref_logprobs"], mask
                )
                batch.token_level_reward = scores
                metrics.update({f"kl_penalty/{k}": v for k, v in kl_metrics.items()})
            advantage: Any = comps.advantage
            batch, adv_metrics = advantage(batch)
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

        # 5. Update: epochs x minibatches optimizer steps, each over micro-batches.
        columns = {
            "action_mask": mask,
            "advantages": batch.advantages.to(torch.float32),
            **{k[:-1] if k.endswith("logprobs") else k: v for k, v in batch.extras.items()},
        }
        n = len(batch)
        metrics.update(self.update(ids, attn, P, columns, n))

        # 6. Metrics: one reduction over ranks, one host transfer.
        metrics["reward/mean"] = torch.nanmean(batch.rewards)
        metrics["reward/std"] = (
            batch.rewards[batch.has_reward].std(correction=0) if n > 1 else torch.zeros(())
        )
        metrics["response/length"] = batch.response_lengths.double().mean()
        metrics["response/truncated"] = rollout.truncated.double().mean()
        out = self._reduce(metrics)
        out["lr"] = float(self.scheduler.get_last_lr()[0])
        out["step"] = float(step + 1)
        return out

    def offline_step(self, step: int) -> dict[str, float]:
        """Run step ``step`` (0-based) of mode ``train``; return its metrics (gathered over ranks).

        Stored experiences replace the rollout: no generation, rewards or advantages are computed.
        """
        prof, acc, data = self.profiler, self.acc, self.data
        assert data is not None  # mode train always loads its data
        metrics: dict[str, Tensor] = {}

        # 1. Batch: this rank's items of the step; a DPO pair is two adjacent rows, chosen first.
        exps = data.step_rows(step, self.rank)
        batch = ExperienceBatch.from_experiences(exps, pad_token_id=self.tokenizer.pad_token_id).to(
            acc.device
        )
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
                columns["ref_logprob"] = response_logprobs(self.ref, ids, attn, P, False)[0]

        # 3. Update: one optimizer step over micro-batches (global normalizers, as in mode both).
        metrics.update(self.update(ids, attn, P, columns, len(batch)))

        # 4. Metrics: one reduction over ranks, one host transfer.
        if data.has_rewards:
            metrics["reward/mean"] = torch.nanmean(batch.rewards)
        metrics["response/length"] = batch.response_lengths.double().mean()
        out = self._reduce(metrics)
        out["lr"] = float(self.scheduler.get_last_lr()[0])
        out["data/epoch"] = (step + 1) / data.steps_per_epoch
        out["step"] = float(step + 1)
        return out

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
        for _epoch in range(tcfg.epochs):
            for rows in _row_ranges(n, tcfg.minibatches):
                loss_terms += self.backward_minibatch(ids, attn, P, columns, rows)
                with prof.section("optimizer"):
                    if tcfg.grad_clip is not None:
                        grad_norms.append(acc.clip_grad_norm_(self.model.parameters(), tcfg.grad_clip))
                    self.optimizer.step()
                    self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        for k in {k for t in loss_terms for k in t}:
            metrics[k] = torch.stack([t[k].detach().to(torch.float64) for t in loss_terms if k in t]).mean()
        if grad_norms:
            metrics["actor/grad_norm"] = torch.stack(
                [g.detach().to(torch.float64) for g in grad_norms]
            ).mean()
        if self.components.kl_loss is not None:
            metrics["actor/kl_coef"] = self.components.kl_loss.update_kl_coef()
        return metrics

    # ------------------------------------------------------------------ helpers of the step

    def _decode(self, rollout: Rollout) -> tuple[list[str], list[tuple[int, ...]]]:
        # Completion text and ids = response tokens before EOS, special tokens spelled out (a stray <pad>
        # never matches an answer).
        ends = (rollout.response_lengths - (~rollout.truncated).long()).tolist()
        ids = rollout.response_ids.tolist()
        rows = [tuple(row[:e]) for row, e in zip(ids, ends, strict=True)]
        # The G responses to a prompt often repeat: each distinct response is decoded once.
        distinct = list(dict.fromkeys(rows))
        text = dict(zip(distinct, self.tokenizer.batch_decode([list(r) for r in distinct]), strict=True))
        return [text[row] for row in rows], rows

    def _trim_buffer(self) -> None:
        # The memory buffer keeps every item it was given; an on-policy trainer has read them all.
        if isinstance(self.reader, MemoryReader) and len(self.reader) == 0:
            self.reader.discard_read()

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
        micro = self._micro_batches(rows)
        scale = global_normalizers([mask[m] for m in micro])
        terms_list = []
        for i, m in enumerate(micro):
            ctx = contextlib.nullcontext() if i == len(micro) - 1 else acc.no_sync(self.model)
            with self.profiler.section("forward_backward"), ctx:
                sub_attn = None if attn is None else attn[m]
                loss, terms = self._loss(ids[m], sub_attn, P, {k: v[m] for k, v in columns.items()}, scale)
                acc.backward(loss)
            terms_list.append(terms)
        return terms_list

    def _micro_batches(self, rows: slice | Tensor) -> list[slice | Tensor]:
        size = self.config.trainer.micro_batch_size
        if isinstance(rows, slice):
            if size is None or rows.stop - rows.start <= size:
                return [rows]
            return [slice(i, min(i + size, rows.stop)) for i in range(rows.start, rows.stop, size)]
        if size is None or rows.numel() <= size:
            return [rows]
        return [*torch.split(rows, size)]

    def _loss(
        self, ids: Tensor, attn: Tensor | None, P: int, cols: dict[str, Tensor], scale: LossScale
    ) -> tuple[Tensor, dict[str, Tensor]]:
        comps, mode = self.components, self.config.algorithm.loss_agg_mode
        logprob, entropy = response_logprobs(self.model, ids, attn, P, self.use_entropy)
        mask = cols["action_mask"]
        if "old_logprob" not in cols:  # one update per step: the sampling policy is the current one
            cols["old_logprob"] = logprob.detach()
        loss_fn = comps.policy_loss
        kwargs = {key: cols[loss_fn.mapper.to_trinity(key)] for key in loss_fn.select_keys}
        pg_loss, pg_metrics = loss_fn(logprob, **kwargs, loss_scale=scale, loss_agg_mode=mode)
        total = pg_loss
        terms = {f"actor/{k}": v for k, v in pg_metrics.items() if isinstance(v, Tensor)}
        terms["actor/pg_loss"] = pg_loss.detach()
        if comps.kl_loss is not None:
            kl_loss, kl_metrics = comps.kl_loss.calculate_kl_loss(
                logprob,
                cols["ref_logprob"],
                mask,
                loss_agg_mode=mode,
                old_logprob=cols["old_logprob"],
                loss_scale=scale,
            )
            total = total + kl_loss
            terms.update({f"actor/{k}": v for k, v in kl_metrics.items() if k != "kl_coef"})
        if comps.entropy is not None and entropy is not None:
            ent_loss, ent_metrics = comps.entropy(entropy, mask, loss_scale=scale, loss_agg_mode=mode)
            total = total - ent_loss
            terms.update({f"actor/{k}": v for k, v in ent_metrics.items()})
        terms["actor/loss"] = total.detach()
        return total, terms

    def _reduce(self, metrics: dict[str, Tensor]) -> dict[str, float]:
        keys = sorted(metrics)
        stacked = torch.stack(
            [torch.as_tensor(metrics[k]).to(self.acc.device, torch.float64).reshape(()) for k in keys]
        )
        if self.acc.num_processes > 1:
            stacked = self.acc.reduce(stacked, reduction="mean")
        return dict(zip(keys, stacked.tolist(), strict=True))

    # ------------------------------------------------------------------ the run

    def select_keys_check(self) -> None:
        """Fail before training when the policy loss asks for a column the trainer cannot provide."""
        provided = {"old_logprob", "action_mask", *(["ref_logprob"] if self.ref is not None else [])}
        if self.data is None:
            provided.add("advantages")
        else:
            provided.update(self.data.pair_columns(2, torch.device("cpu")))
            if self.data.has_advantages:
                provided.add("advantages")
        loss_fn = self.components.policy_loss
        missing = [k for k in loss_fn.select_keys if loss_fn.mapper.to_trinity(k) not in provided]
        if missing:
            raise ConfigError(
                [
                    ConfigProblem(
                        "algorithm.policy_loss_fn",
                        f"policy loss {self.config.algorithm.policy_loss_fn!r} needs {missing}, which "
                        f"trinity train does not provide (it provides {sorted(provided)})",
                        hint="in mode train, store advantages in the experiences or pick another loss"
                        if self.data is not None
                        else None,
                    )
                ]
            )

    def train(self) -> TrainResult:
        """Run the remaining steps, log, checkpoint, evaluate; return the summary."""
        from tqdm import tqdm

        tcfg = self.config.trainer
        total = self.total_steps
        bar = tqdm(
            total=total,
            initial=self.start_step,
            unit="step",
            disable=not (tcfg.progress and self.is_main),
            mininterval=0.2,
            dynamic_ncols=True,
        )
        metrics_path = self.run_dir / "metrics.jsonl"
        log = metrics_path.open("a", encoding="utf-8") if self.is_main else None
        t0 = time.perf_counter()
        try:
            for step in range(self.start_step, total):
                t_step = time.perf_counter()
                out = self.offline_step(step) if self.offline else self.step(step)
                if self.profiler.enabled:
                    self.profiler.totals["step"] += time.perf_counter() - t_step
                    self.profiler.steps += 1
                out["time/step_s"] = time.perf_counter() - t_step
                self.history.append(out)
                if log is not None:
                    log.write(json.dumps(out) + "\n")
                    log.flush()
                self.acc.log(out, step=step + 1)
                every = tcfg.checkpoint_every
                if (every and (step + 1) % every == 0) or step + 1 == total:
                    self.save_checkpoint(step + 1)
                notify_metrics(self.pm, step + 1, out)
                reward = out.get("reward/mean")  # none in mode train on experiences without rewards
                shown = "" if reward is None or math.isnan(reward) else f"reward {reward:.3f} | "
                bar.set_postfix_str(f"{shown}loss {out['actor/loss']:+.4f}", refresh=False)
                bar.update()
        finally:
            bar.close()
            if log is not None:
                log.close()
        wall = time.perf_counter() - t0
        return self._finish(wall)

    def _finish(self, wall: float) -> TrainResult:
        eval_acc = self.evaluate()
        curve = self.reward_curve()
        result = TrainResult(
            run_dir=self.run_dir,
            steps=self.total_steps,
            reward_curve=curve,
            eval_accuracy=eval_acc,
            wall_seconds=wall,
            profile=self.profiler.report() if self.profiler.enabled else None,
            final_reward=self.history[-1].get("reward/mean", math.nan) if self.history else math.nan,
            history=self.history,
            loss_curve=self.reward_curve(key="actor/loss"),
        )
        if self.is_main:
            summary = {
                "mode": self.config.mode,
                "steps": result.steps,
                "wall_seconds": wall,
                "reward_curve": curve,
                "loss_curve": result.loss_curve,
                "eval_greedy_accuracy": eval_acc,
                "profile": result.profile,
            }
            ckpt.write_json_atomic(self.run_dir / "summary.json", summary)
            # A model that from_pretrained loads, next to the checkpoints (trinity export does the same
            # for any checkpoint).
            save_policy(
                self.acc.unwrap_model(self.policy),
                self.tokenizer,
                self.run_dir / "model",
                max_new_tokens=self.max_new_tokens,
                overwrite=True,
            )
            from trinity_core.train.plot import plot_run

            plot_run(self.run_dir / "metrics.jsonl", self.run_dir / "plot.png")
        self.acc.end_training()
        return result

    def reward_curve(self, points: int = 9, key: str = "reward/mean") -> list[tuple[int, float]]:
        """Mean of metric ``key`` over windows of the run's history at ``points`` evenly spaced steps.

        Empty when no step logged ``key`` (mode ``train`` on experiences without rewards).
        """
        rows = [r for r in (self._read_metrics() if self.is_main else self.history) if key in r]
        if not rows:
            return []
        window = max(len(rows) // (points * 2), 1)
        picks = sorted({round(i * (len(rows) - 1) / (points - 1)) for i in range(points)})
        curve = []
        for p in picks:
            lo = max(p - window + 1, 0)
            values = [r[key] for r in rows[lo : p + 1]]
            curve.append((int(rows[p]["step"]), sum(values) / len(values)))
        return curve

    def _read_metrics(self) -> list[dict[str, float]]:
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return self.history
        return ckpt.read_metrics(path)

    @torch.no_grad()
    def evaluate(self) -> float | None:
        """Greedy accuracy (mean combined reward) on the task's held-out rows (main process only)."""
        n = self.config.tasks.eval_size
        if n == 0 or not self.is_main:
            return None
        rows = self.task.eval_rows(n, self.config.trainer.seed)
        prompts = [r["prompt"] for r in rows]
        rollout = generate(
            self.policy,
            self.tokenizer,
            prompts,
            repeat=1,
            max_new_tokens=self.max_new_tokens,
            temperature=1.0,
            greedy=True,
        )
        completions, completion_ids = self._decode(rollout)
        fields = {k: [r[k] for r in rows] for k in self.task.fields if k != "prompt"}
        fields["truncated"] = rollout.truncated.tolist()
        rewards = combine_rewards(
            self.reward_fns,
            self.reward_weights,
            self.reward_names,
            prompts,
            completions,
            fields,
            completion_ids=completion_ids,
        )
        scored = [r for r in rewards if r is not None]
        return sum(scored) / len(scored) if scored else None

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self, step: int) -> None:
        """Write the checkpoint of ``step`` atomically (every rank writes its RNG state)."""
        from safetensors.torch import save_file

        root = self.run_dir / "checkpoints"
        tmp = root / f".tmp-{ckpt.step_dir_name(step)}"
        if self.is_main:
            ckpt.begin(root, step)
        self.acc.wait_for_everyone()
        ckpt.save_rng_state(tmp / f"rng-rank{self.rank}.safetensors", self.task_gen)
        # The task's position in its data (a dataset's shuffled order and epoch); each rank has its own.
        ckpt.write_json_atomic(tmp / f"task-rank{self.rank}.json", self.task.state_dict())
        if self.is_main:
            state = {k: v.detach().cpu().contiguous() for k, v in self.policy.state_dict().items()}
            if getattr(self.policy.config, "tie_word_embeddings", False):
                state.pop("lm_head.weight", None)
            save_file(state, str(tmp / "model.safetensors"))
            tensors, structure = ckpt.optimizer_state_tensors(self.optimizer.state_dict())
            save_file(tensors, str(tmp / "optimizer.safetensors"))
            (tmp / "optimizer.json").write_text(json.dumps(structure), encoding="utf-8")
            meta = {
                "step": step,
                "world_size": self.acc.num_processes,
                "scheduler": self.scheduler.state_dict(),
                "buffer": self.reader.state_dict(),
                "python_rng": ckpt.python_rng_state(),
            }
            (tmp / "state.json").write_text(json.dumps(meta), encoding="utf-8")
        self.acc.wait_for_everyone()
        if self.is_main:
            ckpt.commit(root, tmp, step, self.config.trainer.keep_checkpoints)
        self.acc.wait_for_everyone()

    def _load_checkpoint(self) -> None:
        from safetensors.torch import load_file

        path = ckpt.latest_checkpoint(self.run_dir)
        if path is None:
            raise ckpt.CheckpointError(
                f"--resume {self.run_dir}: no complete checkpoint in {self.run_dir / 'checkpoints'}; start a "
                "new run (--overwrite) instead"
            )
        meta = json.loads((path / "state.json").read_text(encoding="utf-8"))
        if meta["world_size"] != self.acc.num_processes:
            raise ckpt.CheckpointError(
                f"{path} was written by {meta['world_size']} processes, this run has "
                f"{self.acc.num_processes}; "
                "resume with the same number of processes"
            )
        state = load_file(str(path / "model.safetensors"))
        missing, unexpected = self.policy.load_state_dict(state, strict=False)
        if unexpected or [k for k in missing if k != "lm_head.weight"]:
            raise ckpt.CheckpointError(
                f"{path}: model weights do not fit the model ({missing}, {unexpected})"
            )
        structure = json.loads((path / "optimizer.json").read_text(encoding="utf-8"))
        opt_state = ckpt.load_optimizer_state(load_file(str(path / "optimizer.safetensors")), structure)
        self.optimizer.load_state_dict(opt_state)
        self.scheduler.load_state_dict(meta["scheduler"])
        ckpt.set_python_rng_state(meta["python_rng"])
        ckpt.load_rng_state(path / f"rng-rank{self.rank}.safetensors", self.task_gen)
        task_state = path / f"task-rank{self.rank}.json"
        if task_state.exists():  # checkpoints written before tasks saved their position have none
            try:
                self.task.load_state_dict(json.loads(task_state.read_text(encoding="utf-8")))
            except TaskDataError as exc:
                raise ckpt.CheckpointError(f"{path}: {exc}") from exc
        self.start_step = int(meta["step"])
        if self.is_main:  # drop metrics of steps after the checkpoint: they are replayed
            rows = self._read_metrics()
            kept = [r for r in rows if r["step"] <= self.start_step]
            tmp = self.run_dir / ".metrics.jsonl.tmp"
            tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
            os.replace(tmp, self.run_dir / "metrics.jsonl")
        self.acc.wait_for_everyone()
