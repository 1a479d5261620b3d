"""The learner: buffer -> batch -> passes -> update -> metrics. It owns the weights.

Step ``s`` of mode ``both`` (:meth:`Learner.step`)::

    batch     = buffer.read_batch()                          # what the explorer wrote for step s
    batch     = rows of batch made by a policy at most max_staleness versions old   (staleness.py)
    batch     = batch + task groups drawn from the replay buffer (buffer.replay)    (replay_step.py)
    batch     = balanced over ranks; MIX's expert rows appended                      (balance, expert)
    for pass in passes: pass(batch)   # old / reference / teacher log-probs, critic values, KL penalty,
                                      # trainer-side advantages                      (passes.py)
    critic.update(returns)                                   # presets with use_critic (critic.py)
    for epoch, minibatch: for micro-batch:                   # PPO-style update        (update.py)
        loss = policy_loss + kl_loss - entropy_loss   (global normalizers: LossScale)
        accelerator.backward(loss)
    clip, optimizer.step(), scheduler.step()                 # the policy version is now s + 1

In mode ``train`` (:meth:`Learner.offline_step`) the batch is ``data.batch_size`` stored items (DPO
pairs split into adjacent chosen/rejected rows, :mod:`trinity_core.train.data.stored`) and the same update
follows. Metrics are 0-d tensors; :meth:`Learner.reduce` reduces them over ranks once per step.

"""

from __future__ import annotations

import asyncio
from typing import Any

import torch
from torch import Tensor

from trinity_core.batch import GROUP_LEVELS, ExperienceBatch
from trinity_core.buffer import BufferReader, MemoryReader
from trinity_core.components.faults import component_label, raise_on_non_finite
from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig
from trinity_core.lm.distribution import SamplingDistribution
from trinity_core.train.data.stored import StoredExperiences
from trinity_core.train.learner.balance import balance_batch, balances
from trinity_core.train.learner.critic import build_critic
from trinity_core.train.learner.expert import ExpertData
from trinity_core.train.learner.passes import StepInputs, build_passes
from trinity_core.train.learner.replay_step import build_replay, mix_replay
from trinity_core.train.learner.staleness import keep_fresh
from trinity_core.train.learner.teacher import load_teacher
from trinity_core.train.learner.update import PolicyUpdate
from trinity_core.train.models.policy import needs_train_mode
from trinity_core.train.report.profile import StepProfiler

