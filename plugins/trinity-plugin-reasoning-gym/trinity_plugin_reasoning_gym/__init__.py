"""reasoning-gym for trinity-core: its procedural generators as a task set (``reasoning_gym``), scored by
each generator's own ``score_answer`` (reward function ``reasoning_gym_score``)."""

from __future__ import annotations

from trinity_plugin_reasoning_gym.rewards import reasoning_gym_score
from trinity_plugin_reasoning_gym.tasks import ReasoningGymTask

__all__ = ["ReasoningGymTask", "reasoning_gym_score"]
