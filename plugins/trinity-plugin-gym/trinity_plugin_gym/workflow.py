"""``gym``: a gymnasium environment played by the model, one action per turn."""

from __future__ import annotations

import json
import threading
from typing import Any, ClassVar, Literal

from pydantic import Field

from trinity_core.components import ComponentArgs, Workflow
from trinity_core.experience import Experience
from trinity_core.workflows import Conversation
from trinity_plugin_gym.adapters import load_adapter

__all__ = ["GymWorkflow", "GymWorkflowArgs"]

_ENVS = threading.local()


class GymWorkflowArgs(ComponentArgs):
    """Arguments of :class:`GymWorkflow`."""

    adapter: str = Field("frozen_lake", description="Text adapter: a name in ADAPTERS or 'module:Class'.")
    env_id: str | None = Field(None, description="gymnasium id; unset: the adapter's environment.")
    env_kwargs: dict[str, Any] | None = Field(
        None, description="gymnasium.make arguments; unset: the adapter's."
    )
    max_turns: int = Field(10, ge=1, description="Actions per episode; an episode still running then ends.")
    invalid_action_penalty: float = Field(
        -1.0, description="Added to the return when the model's reply names no action (the episode ends)."
    )
    experience: Literal["episode", "step"] = Field(
        "episode",
        description="'episode': one multi_turn experience per episode; 'step': one per turn (eid.step).",
    )
    history: bool = Field(
        True, description="Each turn sees the whole conversation (False: the latest observation only)."
    )


class GymWorkflow(Workflow):
    """Plays one episode of a gymnasium environment; the reward is the episode's return.

    The task row's ``seed`` seeds ``env.reset``. Each turn the model replies to the rendered observation;
    the adapter parses the reply into an action. A reply naming no action ends the episode with
    ``invalid_action_penalty`` added; ``max_turns`` actions end it too. Every experience's ``info`` has
    ``success`` (return > 0), ``invalid_action`` and ``turns``; with ``experience="step"`` each turn's also
    ``env_state_hash`` (the state it acted in, GiGPO's anchor).
    """

    Args: ClassVar[type[ComponentArgs]] = GymWorkflowArgs
    conformance_task: ClassVar[dict[str, Any] | None] = {"prompt": "PFFF/FHFH/FFFH/HFFG=", "seed": 0}
    adapter: str
    env_id: str | None
    env_kwargs: dict[str, Any] | None
    max_turns: int
    invalid_action_penalty: float
    experience: str
    history: bool

    def run(self) -> list[Experience]:
        """One episode."""
        import gymnasium as gym

        adapter = load_adapter(self.adapter)
        env_id, kwargs = self.env_id or adapter.env_id, self.env_kwargs or adapter.env_kwargs
        # Environments are reused by the thread that made them (reset(seed=...) starts each episode
        # afresh): making one costs more than a turn of a tiny model.
        cache: dict[str, Any] = _ENVS.__dict__.setdefault("envs", {})
        key = json.dumps([env_id, kwargs], sort_keys=True, default=str)
        if key not in cache:
            cache[key] = gym.make(env_id, **kwargs)
        return self._play(cache[key], adapter)

    def _play(self, env: Any, adapter: Any) -> list[Experience]:
        observation, _ = env.reset(seed=int(self.task.raw_task.get("seed", 0)))
        conversation = Conversation(self.model, adapter.render(env, observation), history=self.history)
        total, invalid, states = 0.0, False, []
        for _ in range(self.max_turns):
            states.append(adapter.state_key(env, observation))
            reply = conversation.respond()
            action = adapter.parse(reply.response_text or "")
            if action is None:
                total, invalid = total + self.invalid_action_penalty, True
                break
            observation, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
            conversation.add_text(adapter.render(env, observation))
        info = {"success": float(total > 0), "invalid_action": invalid, "turns": len(conversation.turns)}
        if self.experience == "episode":
            return [conversation.to_experience(total, info)]
        return conversation.step_experiences(total, [{**info, "env_state_hash": s} for s in states])
