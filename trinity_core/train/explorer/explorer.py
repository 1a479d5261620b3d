"""The explorer: sample tasks -> rollout -> rewards -> experiences -> hooks -> advantage -> buffer.

Step ``s`` on every rank, in two halves::

    # Explorer.rollout(s): may run in a thread, ahead of the learner (synchronizer.sync_offset)
    rows      = task.sample(prompts_per_step / world_size)                  # tasks
    rollout   = generate(policy, rows, G = algorithm.repeat_times)           # G responses per prompt
    rewards   = Σ_f w_f · f(prompts, completions, **fields)                  # reward functions
    # Explorer.write(explored): in the runner's thread, which owns the buffer
    exps      = Experience(EID(batch=s, task=i, run=j), info={"model_version": v})
    exps      = trinity_process_experiences(exps, s)                         # pluggy stage
    add strategy / pipeline advantage fn -> buffer                           # group advantages

``policy`` is the learner's model in lock step, else the explorer's own copy, which the synchronizer
updates (:meth:`Explorer.load_weights`); ``v`` is the version of those weights.

When no hook implements the pluggy stage, there is no add strategy, and the advantage function runs in
the learner or has an exact columnar path, the experiences of a step are one columnar batch from the
rollout to the update, and the ``Experience`` objects are made only if something reads them
(:mod:`trinity_core.train.explorer.columnar`); the result is the same.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import Tensor

from trinity_core.batch import ExperienceBatch
from trinity_core.buffer import BufferWriter
from trinity_core.components import GroupAdvantage, Metrics
from trinity_core.config import ResolvedConfig
from trinity_core.experience import Experience
from trinity_core.hooks import run_experience_pipeline
from trinity_core.lm.sampling import Rollout, generate
from trinity_core.train.data.prompts import PromptRenderer
from trinity_core.train.data.rewards import combine_rewards, prompt_conversations
from trinity_core.train.explorer.behaviour import attach_behaviour_logprobs, wants_behaviour_logprobs
from trinity_core.train.explorer.columnar import columnar_levels, pipeline_advantage_on_batch
from trinity_core.train.explorer.evaluation import EvalSettings, decode_completions, evaluate_policy
from trinity_core.train.explorer.experiences import rollout_batch, rollout_experiences
from trinity_core.train.explorer.workflow_step import (
    build_workflow,
    explore_episodes,
    outcome_metrics,
    row_rewards,
)
from trinity_core.train.report.profile import StepProfiler

__all__ = ["Explored", "Explorer"]


@dataclass
class Explored:
    """One explorer step's sampled and rewarded responses, before they become experiences."""

    step: int
    rollout: Rollout | None
    rewards: list[float | None]
    model_version: int
    seconds: float
    """Wall time of :meth:`Explorer.rollout` (for the idle fractions)."""
    messages: list[list[dict[str, Any]]] | None = None
    """Per response, the conversation with the sampled answer (chat-templated prompts only)."""
    experiences: list[Experience] | None = None
    """A per-task workflow's experiences (then ``rollout`` is None); see docs/workflows.md."""
    metrics: dict[str, Tensor] = field(default_factory=dict)


