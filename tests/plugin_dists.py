"""Build real installed distributions (dist-info + modules) in a temporary ``sys.path`` entry.

Used by the registry, hooks and CLI tests: entry points go through ``importlib.metadata`` exactly as for
a ``pip install``ed plugin.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from trinity_core.hooks import reset_plugin_manager
from trinity_core.registry import reset_registry


class PluginSite:
    """A directory on ``sys.path`` where tests install fake plugin distributions."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tag = "tp_" + uuid.uuid4().hex[:8]  # unique module prefix: no cross-test sys.modules reuse

    def mod(self, name: str) -> str:
        """A module name unique to this site."""
        return f"{self.tag}_{name}"

    def module(self, name: str, source: str) -> str:
        """Write module ``mod(name)`` with ``source``; returns its import name."""
        full = self.mod(name)
        (self.root / f"{full}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        return full

    def dist(
        self, name: str, version: str, entry_points: Mapping[str, Mapping[str, str]], root: Path | None = None
    ) -> None:
        """Install distribution ``name`` ``version`` declaring ``{group: {ep name: "module:attr"}}``."""
        info = (root or self.root) / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
        )
        lines = []
        for group, eps in entry_points.items():
            lines.append(f"[{group}]")
            lines.extend(f"{ep} = {value}" for ep, value in eps.items())
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        importlib.invalidate_caches()

    def loaded_modules(self) -> list[str]:
        """Modules of this site currently imported."""
        return [m for m in sys.modules if m.startswith(self.tag)]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginSite]:
    """A fresh plugin site on ``sys.path``, fresh global registry and plugin manager, no plugin env vars."""
    monkeypatch.delenv("TRINITY_STRICT_PLUGINS", raising=False)
    monkeypatch.delenv("TRINITY_DISABLE_PLUGINS", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    reset_registry()
    reset_plugin_manager()
    s = PluginSite(tmp_path)
    yield s
    for mod in s.loaded_modules():
        del sys.modules[mod]
    reset_registry()
    reset_plugin_manager()
