""" "Did you mean" for an entry point whose module or attribute does not exist.

``trinity_plugin_sapo.loss:SAPOLoss`` when the module is ``losses``, or ``...:SapoLoss`` when the class is
``SAPOLoss``: the registry's load error then names the closest real module or class.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
import sys

__all__ = ["entry_point_hint"]


def _close(word: str, candidates: list[str]) -> str | None:
    found = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    if not found:
        lowered = {c.lower(): c for c in candidates}
        found = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
        found = [lowered[f] for f in found]
    return found[0] if found else None


def _module_hint(module: str, missing: str) -> str | None:
    """A close sibling of the first missing part of ``module`` (``missing`` is the name Python reports)."""
    parent, _, leaf = missing.rpartition(".")
    if parent:
        try:
            package = importlib.import_module(parent)
        except Exception:  # the parent is broken too: its own error is the one to fix
            return None
        names = [m.name for m in pkgutil.iter_modules(getattr(package, "__path__", []))]
    else:
        names = sorted({m.name for m in pkgutil.iter_modules()} | set(sys.builtin_module_names))
    close = _close(leaf, names)
    if close is None:
        return None
    return module.replace(missing, f"{parent}.{close}" if parent else close, 1)


def entry_point_hint(value: str, exc: BaseException) -> str | None:
    """``did you mean 'pkg.mod:Class'?`` for a load failure of entry point ``value``, else ``None``."""
    module, _, attr = value.partition(":")
    if isinstance(exc, ModuleNotFoundError) and exc.name and module.startswith(exc.name.split(".")[0]):
        fixed = _module_hint(module, exc.name)
        return f"did you mean {fixed + (':' + attr if attr else '')!r}?" if fixed else None
    if isinstance(exc, AttributeError) and attr:
        loaded = sys.modules.get(module)
        if loaded is None:
            return None
        first = attr.split(".")[0]
        names = [n for n in vars(loaded) if not n.startswith("_")]
        close = _close(first, names)
        return f"did you mean {module + ':' + attr.replace(first, close, 1)!r}?" if close else None
    return None
