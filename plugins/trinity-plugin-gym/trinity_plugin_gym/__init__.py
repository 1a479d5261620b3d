"""Gymnasium environments as multi-turn trinity-core workflows.

* ``gym`` (kind ``workflow``): :class:`GymWorkflow`, any gymnasium environment through a
  :class:`TextAdapter` (renders observations as text, parses actions from the model's text);
* ``frozen_lake`` (kind ``task``): :class:`FrozenLakeTask`, environment seeds with the first observation
  as the prompt; :class:`FrozenLakeAdapter` renders the 4x4 map and reads the actions as words;
* ``blackjack`` (kind ``task``): :class:`BlackjackTask`, the hand each seed deals as the prompt;
  :class:`BlackjackAdapter` renders the hand and reads ``stick`` / ``hit``.
"""

from __future__ import annotations

from trinity_plugin_gym.adapters import (
    ADAPTERS,
    BlackjackAdapter,
    FrozenLakeAdapter,
    TextAdapter,
    load_adapter,
)
from trinity_plugin_gym.tasks import BlackjackTask, FrozenLakeTask
from trinity_plugin_gym.workflow import GymWorkflow, GymWorkflowArgs

__all__ = [
    "ADAPTERS",
    "BlackjackAdapter",
    "BlackjackTask",
    "FrozenLakeAdapter",
    "FrozenLakeTask",
    "GymWorkflow",
    "GymWorkflowArgs",
    "TextAdapter",
    "load_adapter",
]
