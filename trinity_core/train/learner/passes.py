"""The learner's passes over a step's batch before its update, one small class each.

A pass reads the step's :class:`StepInputs` and adds columns to ``batch.extras`` (or sets the batch's
advantages); it returns its metrics. Which passes a run has is decided once, from the config, by
:func:`build_passes`, in this order:

* :class:`LogprobPass` ``old_logprobs``: the policy before the update (needed when the update makes
  more than one optimizer step, ``trainer.epochs * trainer.minibatches > 1``);
* :class:`LogprobPass` ``ref_logprobs``: the frozen reference model (a KL term, or a loss reading
  ``ref_logprob``);
* :class:`CriticValues` ``values``: the critic's no-grad pass (presets with ``use_critic``);
* :class:`TeacherPass` ``teacher_logprobs``: the teacher of on-policy distillation;
* :class:`KLPenalty`: the KL penalty folded into the token-level rewards (trainer-side advantages);
* :class:`TrainerAdvantage`: the preset's advantage function, when it runs in the trainer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from trinity_core.batch import ExperienceBatch
from trinity_core.components.faults import ComponentFault, call_component, component_label, finite_flag
from trinity_core.lm.distribution import SamplingDistribution
from trinity_core.train.learner.critic import Critic
from trinity_core.train.learner.logprobs import response_logprobs
from trinity_core.train.report.profile import StepProfiler

__all__ = [
    "CriticValues",
    "KLPenalty",
    "LogprobPass",
    "Pass",
    "StepInputs",
    "TeacherPass",
    "TrainerAdvantage",
    "build_passes",
]


@dataclass
class StepInputs:
    """A step's batch on the learner's device and the model inputs cut from it.

    Attributes:
        batch: the rows trained on.
        ids: ``(B, P + R)`` int64 token ids, prompts left-padded to ``prompt_width``.
        attn: the attention mask, or None when no prompt is padded (the model's plain causal path).
        prompt_width: ``P``.
        distribution: the distribution the rows were sampled from (None: ``softmax(logits)``), which
            every log-prob pass computes.
    """

    batch: ExperienceBatch
    ids: Tensor
    attn: Tensor | None
    prompt_width: int
    distribution: SamplingDistribution | None = None

    @classmethod
    def of(cls, batch: ExperienceBatch, distribution: SamplingDistribution | None = None) -> StepInputs:
        """The inputs of ``batch``."""
        P = batch.max_prompt_length
        attn = None if int(batch.prompt_lengths.min()) == P else batch.attention_mask
        return cls(batch, batch.input_ids.long(), attn, P, distribution)

    @property
    def mask(self) -> Tensor:
        """The tokens the loss selects: the action mask (the response mask when there is none)."""
        batch = self.batch
        return batch.action_mask if batch.action_mask is not None else batch.response_mask

    def logprobs(self, model: Any, share_prompts: bool) -> Tensor:
        """Log-probs of the response tokens under ``model`` without entropy (call it under no_grad)."""
        return response_logprobs(
            model,
            self.ids,
            self.attn,
            self.prompt_width,
            False,
            share_prompts=share_prompts,
            distribution=self.distribution,
            action_mask=self.mask,
        )[0]


Pass = Callable[[StepInputs, int], dict[str, Tensor]]
"""A pass: ``(inputs, step) -> metrics``; it writes its columns into ``inputs.batch``."""


class LogprobPass:
    """A no-grad log-prob pass of ``model`` over the batch into ``batch.extras[column]``."""

    def __init__(self, column: str, model: Any, section: str, profiler: StepProfiler, share_prompts: bool):
        """Keep the model, the column it fills and the profiler section it is timed in."""
        self.column, self.model, self.section = column, model, section
        self.profiler, self.share_prompts = profiler, share_prompts

    def __call__(self, inputs: StepInputs, step: int) -> dict[str, Tensor]:
        """Fill the column; no metrics."""
        with self.profiler.section(self.section), torch.no_grad():
            inputs.batch.extras[self.column] = inputs.logprobs(self.model, self.share_prompts)
        return {}


class CriticValues:
    """The critic's values of the batch (no grad) into ``batch.extras["values"]``."""

    def __init__(self, critic: Critic) -> None:
        """Keep the critic."""
        self.critic = critic

    def __call__(self, inputs: StepInputs, step: int) -> dict[str, Tensor]:
        """Fill ``values``; no metrics."""
        inputs.batch.extras["values"] = self.critic.values(inputs.ids, inputs.attn, inputs.prompt_width)
        return {}


class TeacherPass:
    """The teacher's log-probs of the sampled tokens into ``batch.extras["teacher_logprobs"]``.

    The student's side, ``old_logprobs``, is added too when neither an earlier pass nor the rollout
    (``batch.logprobs``) gave it: the distillation advantages compare the two. Both are under the
    distribution the student sampled from (the teacher's logits through the same temperature and
    filters).
    """

    def __init__(self, teacher: Any, policy: Any, profiler: StepProfiler, share_prompts: bool) -> None:
        """Keep the teacher and the policy it is compared with."""
        self.teacher, self.policy, self.profiler, self.share_prompts = (
            teacher,
            policy,
            profiler,
            share_prompts,
        )

    def __call__(self, inputs: StepInputs, step: int) -> dict[str, Tensor]:
        """Fill ``teacher_logprobs`` (and ``old_logprobs`` when missing); no metrics."""
        with torch.no_grad():
            with self.profiler.section("teacher"):
                inputs.batch.extras["teacher_logprobs"] = inputs.logprobs(self.teacher, self.share_prompts)
            if "old_logprobs" not in inputs.batch.extras and inputs.batch.logprobs is None:
                with self.profiler.section("old_logprob"):
                    inputs.batch.extras["old_logprobs"] = inputs.logprobs(self.policy, self.share_prompts)
        return {}


class KLPenalty:
    """The KL penalty folded into the batch's token-level rewards (before a trainer-side advantage)."""

    def __init__(self, kl_fn: Any, policy: Any, share_prompts: bool) -> None:
        """Keep the KL function and the policy (for ``old_logprobs`` when no earlier pass made them)."""
        self.kl_fn, self.policy, self.share_prompts = kl_fn, policy, share_prompts

    def __call__(self, inputs: StepInputs, step: int) -> dict[str, Tensor]:
        """Set ``batch.token_level_reward``; return ``kl_penalty/<metric>``."""
        batch = inputs.batch
        old = batch.extras.get("old_logprobs")
        if old is None:
            with torch.no_grad():
                old = inputs.logprobs(self.policy, self.share_prompts)
        scores, metrics = call_component(
            "kl_fn",
            self.kl_fn,
            self.kl_fn.apply_kl_penalty_to_reward,
            batch.token_level_scores(),
            old,
            batch.extras["ref_logprobs"],
            inputs.mask,
        )
        batch.token_level_reward = scores
        return {f"kl_penalty/{k}": v for k, v in metrics.items()}


class TrainerAdvantage:
    """The preset's advantage function on the batch (presets whose advantages need the trainer's passes)."""

    def __init__(self, advantage: Any) -> None:
        """Keep the advantage function."""
        self.advantage = advantage

    def __call__(self, inputs: StepInputs, step: int) -> dict[str, Tensor]:
        """Set the batch's advantages (and returns); return ``advantage/<metric>`` and the finiteness flag of
        the advantages."""
        batch, metrics = call_component("advantage_fn", self.advantage, self.advantage, inputs.batch)
        if not isinstance(batch, ExperienceBatch) or batch.advantages is None:
            raise ComponentFault(
                f"{component_label('advantage_fn', self.advantage)} returned no batch with advantages "
                f"({type(batch).__name__}); return the batch with its advantages set, and the metrics"
            )
        inputs.batch = batch
        out = {
            f"advantage/{k}": torch.as_tensor(v)
            for k, v in metrics.items()
            if isinstance(v, Tensor | float | int)
        }
        out.update([finite_flag("advantage_fn", batch.advantages)])
        return out


def build_passes(
    components: Any,
    *,
    policy: Any,
    ref: Any | None,
    critic: Critic | None,
    teacher: Any | None,
    old_pass: bool,
    profiler: StepProfiler,
    share_prompts: bool,
) -> list[Pass]:
    """The passes of a run, in the order they run (see the module docstring)."""
    passes: list[Pass] = []
    if old_pass:
        passes.append(LogprobPass("old_logprobs", policy, "old_logprob", profiler, share_prompts))
    if ref is not None:
        passes.append(LogprobPass("ref_logprobs", ref, "reference", profiler, share_prompts))
    if critic is not None:
        passes.append(CriticValues(critic))
    if teacher is not None:
        passes.append(TeacherPass(teacher, policy, profiler, share_prompts))
    if components.advantage_in_trainer:
        if components.kl_penalty is not None:
            passes.append(KLPenalty(components.kl_penalty, policy, share_prompts))
        passes.append(TrainerAdvantage(components.advantage))
    return passes
