"""Our entry-point groups are plain stevedore namespaces: stevedore and the registry agree.

For fake installed distributions (``plugin_dists``), stevedore's ``DriverManager`` loads the same class
the registry resolves, its ``ExtensionManager`` lists the same names as ``registry.list_components``
(a plugin that fails to import is skipped by stevedore and reported as a failure by the registry), and a
name claimed by two distributions is refused by both.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from stevedore import _cache as stevedore_cache
from stevedore.driver import DriverManager
from stevedore.exception import MultipleMatches
from stevedore.extension import ExtensionManager

from trinity_core import registry
from trinity_core.components import PolicyLossFn
from trinity_core.registry import PluginConflictError

if TYPE_CHECKING:
    from plugin_dists import PluginSite

pytest_plugins = ["plugin_dists"]

NS = "trinity_core.policy_losses"

LOSSES = '''
from trinity_core.components import PolicyLossFn


class NegLogprobLoss(PolicyLossFn):
    """L = agg(-A * logp)."""

    def __call__(self, logprob, action_mask, advantages, **kwargs):
        loss = self.aggregate(-advantages * logprob, action_mask)
        return loss, {}


class HalfNegLogprobLoss(NegLogprobLoss):
    """L = agg(-0.5 * A * logp)."""

    def __call__(self, logprob, action_mask, advantages, **kwargs):
        loss = self.aggregate(-0.5 * advantages * logprob, action_mask)
        return loss, {}
'''

BROKEN = """
raise ImportError("this plugin needs a library that is not installed")
"""


@pytest.fixture(autouse=True)
def private_stevedore_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stevedore caches of this test alone: its per-namespace class cache (process-wide, like our
    registry's scan) and its on-disk cache, written under ``tmp_path`` rather than ``~/.cache``."""
    monkeypatch.setattr(ExtensionManager, "ENTRY_POINT_CACHE", {})
    cache = stevedore_cache.Cache(cache_dir=str(tmp_path / "stevedore-cache"))
    monkeypatch.setattr(stevedore_cache, "get_group_all", cache.get_group_all)
    monkeypatch.setattr(stevedore_cache, "get_group_named", cache.get_group_named)
    monkeypatch.setattr(stevedore_cache, "get_single", cache.get_single)


def _install(site: PluginSite) -> tuple[str, str]:
    """Two good losses from one distribution and a broken one from another; returns the good names."""
    losses = site.module("losses", LOSSES)
    broken = site.module("broken", BROKEN)
    tag = site.tag
    neg, half = f"{tag}_neg", f"{tag}_half"
    site.dist(
        "tt-sv-losses",
        "1.0.0",
        {NS: {neg: f"{losses}:NegLogprobLoss", half: f"{losses}:HalfNegLogprobLoss"}},
    )
    site.dist("tt-sv-broken", "0.1.0", {NS: {f"{tag}_broken": f"{broken}:Missing"}})
    return neg, half


def test_driver_manager_loads_the_class_the_registry_resolves(site: PluginSite) -> None:
    neg, half = _install(site)
    for name, cls_name in ((neg, "NegLogprobLoss"), (half, "HalfNegLogprobLoss")):
        driver: Any = DriverManager[Any](namespace=NS, name=name, invoke_on_load=False).driver
        resolved = registry.resolve("policy_loss", name)
        assert driver is resolved
        assert driver.__name__ == cls_name
        assert issubclass(driver, PolicyLossFn)


def test_extension_manager_lists_the_registry_names(site: PluginSite) -> None:
    neg, half = _install(site)
    manager = ExtensionManager[Any](namespace=NS, invoke_on_load=False)
    records = registry.list_components("policy_loss", strict=False)

    loaded = sorted(r.name for r in records if r.error is None)
    assert sorted(manager.names()) == loaded
    assert {neg, half} <= set(loaded)
    for name in (neg, half):
        assert manager[name].plugin is registry.resolve("policy_loss", name)

    # Both isolate the broken plugin: stevedore skips it, the registry reports it.
    failed = {r.name: r for r in records if r.error is not None}
    assert f"{site.tag}_broken" not in manager.names()
    assert failed[f"{site.tag}_broken"].distribution == "tt-sv-broken"
    error = failed[f"{site.tag}_broken"].error
    assert error is not None
    assert error.error_type == "ImportError"

    # Every entry point either side sees is the same set of names.
    declared = {ep.name for ep in manager.list_entry_points()}
    assert declared == set(registry.get_registry().names("policy_loss"))


def test_both_refuse_a_name_claimed_by_two_distributions(site: PluginSite) -> None:
    losses = site.module("losses", LOSSES)
    name = f"{site.tag}_dup"
    site.dist("tt-sv-one", "1.0.0", {NS: {name: f"{losses}:NegLogprobLoss"}}, root=site.root)
    site.dist("tt-sv-two", "2.0.0", {NS: {name: f"{losses}:HalfNegLogprobLoss"}}, root=site.root)

    with pytest.raises(MultipleMatches):
        DriverManager[Any](namespace=NS, name=name, invoke_on_load=False)
    with pytest.raises(PluginConflictError, match=r"tt-sv-one.*tt-sv-two"):
        registry.resolve("policy_loss", name)
