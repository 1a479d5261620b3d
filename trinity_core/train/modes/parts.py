"""The parts of a run, built from its config before the first step, in the order errors are cheapest:

1. :func:`check_run`: the launch fits the mode (processes, explorers and their devices, prompts per rank,
   mode ``train``'s update);
2. :class:`RunData`: task, reward functions, the algorithm's components, the in-process buffer and, in
   mode ``train``, the stored experiences (every problem here is raised before a model loads);
3. :class:`PolicyParts`: the policy and tokenizer, prompt rendering, the reference model, the optimizer
   and its schedule (prepared by Accelerate), MIX's expert rows;
4. :func:`build_learner` and :func:`build_explorer` from those.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import torch

from trinity_core.buffer import BufferReader, BufferWriter, make_buffer
from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig
from trinity_core.train.build import Components, build_components, build_reference
from trinity_core.train.data.prompts import PromptRenderer, build_prompter
from trinity_core.train.data.rewards import RewardFn, build_rewards
from trinity_core.train.data.stored import (
    StoredExperiences,
    check_offline_trainer,
    check_vocabulary,
    load_stored_experiences,
)
from trinity_core.train.data.tasks import Task, build_task
from trinity_core.train.explorer.explorer import Explorer
from trinity_core.train.learner.expert import ExpertData, load_expert_data
from trinity_core.train.learner.learner import Learner, check_loss_inputs
from trinity_core.train.learner.optimizer import lr_scheduler, make_optimizer
from trinity_core.train.models.dtype import weights_dtype
from trinity_core.train.models.policy import frozen_copy, load_policy, prepare_policy
from trinity_core.train.modes.layout import Layout, check_explorers
from trinity_core.train.report.profile import StepProfiler

__all__ = ["PolicyParts", "RunData", "build_explorer", "build_learner", "check_run"]


def check_run(config: ResolvedConfig, layout: Layout, device: torch.device) -> None:
    """Refuse a launch the run's mode cannot use (see the messages), before anything is built."""
    cpu = device.type != "cuda"
    cuda_devices = 0 if cpu else torch.cuda.device_count()
    check_explorers(config, layout, cpu=cpu, cuda_devices=cuda_devices)
    world = layout.world
    if config.mode == "train":
        check_offline_trainer(config)
    elif config.rollout.prompts_per_step % world:
        raise ConfigError(
            [
                ConfigProblem(
                    "rollout.prompts_per_step",
                    f"{config.rollout.prompts_per_step} prompts cannot be split over {world} processes",
                    hint=f"use a multiple of {world}",
                )
            ]
        )


@dataclass
class RunData:
    """What the run learns from and the components that turn it into updates."""

    task: Task
    rewards: tuple[list[str], list[RewardFn], list[float]]
    components: Components
    writer: BufferWriter
    reader: BufferReader
    stored: StoredExperiences | None
    """Mode ``train``'s stored experiences (None in the modes that sample)."""

    @classmethod
    def load(cls, config: ResolvedConfig, world: int) -> RunData:
        """Build them; every problem is a :class:`~trinity_core.config.ConfigError`."""
        offline = config.mode == "train"
        task = build_task(config)
        rewards = build_rewards(config, task)
        writer, reader = make_buffer("memory")
        components = build_components(config, writer, offline=offline)
        stored = None
        if offline:
            stored = load_stored_experiences(config, world, schema=str(components.preset.schema))
            micro = config.trainer.micro_batch_size
            if stored.paired and micro is not None and micro % 2:
                problem = ConfigProblem(
                    "trainer.micro_batch_size",
                    f"{micro} rows would cut a DPO pair (two rows) in half",
                    hint="use an even micro_batch_size",
                )
                raise ConfigError([problem])
        return cls(task, rewards, components, writer, reader, stored)

    def total_steps(self, config: ResolvedConfig) -> int:
        """``trainer.total_steps``, or fewer when mode ``train``'s ``data.epochs`` end first."""
        steps = config.trainer.total_steps
        return self.stored.total_steps(steps, config.data.epochs) if self.stored else steps


