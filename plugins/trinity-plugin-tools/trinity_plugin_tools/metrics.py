"""``tools/*`` metrics of a step, from the ``info`` of the episodes' experiences.

Per episode the workflow records ``tool_calls`` (calls answered, malformed ones included), one count
per error kind (``tool_<kind>``, :data:`~trinity_plugin_tools.toolbox.ERROR_KINDS`), ``turns`` (model
replies), ``end`` (``answer``, ``max_turns`` or ``max_tool_calls``) and ``success`` (reward at least
``success_threshold``). The step's metrics:

* ``tools/calls_per_episode``, ``tools/turns``: means over episodes;
* ``tools/error_rate``: errors / calls over the step (0 without calls), and one rate per kind:
  ``tools/parse_error_rate``, ``tools/unknown_tool_rate``, ``tools/bad_arguments_rate``,
  ``tools/timeout_rate``, ``tools/tool_error_rate``;
* ``tools/episodes_with_calls``: the share of episodes that called a tool;
* ``tools/success_with_calls``, ``tools/success_without_calls``: success among the episodes with at least
  one call and among those with none (NaN when there are none of that kind);
* ``tools/max_turns_reached``, ``tools/max_tool_calls_reached``: shares of episodes ended by a limit.

With one experience per turn an episode's info sits on each of its turns; it is counted once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from trinity_core.experience import Experience
from trinity_plugin_tools.toolbox import ERROR_KINDS

__all__ = ["episode_info", "tool_metrics"]


def episode_info(
    *, calls: int, errors: dict[str, int], turns: int, end: str, success: bool
) -> dict[str, Any]:
    """The ``info`` entries of one episode that :func:`tool_metrics` reads."""
    info: dict[str, Any] = {"tool_calls": calls, "turns": turns, "end": end, "success": float(success)}
    info.update({f"tool_{kind}": int(errors.get(kind, 0)) for kind in ERROR_KINDS})
    return info


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def tool_metrics(experiences: Sequence[Experience]) -> dict[str, float]:
    """The step's ``tools/*`` metrics (empty when no experience carries the episode info)."""
    episodes: dict[tuple[int, int], dict[str, Any]] = {}
    for exp in experiences:
        if "tool_calls" in exp.info:
            episodes.setdefault((int(exp.eid.task), int(exp.eid.run)), exp.info)
    infos = list(episodes.values())
    if not infos:
        return {}
    calls = sum(int(i["tool_calls"]) for i in infos)
    errors = {kind: sum(int(i[f"tool_{kind}"]) for i in infos) for kind in ERROR_KINDS}
    with_calls = [float(i["success"]) for i in infos if int(i["tool_calls"]) > 0]
    without = [float(i["success"]) for i in infos if int(i["tool_calls"]) == 0]
    metrics = {
        "tools/calls_per_episode": calls / len(infos),
        "tools/turns": _mean([float(i["turns"]) for i in infos]),
        "tools/error_rate": sum(errors.values()) / calls if calls else 0.0,
        "tools/episodes_with_calls": len(with_calls) / len(infos),
        "tools/success_with_calls": _mean(with_calls),
        "tools/success_without_calls": _mean(without),
        "tools/max_turns_reached": _mean([float(i["end"] == "max_turns") for i in infos]),
        "tools/max_tool_calls_reached": _mean([float(i["end"] == "max_tool_calls") for i in infos]),
    }
    metrics.update({f"tools/{kind}_rate": count / calls if calls else 0.0 for kind, count in errors.items()})
    return metrics