__all__ = ["Learner", "batch_metrics", "check_loss_inputs", "sampled_distribution"]


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
        eos_token_id: int | None = None,
    ) -> None:
        """Hold the parts of the step and build its critic, teacher and passes."""
        tcfg = config.trainer
        self.distribution = sampled_distribution(config, eos_token_id)
        self.acc, self.components, self.profiler, self.event_loop = (
            accelerator,
            components,
            profiler,
            event_loop,
        )
        self.ref, self.reader, self.data, self.expert = ref, reader, data, expert
        self.pad_token_id, self.rank = pad_token_id, accelerator.process_index
        self.max_staleness = config.synchronizer.max_staleness
        self.balance = balances(config, components.preset, accelerator.num_processes)
        self.updater = PolicyUpdate(
            tcfg,
            config.algorithm.loss_agg_mode,
            accelerator,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            components=components,
            profiler=profiler,
            train_mode=needs_train_mode(config),
            distribution=self.distribution,
        )
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.policy = self.updater.policy
        self.critic = build_critic(config, accelerator, self.policy, components, profiler)
        self.passes = build_passes(
            components,
            policy=self.policy,
            ref=ref,
            critic=self.critic,
            teacher=load_teacher(config, self.policy, accelerator.device),
            old_pass=tcfg.epochs * tcfg.minibatches > 1,
            profiler=profiler,
            share_prompts=tcfg.share_prompts,
        )
        self.version = 0
        self._strategy = config.algorithm.add_strategy or config.algorithm.advantage_fn
        self.replay = build_replay(config)

    # ------------------------------------------------------------------ mode both

    def step(self, step: int) -> dict[str, Tensor]:
        """Train on the experiences the explorer wrote for step ``step`` (0-based); return its metrics."""
        metrics: dict[str, Tensor] = {}
        # 1. What the explorer wrote for this step, without the rows too stale to train on.
        batch, staleness = keep_fresh(self.read_batch(step), self.version, self.max_staleness)
        metrics.update(staleness)
        if batch is None:  # every row too old: no update this step, the version stays
            return metrics
        if self.replay is not None:  # stored task groups trained on again
            batch, replayed = mix_replay(self.replay, batch, self.version)
            metrics.update(replayed)
        # 2. About the same tokens on every rank (whole groups move), then MIX's expert rows.
        if self.balance:
            levels = GROUP_LEVELS if self.components.advantage_in_trainer else ()
            batch, shares = balance_batch(
                batch, self.acc, pad_token_id=self.pad_token_id, group_levels=levels
            )
            metrics.update(shares)
        batch = batch.to(self.acc.device)
        if self.expert is not None:
            batch = self.expert.mix(batch, step)
        # 3. The passes: no-grad log-probs, critic values, KL penalty, trainer-side advantages.
        inputs = StepInputs.of(batch, self.distribution)
        for run_pass in self.passes:
            metrics.update(run_pass(inputs, step))
        # 4. The update (the critic's, then the policy's), and the metrics of the rows trained on.
        metrics.update(self.train_on(inputs, step))
        metrics.update(batch_metrics(inputs.batch))
        return metrics

    def read_batch(self, step: int) -> ExperienceBatch:
        """The buffer's batch for step ``step`` (on-policy: everything written for it).

        Without a trainer-side advantage or replay the update reads only the columns it trains on (and
        no group index).
        """
        whole = self.components.advantage_in_trainer or self.replay is not None  # replay stores groups
        batch = self.event_loop.run_until_complete(
            self.reader.read_batch(
                pad_token_id=self.pad_token_id,
                fields=None if whole else ("input_ids", "action_mask", "advantages", "logprobs"),
                group_levels=GROUP_LEVELS if whole else (),
            )
        )
        self.trim_buffer()
        if len(batch) == 0:
            raise RuntimeError(
                f"step {step}: no experiences reached the buffer on rank {self.rank} (every response was "
                "filtered); check the reward functions, trinity_process_experiences hooks and std_threshold"
            )
        return batch

    def train_on(self, inputs: StepInputs, step: int) -> dict[str, Tensor]:
        """The critic's update and the policy's (the policy is frozen while the critic warms up)."""
        batch = inputs.batch
        if batch.advantages is None:
            raise RuntimeError(
                f"step {step}: the batch has no advantages; the add strategy / advantage function "
                f"{self._strategy!r} set none"
            )
        columns = {
            "action_mask": inputs.mask,
            "advantages": batch.advantages.to(torch.float32),
            **{k[:-1] if k.endswith("logprobs") else k: v for k, v in batch.extras.items()},
        }
        if batch.logprobs is not None:  # the explorer's, for off-policy corrections (explorer/behaviour.py)
            columns["rollout_logprob"] = batch.logprobs.to(torch.float32)
        metrics: dict[str, Tensor] = {}
        ids, attn, P, n = inputs.ids, inputs.attn, inputs.prompt_width, len(batch)
        if self.critic is not None:
            assert batch.returns is not None  # a trainer-side advantage function sets returns
            metrics.update(self.critic.update(ids, attn, P, {**columns, "returns": batch.returns}, n))
            if self.critic.warming_up(step):
                self.version += 1
                return metrics
        metrics.update(self.update(ids, attn, P, columns, n))
        return metrics

    # ------------------------------------------------------------------ mode train

    def offline_step(self, step: int) -> dict[str, Tensor]:
        """Run step ``step`` (0-based) of mode ``train`` on stored experiences; return its metrics.

        Stored experiences replace the rollout: no generation, rewards or advantages are computed.
        """
        data = self.data
        assert data is not None  # mode train always loads its data
        # 1. This rank's items of the step; a DPO pair is two adjacent rows, chosen first.
        exps = data.step_rows(step, self.rank)
        batch = ExperienceBatch.from_experiences(exps, pad_token_id=self.pad_token_id).to(self.acc.device)
        inputs = StepInputs.of(batch)
        columns: dict[str, Tensor] = {
            "action_mask": inputs.mask,
            **data.pair_columns(len(batch), self.acc.device),
        }
        if batch.logprobs is not None:  # the behaviour policy's log-probs, when stored
            columns["old_logprob"] = batch.logprobs.to(torch.float32)
        if batch.advantages is not None:
            columns["advantages"] = batch.advantages.to(torch.float32)
        # 2. Reference pass: π_ref log-probs for the DPO loss and KL losses.
        if self.ref is not None:
            with self.profiler.section("reference"), torch.no_grad():
                columns["ref_logprob"] = inputs.logprobs(self.ref, self.updater.trainer.share_prompts)
        # 3. One optimizer step over micro-batches (global normalizers, as in mode both).
        metrics = self.update(inputs.ids, inputs.attn, inputs.prompt_width, columns, len(batch))
        if data.has_rewards:
            metrics["reward/mean"] = torch.nanmean(batch.rewards)
        metrics["response/length"] = batch.response_lengths.double().mean()
        return metrics

    # ------------------------------------------------------------------ the update

    def update(
        self, ids: Tensor, attn: Tensor | None, P: int, columns: dict[str, Tensor], n: int
    ) -> dict[str, Tensor]:
        """The policy update on the ``n`` rows (:class:`~trinity_core.train.learner.update.PolicyUpdate`);
        the policy's version is one more after it."""
        metrics = self.updater(ids, attn, P, columns, n)
        self.version += 1
        return metrics

    def backward_minibatch(
        self, ids: Tensor, attn: Tensor | None, P: int, columns: dict[str, Tensor], rows: slice | Tensor
    ) -> list[dict[str, Tensor]]:
        """Accumulate one optimizer step's gradient over the rows ``rows`` (see
        :meth:`~trinity_core.train.learner.update.PolicyUpdate.backward_minibatch`)."""
        return self.updater.backward_minibatch(ids, attn, P, columns, rows)

    # ------------------------------------------------------------------ helpers

    def reduce(self, metrics: dict[str, Tensor], step: int = -1) -> dict[str, float]:
        """The step's metrics averaged over ranks: one reduction, one host transfer.

        Raises:
            ComponentFault: a component produced a NaN or infinite loss or advantage this step (its
                ``_finite/<kind>`` flag, :mod:`trinity_core.components.faults`), before anything of the
                step is recorded or checkpointed.
        """
        keys = sorted(metrics)
        stacked = torch.stack(
            [torch.as_tensor(metrics[k]).to(self.acc.device, torch.float64).reshape(()) for k in keys]
        )
        if self.acc.num_processes > 1:
            stacked = self.acc.reduce(stacked, reduction="mean")
        out = dict(zip(keys, stacked.tolist(), strict=True))
        raise_on_non_finite(out, self._labels(), step)
        return out

    def _labels(self) -> dict[str, str]:
        """``kind -> component label`` of the run's components (for fault messages)."""
        comps = self.components
        roles = {
            "policy_loss": comps.policy_loss,
            "kl_fn": comps.kl_loss or comps.kl_penalty,
            "entropy_loss": comps.entropy,
            "advantage_fn": comps.advantage,
            "add_strategy": comps.add_strategy,
            "value_loss": getattr(comps, "value_loss", None),
        }
        return {kind: component_label(kind, c) for kind, c in roles.items() if c is not None}

    def trim_buffer(self) -> None:
        """Free what was read: the memory buffer keeps every item it was given, and an on-policy learner
        has read them all."""
        if isinstance(self.reader, MemoryReader) and len(self.reader) == 0:
            self.reader.discard_read()


def sampled_distribution(config: ResolvedConfig, eos_token_id: int | None) -> SamplingDistribution | None:
    """The distribution the run's rollouts are drawn from (``rollout`` settings); None in mode ``train``,
    whose stored rows were not sampled by this run (their log-probs are of ``softmax(logits)``)."""
    if config.mode == "train":
        return None
    rcfg = config.rollout
    return SamplingDistribution(
        temperature=rcfg.temperature,
        top_k=rcfg.top_k,
        top_p=rcfg.top_p,
        min_new_tokens=rcfg.min_new_tokens,
        eos_token_id=eos_token_id,
    )


def batch_metrics(batch: ExperienceBatch) -> dict[str, Tensor]:
    """The rewards, lengths and counts of the rows a step trained on."""
    n = len(batch)
    return {
        "reward/mean": torch.nanmean(batch.rewards),
        "reward/std": batch.rewards[batch.has_reward].std(correction=0) if n > 1 else torch.zeros(()),
        "response/length": batch.response_lengths.double().mean(),
        "learner/experiences": torch.tensor(float(n)),
        "learner/tokens": batch.response_lengths.double().sum(),
    }
