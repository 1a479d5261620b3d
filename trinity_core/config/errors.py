"""Configuration problems: each names the dotted config path, the component, its plugin and a fix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ConfigError", "ConfigProblem"]


@dataclass(frozen=True)
class ConfigProblem:
    """One problem with a configuration.

    Attributes:
        path: dotted config path, e.g. ``"algorithm.policy_loss_fn_args.clip_range"`` (``""``: whole config).
        message: what is wrong.
        component: the component involved, e.g. ``"policy loss 'ppo'"``, if any.
        distribution: the plugin distribution providing it, e.g. ``"trinity-plugin-ppo 0.1.0"``, if any.
        hint: what to do next, if there is more to say than the message.
    """

    path: str
    message: str
    component: str | None = None
    distribution: str | None = None
    hint: str | None = None

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        if self.component:
            text += f" [{self.component}" + (f" from {self.distribution}" if self.distribution else "") + "]"
        if self.hint:
            text += f"; {self.hint}"
        return text


class ConfigError(ValueError):
    """A configuration is invalid; :attr:`problems` lists every problem found, not just the first."""

    def __init__(self, problems: Sequence[ConfigProblem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        count = len(self.problems)
        lines = [f"{count} problem{'s' if count != 1 else ''}{where}:"]
        lines.extend(f"  - {p}" for p in self.problems)
        super().__init__("\n".join(lines))

    def summary(self) -> str:
        """The error for a terminal: one line (``source: path: message``) when there is one problem, the
        full list otherwise."""
        if len(self.problems) == 1:
            where = f"{self.source}: " if self.source else ""
            return f"{where}{self.problems[0]}"
        return str(self)
