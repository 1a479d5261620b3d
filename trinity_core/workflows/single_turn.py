"""``single_turn``, the default workflow: one prompt, ``repeat_times`` responses, the run's rewards.

Its per-task :meth:`SingleTurnWorkflow.run` gives the experiences of today's rollout; the explorer uses
the whole-step fast path (``batched``: one ``generate`` for the step and columnar experiences), which
samples the same batch with the same generator, so both give identical tokens and rewards.
"""

from __future__ import annotations

from typing import ClassVar

from trinity_core.components.workflow import Workflow
from trinity_core.experience import Experience
from trinity_core.workflows.errors import WorkflowError

__all__ = ["SingleTurnWorkflow"]


class SingleTurnWorkflow(Workflow):
    """One prompt, ``task.repeat_times`` sampled responses, scored by the run's reward functions."""

    can_repeat: ClassVar[bool] = True
    batched: ClassVar[bool] = True

    def run(self) -> list[Experience]:
        """Sample the responses, reward them; a response no reward function applies to is dropped."""
        exps = self.model.generate([self.task.prompt], n=self.task.repeat_times)
        if self.task.reward_fn is None:
            raise WorkflowError("single_turn needs the run's reward functions (task.reward_fn is None)")
        ids = []
        for exp in exps:
            assert exp.tokens is not None
            response = exp.tokens[exp.prompt_length :].tolist()
            ids.append(tuple(response if exp.truncate_status else response[:-1]))
        rewards = self.task.reward_fn(
            [exp.response_text or "" for exp in exps], ids, [exp.truncate_status is not None for exp in exps]
        )
        out = []
        for run, (exp, reward) in enumerate(zip(exps, rewards, strict=True)):
            if reward is None:
                continue
            exp.reward = reward
            exp.eid.run = self.task.run_id_base + run
            out.append(exp)
        return out