@dataclass
class PolicyParts:
    """The policy and what trains or prompts it. ``model`` and ``optimizer`` are prepared by Accelerate."""

    model: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    tokenizer: Any
    prompter: PromptRenderer
    ref: Any | None
    expert: ExpertData | None

    @classmethod
    def load(cls, config: ResolvedConfig, accelerator: Any, data: RunData, total_steps: int) -> PolicyParts:
        """Load the policy (the same initial weights on every rank) and build the rest around it."""
        tcfg = config.trainer
        model, tokenizer = load_policy(
            config.model.model_path,
            config.model.tokenizer_path,
            config.model.config,
            data.task.alphabet(),
            seed=tcfg.seed,
            dtype=weights_dtype(config),  # model.dtype: a LoRA run's frozen base in bf16
        )
        prompter = build_prompter(tokenizer, config.model.chat_template, data.task)
        model = prepare_policy(model, config)  # gradient checkpointing, LoRA
        if data.stored is not None:
            check_vocabulary(data.stored, model)
        ref = build_reference(config, data.components.policy_loss, model)
        optimizer = make_optimizer(model, tcfg)
        scheduler = lr_scheduler(optimizer, tcfg.lr_scheduler, tcfg.warmup_steps, total_steps)
        accelerator.free_memory()  # what save_state writes is this run's: drop an earlier one's models
        model, optimizer = accelerator.prepare(model, optimizer)
        ref = ref.to(accelerator.device) if ref is not None else None
        expert = load_expert_data(config, tokenizer, accelerator.process_index)  # mix, mix_chord
        check_loss_inputs(config, data.components, ref is not None, data.stored, expert)
        return cls(model, optimizer, scheduler, tokenizer, prompter, ref, expert)


def build_learner(
    config: ResolvedConfig,
    accelerator: Any,
    data: RunData,
    policy: PolicyParts,
    profiler: StepProfiler,
    event_loop: asyncio.AbstractEventLoop,
) -> Learner:
    """The run's learner: the prepared policy, its reference and expert rows, reading the run's buffer."""
    return Learner(
        config,
        accelerator,
        model=policy.model,
        optimizer=policy.optimizer,
        scheduler=policy.scheduler,
        ref=policy.ref,
        components=data.components,
        reader=data.reader,
        pad_token_id=policy.tokenizer.pad_token_id,
        data=data.stored,
        profiler=profiler,
        event_loop=event_loop,
        expert=policy.expert,
        eos_token_id=policy.tokenizer.eos_token_id,
    )


def build_explorer(
    config: ResolvedConfig,
    accelerator: Any,
    data: RunData,
    policy: PolicyParts,
    sampler: Any,
    *,
    pm: Any,
    task_gen: torch.Generator,
    profiler: StepProfiler,
    event_loop: asyncio.AbstractEventLoop,
) -> Explorer:
    """The explorer of this process, sampling with ``sampler`` (the learner's policy in lock step, a
    frozen copy of it when it runs in a thread ahead), writing the run's buffer."""
    world = accelerator.num_processes
    return Explorer(
        config,
        rank=accelerator.process_index,
        prompts_per_rank=config.rollout.prompts_per_step // world,
        task=data.task,
        rewards=data.rewards,
        tokenizer=policy.tokenizer,
        policy=sampler,
        components=data.components,
        writer=data.writer,
        pm=pm,
        task_gen=task_gen,
        profiler=profiler,
        event_loop=event_loop,
        prompter=policy.prompter,
    )


def sampling_policy(learner: Learner, copy: bool) -> Any:
    """The model the explorer samples with: the learner's own, or a frozen copy of it (``copy``)."""
    return frozen_copy(learner.policy) if copy else learner.policy
