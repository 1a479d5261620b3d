"""Text adapters: how an environment's observations become text and the model's text an action."""

from __future__ import annotations

import importlib
from typing import Any, ClassVar, Protocol

__all__ = ["ADAPTERS", "BlackjackAdapter", "FrozenLakeAdapter", "TextAdapter", "load_adapter"]


class TextAdapter(Protocol):
    """Renders observations for the model and parses its replies into actions."""

    env_id: ClassVar[str]
    """The gymnasium id the adapter is for (the workflow's default ``env_id``)."""
    env_kwargs: ClassVar[dict[str, Any]]
    """Keyword arguments of ``gymnasium.make`` for it."""

    def render(self, env: Any, observation: Any) -> str:
        """The observation as text (the prompt of the next turn)."""
        ...

    def parse(self, text: str) -> Any | None:
        """The action the text names, or None when it names none (an invalid action)."""
        ...

    def state_key(self, env: Any, observation: Any) -> str:
        """A hashable identity of the state (GiGPO's anchor state, ``info["env_state_hash"]``)."""
        ...

    def alphabet(self) -> str:
        """Every character a rendered observation or a valid action contains."""
        ...


class FrozenLakeAdapter:
    """FrozenLake as text: the map's rows joined by ``/`` with the agent as ``P``, then ``=``
    (``PFFF/FHFH/FFFH/HFFG=`` at the start of the 4x4 map); actions are the words ``left``, ``down``,
    ``right``, ``up``, read from the first letter of the reply's first word (case ignored)."""

    env_id: ClassVar[str] = "FrozenLake-v1"
    env_kwargs: ClassVar[dict[str, Any]] = {"map_name": "4x4", "is_slippery": False}
    ACTIONS: ClassVar[tuple[str, ...]] = ("left", "down", "right", "up")
    """FrozenLake's action ids 0..3 in order."""

    def render(self, env: Any, observation: Any) -> str:
        """The map with ``P`` at the agent's cell."""
        desc = env.unwrapped.desc
        ncol = desc.shape[1]
        cells = [[c.decode() for c in row] for row in desc]
        row, col = divmod(int(observation), ncol)
        cells[row][col] = "P"
        return "/".join("".join(r) for r in cells) + "="

    def parse(self, text: str) -> int | None:
        """``0..3`` for a reply whose first word starts with an action's first letter (``left``, ``l``,
        ``Lft``: left), None otherwise (an empty reply, ``x``, ``?left``)."""
        words = text.strip().lower().split()
        if not words:
            return None
        initials = [name[0] for name in self.ACTIONS]
        return initials.index(words[0][0]) if words[0][0] in initials else None

    def state_key(self, env: Any, observation: Any) -> str:
        """The agent's cell."""
        return str(int(observation))

    def alphabet(self) -> str:
        """Map letters, ``P/=``, the action words' letters and a space."""
        return "SFHGP/=" + "".join(self.ACTIONS) + " "


class BlackjackAdapter:
    """Blackjack as text: the player's sum, a space, the dealer's showing card (1 is an ace), `` a`` when
    the player holds a usable ace, then ``=`` (``14 10=``, ``13 1 a=``); actions are the words ``stick``
    and ``hit``, read from the first letter of the reply's first word (case ignored).

    gymnasium's ``Blackjack-v1`` with its registered rules (Sutton & Barto: a natural counts as an
    ordinary win): the return is +1 for a win, 0 for a draw, -1 for a loss.
    """

    env_id: ClassVar[str] = "Blackjack-v1"
    env_kwargs: ClassVar[dict[str, Any]] = {}
    ACTIONS: ClassVar[tuple[str, ...]] = ("stick", "hit")
    """Blackjack's action ids 0..1 in order."""

    def render(self, env: Any, observation: Any) -> str:
        """``"<player sum> <dealer card>[ a]="``."""
        player, dealer, usable_ace = (int(x) for x in observation)
        return f"{player} {dealer}{' a' if usable_ace else ''}="

    def parse(self, text: str) -> int | None:
        """0 (stick) or 1 (hit) for a reply whose first word starts with ``s`` or ``h``, else None."""
        words = text.strip().lower().split()
        if not words:
            return None
        initials = [name[0] for name in self.ACTIONS]
        return initials.index(words[0][0]) if words[0][0] in initials else None

    def state_key(self, env: Any, observation: Any) -> str:
        """The observation: player's sum, dealer's card, usable ace."""
        return ",".join(str(int(x)) for x in observation)

    def alphabet(self) -> str:
        """Digits, a space, ``a``, ``=`` and the action words' letters."""
        return "0123456789 a=" + "".join(sorted(set("".join(self.ACTIONS))))


ADAPTERS: dict[str, type] = {"frozen_lake": FrozenLakeAdapter, "blackjack": BlackjackAdapter}
"""Adapters by name (``adapter`` argument of the workflow); a ``module:Class`` path names any other."""


def load_adapter(name: str) -> Any:
    """An adapter instance from :data:`ADAPTERS` or a ``module:Class`` path."""
    if name in ADAPTERS:
        return ADAPTERS[name]()
    module, sep, attr = name.partition(":")
    if not sep:
        raise ValueError(
            f"unknown text adapter {name!r}; use one of {sorted(ADAPTERS)} or a 'module:Class' path"
        )
    return getattr(importlib.import_module(module), attr)()
