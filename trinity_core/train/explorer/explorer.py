"""The explorer: sample tasks -> rollout -> rewards -> experiences -> hooks -> advantage -> buffer.

Step ``s`` on every rank, in two halves::

    # Explorer.rollout(s): may run in a thread, ahead of the learner (synchronizer.sync_offset)
    rows      = task.draw(prompts_per_step / world_size)                    # tasks (task selectors)
    rollout   = generate(policy, rows, G = algorithm.repeat_times)           # G responses per prompt
    rewards   = Σ_f w_f · f(prompts, completions, **fields)                  # reward functions
    task.feedback(rows, rewards)                                             # the selectors learn
    exps      = Experience(EID(batch=s, task=i, run=j), info={"model_version": v})
    exps      = rollout.experience_pipeline(exps, s)   # operators; trinity_process_experiences hooks
    ... more rounds while an operator asks for them and fewer groups than prompts were kept
    # Explorer.write(explored): in the runner's thread, which owns the buffer
    add strategy / pipeline advantage fn -> buffer                           # group advantages

``policy`` is the learner's model in lock step, else the explorer's own copy, which the synchronizer
updates (:meth:`Explorer.load_weights`); ``v`` is the version of those weights.

Rollouts and workflows take one path from experiences to the buffer
(:class:`~trinity_core.train.explorer.pipeline.ExperiencePipeline`); a rollout's experiences are one
columnar batch whose ``Experience`` objects are made only if a stage reads them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from trinity_core.buffer import BufferWriter
from trinity_core.components.faults import FINITE_PREFIX
from trinity_core.config import ResolvedConfig
from trinity_core.experience import Experience
from trinity_core.lm.sampling import Rollout, decode_completions, generate
from trinity_core.train.data.prompts import PromptRenderer
from trinity_core.train.data.rewards import combine_rewards, prompt_conversations
from trinity_core.train.data.selection import pass_rate_metrics
from trinity_core.train.explorer.behaviour import attach_behaviour_logprobs, wants_behaviour_logprobs
from trinity_core.train.explorer.evaluation import EvalSettings, evaluate_policy
from trinity_core.train.explorer.experiences import rollout_batch
from trinity_core.train.explorer.operators import build_stages
from trinity_core.train.explorer.pipeline import ExperiencePipeline
from trinity_core.train.explorer.rounds import keep_unfiltered, kept_metrics, reward_matrix, top_up
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
    task_offset: int | None = None
    """The global index of this rank's first prompt (EID ``task``), distinct for every round of a step;
    None: the first round's (``rank * prompts_per_rank``)."""
    operated: Sequence[Experience] | None = None
    """The step's experiences after ``rollout.experience_pipeline`` (every round's), when it has operators
    besides the hooks; None: the hooks run in :meth:`Explorer.write`."""
    all_rewards: list[float | None] | None = None
    """Every round's rewards (``rewards`` are the first round's, those of ``rollout``)."""


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
        self.pipeline = ExperiencePipeline(
            components,
            pm,
            writer,
            event_loop,
            build_stages(config, pm, self.max_new_tokens),
            tokenizer.pad_token_id,
        )

    def step(self, step: int) -> dict[str, Tensor]:
        """Make and write the experiences of step ``step`` (0-based); return the explorer's metrics."""
        return self.write(self.rollout(step))

    # ------------------------------------------------------------------ the rollout

    def rollout(self, step: int) -> Explored:
        """Sample the step's tasks, generate ``G`` responses per prompt (or play the workflow's episodes),
        reward them and run the experience pipeline; more rounds when an operator asks for them."""
        start = time.perf_counter()
        explored = self.sample_round(step, 0)
        if not self.pipeline.operators:  # the hooks alone: they run in write(), as they always did
            return explored
        operated = self.pipeline.operate(self.experiences(explored), step)
        if self.pipeline.max_extra_rounds:
            operated = top_up(self, step, explored, operated)
        operated = keep_unfiltered(self, step, explored, operated)
        explored.operated = operated.experiences
        explored.metrics.update(operated.metrics)
        explored.metrics.update(kept_metrics(self.pipeline, operated, step))
        explored.seconds = time.perf_counter() - start
        return explored

    def sample_round(self, step: int, round_: int) -> Explored:
        """One round of step ``step``: draw the prompts, generate and reward; the task selectors hear how
        their rows went."""
        start = time.perf_counter()
        draw = self.task.draw(self.prompts_per_rank, self.task_gen, step)
        rows = draw.rows
        offset = round_ * self.config.rollout.prompts_per_step + self.rank * self.prompts_per_rank
        with self.profiler.section("generation"):
            if self.workflow is not None:
                explored = self._episodes(rows, step, start, offset)
            else:
                explored = self._generate(rows, step, start, offset)
        matrix = reward_matrix(explored, len(rows), self.group_size)
        explored.metrics.update(self.task.feedback(draw, matrix))
        explored.metrics.update(pass_rate_metrics(matrix, self.config.tasks.eval_success))
        return explored

    def _generate(self, rows: list[dict[str, Any]], step: int, start: float, offset: int) -> Explored:
        """A single-turn round: ``G`` responses per prompt in one ``generate``, rewarded."""
        rollout = generate(
            self.policy,
            self.tokenizer,
            self.prompter.texts(rows),
            repeat=self.group_size,
            max_new_tokens=self.max_new_tokens,
            temperature=self.config.rollout.temperature,
            top_p=self.config.rollout.top_p,
            top_k=self.config.rollout.top_k,
            min_new_tokens=self.config.rollout.min_new_tokens,
            logprobs=self.behaviour_logprobs,  # the log-probs that travel with the experiences
        )
        rewards, completions = self._rewards(rows, rollout)
        messages = self.prompter.messages(rows, completions, self.group_size)
        return Explored(
            step,
            rollout,
            rewards,
            self.version,
            time.perf_counter() - start,
            messages=messages,
            task_offset=offset,
        )

    def _episodes(self, rows: list[dict[str, Any]], step: int, start: float, offset: int) -> Explored:
        """A per-task workflow's round: its episodes (model calls batched per turn), rewarded."""
        assert self.workflow is not None
        outcome = explore_episodes(
            self.workflow,
            rows,
            step=step,
            task_offset=offset,
            repeat_times=self.group_size,
            reward_fn=row_rewards(tuple(self.task.fields), self.rewards, self.task.conversational),
            model_version=self.version,
        )
        exps = outcome.experiences
        return Explored(
            step,
            None,
            [e.reward for e in exps],
            self.version,
            time.perf_counter() - start,
            experiences=exps,
            metrics=outcome_metrics(outcome, start),
            task_offset=offset,
        )

    def _rewards(self, rows: list[dict[str, Any]], rollout: Rollout) -> tuple[list[float | None], list[str]]:
        """The reward functions on the decoded completions (rows repeated ``G`` times, prompt-major);
        returns the rewards and the completion texts."""
        G = self.group_size
        completions, completion_ids = decode_completions(self.tokenizer, rollout)
        fields = {k: [r[k] for r in rows for _ in range(G)] for k in self.task.fields if k != "prompt"}
        fields["truncated"] = rollout.truncated.tolist()
        rewards = combine_rewards(
            self.reward_fns,
            self.reward_weights,
            self.reward_names,
            [r["prompt"] for r in rows for _ in range(G)],
            completions,
            fields,
            completion_ids=completion_ids,
            conversations=prompt_conversations(self.task, rows, G),
        )
        return rewards, completions

    # ------------------------------------------------------------------ experiences into the buffer

    def write(self, explored: Explored) -> dict[str, Tensor]:
        """The step's experiences (after the operators) into the buffer; return the explorer's metrics."""
        if explored.operated is None:  # no operator but the hooks (or made before rollout() ran them)
            operated = self.pipeline.operate(self.experiences(explored), explored.step)
            explored.operated = operated.experiences
            explored.metrics.update(operated.metrics)
            explored.metrics.update(kept_metrics(self.pipeline, operated, explored.step))
        adv_metrics = self.pipeline.store(explored.operated, explored.step)
        metrics = {
            k if k.startswith(FINITE_PREFIX) else f"advantage/{k}": torch.as_tensor(v)
            for k, v in adv_metrics.items()
            if isinstance(v, Tensor | float | int)
        }
        metrics.update(explored.metrics)
        if explored.rollout is not None:
            metrics["response/truncated"] = explored.rollout.truncated.double().mean()
        every = explored.all_rewards if explored.all_rewards is not None else explored.rewards
        scored = [r for r in every if r is not None]
        metrics["explorer/reward_mean"] = torch.tensor(
            sum(scored) / len(scored) if scored else float("nan"), dtype=torch.float64
        )
        return metrics

    def experiences(self, explored: Explored) -> Sequence[Experience]:
        """The step's experiences: a workflow's as it made them; a rollout's with EIDs (batch = step,
        task = global prompt index, run = response index), the sampling policy's version and the
        behaviour log-probs, as one columnar batch whose experiences are made only when read."""
        rollout = explored.rollout
        if rollout is None:
            assert explored.experiences is not None
            return explored.experiences
        batch = rollout_batch(
            rollout,
            explored.rewards,
            step=explored.step,
            group_size=self.group_size,
            task_offset=self.rank * self.prompts_per_rank
            if explored.task_offset is None
            else explored.task_offset,
            pad_token_id=self.tokenizer.pad_token_id,
            group_levels=self.pipeline.group_levels,
            model_version=explored.model_version,
            messages=explored.messages,
        )
        attach_behaviour_logprobs(batch, rollout, explored.rewards)
        return batch.experiences

    # ------------------------------------------------------------------ weights, decoding, evaluation

    def load_weights(self, state: dict[str, Tensor], version: int) -> None:
        """Sample from now on with ``state``, the learner's weights of version ``version``."""
        self.policy.load_state_dict(state)
        self.version = version

    def evaluate(self, policy: Any, n: int) -> float | None:
        """Greedy accuracy (mean combined reward) of ``policy`` on ``n`` held-out rows of the task."""
        settings = EvalSettings(n=n, k=0, max_new_tokens=self.max_new_tokens, seed=self.config.trainer.seed)
        return self.evaluate_all(policy, settings)["eval/greedy_reward"]

    def evaluate_all(self, policy: Any, settings: EvalSettings) -> dict[str, float | None]:
        """Every figure of :func:`~trinity_core.train.explorer.evaluation.evaluate_policy` for ``policy``."""
        rewards = (self.reward_names, self.reward_fns, self.reward_weights)
        return evaluate_policy(policy, self.tokenizer, self.prompter, self.task, rewards, settings)