class Explorer:
    """Makes the experiences of a step and writes them into the buffer.

    Args:
        config: the resolved run configuration.
        rank: this process's index; ``prompts_per_rank`` prompts are its share of a step.
        task, rewards: the task set and ``(names, functions, weights)`` of the reward functions.
        tokenizer: encodes prompts, decodes completions.
        policy: the model it samples with (the learner's in lock step, else its own copy).
        components: the run's components (add strategy, pipeline-side advantage).
        writer: the buffer the experiences go to.
        pm: the plugin manager (the ``trinity_process_experiences`` stage).
        task_gen: the generator of task sampling (saved in checkpoints).
        event_loop: runs the buffer's coroutines.
        prompter: renders rows into prompt texts (default: the plain ``prompt`` text).
    """

    def __init__(
        self,
        config: ResolvedConfig,
        *,
        rank: int,
        prompts_per_rank: int,
        task: Any,
        rewards: tuple[list[str], list[Any], list[float]],
        tokenizer: Any,
        policy: Any,
        components: Any,
        writer: BufferWriter,
        pm: Any,
        task_gen: torch.Generator,
        profiler: StepProfiler,
        event_loop: asyncio.AbstractEventLoop,
        prompter: PromptRenderer | None = None,
    ) -> None:
        """Hold the parts of a rollout; nothing is computed here."""
        self.config, self.rank, self.prompts_per_rank = config, rank, prompts_per_rank
        self.task, self.tokenizer, self.policy = task, tokenizer, policy
        self.reward_names, self.reward_fns, self.reward_weights = rewards
        self.rewards = rewards
        self.components, self.writer, self.pm = components, writer, pm
        self.behaviour_logprobs = wants_behaviour_logprobs(config, components)
        self.task_gen, self.profiler, self.event_loop = task_gen, profiler, event_loop
        self.group_size = config.algorithm.repeat_times
        self.max_new_tokens = config.rollout.max_new_tokens or task.max_response_tokens()
        self.version = 0
        self.prompter = prompter or PromptRenderer(tokenizer, templated=False)
        # rollout.workflow: None for single_turn (the whole-step rollout below), else its episode runner.
        self.workflow = build_workflow(config, policy, tokenizer, self.max_new_tokens)

    def step(self, step: int) -> dict[str, Tensor]:
        """Make and write the experiences of step ``step`` (0-based); return the explorer's metrics."""
        return self.write(self.rollout(step))

    # ------------------------------------------------------------------ the rollout

    def rollout(self, step: int) -> Explored:
        """Sample the step's tasks, generate ``G`` responses per prompt and reward them."""
        start = time.perf_counter()
        G, rcfg = self.group_size, self.config.rollout

        # 1. Rollout: G responses for each prompt of this rank.
        rows = self.task.sample(self.prompts_per_rank, self.task_gen)
        if self.workflow is not None:  # a per-task workflow: episodes, model calls batched per turn
            with self.profiler.section("generation"):
                outcome = explore_episodes(
                    self.workflow,
                    rows,
                    step=step,
                    task_offset=self.rank * self.prompts_per_rank,
                    repeat_times=G,
                    reward_fn=row_rewards(tuple(self.task.fields), self.rewards, self.task.conversational),
                    model_version=self.version,
                )
            exps = outcome.experiences
            seconds = time.perf_counter() - start
            rewards = [e.reward for e in exps]
            return Explored(
                step,
                None,
                rewards,
                self.version,
                seconds,
                experiences=exps,
                metrics=outcome_metrics(outcome, start),
            )
        prompts = [r["prompt"] for r in rows]
        with self.profiler.section("generation"):
            rollout = generate(
                self.policy,
                self.tokenizer,
                self.prompter.texts(rows),
                repeat=G,
                max_new_tokens=self.max_new_tokens,
                temperature=rcfg.temperature,
                top_p=rcfg.top_p,
                top_k=rcfg.top_k,
                logprobs=self.behaviour_logprobs,  # the log-probs that travel with the experiences
            )

        # 2. Rewards: reward functions on decoded completions (rows repeated G times, prompt-major).
        completions, completion_ids = self.decode(rollout)
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
            conversations=prompt_conversations(self.task, rows, G),
        )
        messages = self.prompter.messages(rows, completions, G)
        return Explored(step, rollout, rewards, self.version, time.perf_counter() - start, messages=messages)

    # ------------------------------------------------------------------ experiences into the buffer

    def write(self, explored: Explored) -> dict[str, Tensor]:
        """Turn a rollout into experiences, run the hook stage and the advantage, write the buffer."""
        comps, step, G = self.components, explored.step, self.group_size
        rollout, rewards, version = explored.rollout, explored.rewards, explored.model_version

        # 3. Experiences with EIDs (batch = step, task = global prompt index, run = response index)
        #    and the sampling policy's version, the pluggy stage, then the preset's add strategy or
        #    pipeline advantage fn into the buffer. When every stage reads columns, the experiences
        #    travel as one columnar batch and are never made one by one.
        base = self.rank * self.prompts_per_rank
        adv_metrics: Metrics = {}
        columnar = columnar_levels(comps, self.pm)
        if columnar is not None and rollout is not None:
            built = rollout_batch(
                rollout,
                rewards,
                step=step,
                group_size=G,
                task_offset=base,
                pad_token_id=self.tokenizer.pad_token_id,
                group_levels=columnar,
                model_version=version,
                messages=explored.messages,
            )
            attach_behaviour_logprobs(built, rollout, rewards)
            if comps.advantage_in_trainer:
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
            exps = explored.experiences
            if rollout is not None:
                exps = rollout_experiences(
                    rollout,
                    rewards,
                    step=step,
                    group_size=G,
                    task_offset=base,
                    model_version=version,
                    messages=explored.messages,
                )
                attach_behaviour_logprobs(exps, rollout, rewards)
            assert exps is not None
            exps = run_experience_pipeline(self.pm, exps, step)
            if comps.add_strategy is not None:
                _, adv_metrics = self.event_loop.run_until_complete(comps.add_strategy.add(exps, step))
            elif comps.advantage is not None and not comps.advantage_in_trainer:
                exps, adv_metrics = comps.advantage(exps)
                self.event_loop.run_until_complete(self.writer.write(exps))
            else:
                self.event_loop.run_until_complete(self.writer.write(exps))

        # 4. The explorer's metrics (the learner reports those of the rows it trains on).
        metrics = {
            f"advantage/{k}": torch.as_tensor(v)
            for k, v in adv_metrics.items()
            if isinstance(v, Tensor | float | int)
        }
        metrics.update(explored.metrics)
        if rollout is not None:
            metrics["response/truncated"] = rollout.truncated.double().mean()
        scored = [r for r in rewards if r is not None]
        metrics["explorer/reward_mean"] = torch.tensor(
            sum(scored) / len(scored) if scored else float("nan"), dtype=torch.float64
        )
        return metrics

    # ------------------------------------------------------------------ weights, decoding, evaluation

    def load_weights(self, state: dict[str, Tensor], version: int) -> None:
        """Sample from now on with ``state``, the learner's weights of version ``version``."""
        self.policy.load_state_dict(state)
        self.version = version

    def decode(self, rollout: Rollout) -> tuple[list[str], list[tuple[int, ...]]]:
        """Completion texts and ids (:func:`~trinity_core.train.explorer.evaluation.decode_completions`)."""
        return decode_completions(self.tokenizer, rollout)

    def evaluate(self, policy: Any, n: int) -> float | None:
        """Greedy accuracy (mean combined reward) of ``policy`` on ``n`` held-out rows of the task."""
        settings = EvalSettings(n=n, k=0, max_new_tokens=self.max_new_tokens, seed=self.config.trainer.seed)
        return self.evaluate_all(policy, settings)["eval/greedy_reward"]

    def evaluate_all(self, policy: Any, settings: EvalSettings) -> dict[str, float | None]:
        """Every figure of :func:`~trinity_core.train.explorer.evaluation.evaluate_policy` for ``policy``."""
        rewards = (self.reward_names, self.reward_fns, self.reward_weights)
        return evaluate_policy(policy, self.tokenizer, self.prompter, self.task, rewards, settings)
