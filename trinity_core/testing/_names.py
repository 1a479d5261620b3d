"""What ``--trinity-plugin=NAME`` (or ``distribution = NAME``) meant when no distribution of that name is
installed: a component name, a plugin folder, a shipped plugin that is not installed, or a typo.

The suggestion names the distribution to pass instead (found among installed entry points and the
catalog of shipped plugins, :data:`trinity_core.registry.shipped.SHIPPED`), and how to install it when
it is not.
"""

from __future__ import annotations

import difflib
import importlib.metadata as md
from pathlib import PurePath

from trinity_core.registry import HOOKS_NAMESPACE, kinds, normalize_distribution
from trinity_core.registry.shipped import SHIPPED, install_line, shipped_distributions

__all__ = ["not_installed_message"]

PREFIX = "trinity-plugin-"
"""The prefix of every shipped plugin distribution (and the scaffold's)."""


def _title(group: str) -> str:
    """The kind in words, with its article, of an entry-point group (``an advantage function``)."""
    titles = {spec.namespace: spec.title for spec in kinds()}
    title = titles.get(group, "hook module" if group == HOOKS_NAMESPACE else f"{group} entry point")
    return f"{'an' if title[0] in 'aeiou' else 'a'} {title}"


def _installed_providers() -> dict[str, dict[str, set[str]]]:
    """``{entry-point name: {distribution: {kinds in words}}}`` over every installed trinity_core group."""
    out: dict[str, dict[str, set[str]]] = {}
    for found in md.distributions():
        name = found.metadata["Name"]
        for ep in found.entry_points:
            if name and ep.group.startswith("trinity_core."):
                dist = normalize_distribution(name)
                out.setdefault(ep.name, {}).setdefault(dist, set()).add(_title(ep.group))
    return out


def _installed(dist: str) -> bool:
    try:
        md.distribution(dist)
    except md.PackageNotFoundError:
        return False
    return True


def _folder_name(name: str) -> str:
    """``plugins/trinity-plugin-sapo/`` -> ``trinity-plugin-sapo``; a plain name unchanged."""
    return PurePath(name).name if ("/" in name or "\\" in name) else name


def _suggestions(name: str) -> list[str]:
    """Sentences naming the distribution ``name`` most likely meant, best first."""
    base = _folder_name(name)
    wanted = normalize_distribution(base)
    prefixed = wanted if wanted.startswith(PREFIX) else PREFIX + wanted
    run = "pytest --trinity-plugin={}"
    lines: list[str] = []
    for candidate in dict.fromkeys([wanted, prefixed]):
        if candidate != normalize_distribution(name) and _installed(candidate):
            lines.append(f"the installed distribution is {candidate!r}: run {run.format(candidate)}")
    providers = _installed_providers()
    for dist, titles in sorted(providers.get(base, {}).items()):
        what = " and ".join(sorted(titles))
        lines.append(
            f"{base!r} is the name of {what} that the installed distribution {dist!r} provides: run "
            f"{run.format(dist)}"
        )
    shipped = shipped_distributions()
    for namespace, names in SHIPPED.items():
        provider = names.get(base)
        if provider is not None and not _installed(provider):
            lines.append(
                f"{base!r} is {_title(namespace)} of the shipped plugin {provider}, which is not "
                f"installed: {install_line(provider)}; then run {run.format(provider)}"
            )
    for candidate in dict.fromkeys([wanted, prefixed]):
        if candidate in shipped and not _installed(candidate):
            lines.append(
                f"{candidate} is a shipped plugin that is not installed: {install_line(candidate)}; then "
                f"run {run.format(candidate)}"
            )
    if not lines:
        known = sorted({d for dists in providers.values() for d in dists})
        close = difflib.get_close_matches(wanted, known, n=3) + difflib.get_close_matches(
            base, sorted(providers), n=3
        )
        if close:
            lines.append("did you mean " + " or ".join(repr(c) for c in dict.fromkeys(close)) + "?")
        lines.append(f"installed plugin distributions: {', '.join(known) or '(none)'}")
    return lines


def not_installed_message(name: str) -> str:
    """The problem of ``--trinity-plugin=name`` when no distribution ``name`` is installed: the kit takes
    a distribution name, and this says which one ``name`` points to (or what is installed)."""
    lines = [
        f"distribution {name!r} is not installed in this environment (--trinity-plugin and "
        f"PluginConformance.distribution take a distribution name, as in pyproject.toml's [project] name)"
    ]
    lines += [f"  {line}" for line in _suggestions(name)]
    return "\n".join(lines)
