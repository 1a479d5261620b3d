"""Messages about broken or missing plugins: one line (tracebacks with ``--debug``), "did you mean" for a
misspelt module or class, failed entry points never listed as installed, the shipped provider of a name."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from trinity_core.cli.main import main
from trinity_core.registry import (
    PLUGIN_API_VERSION,
    PluginLoadError,
    Registry,
    UnknownComponentError,
    get_registry,
)
from trinity_core.registry.shipped import SHIPPED, catalog

if TYPE_CHECKING:
    from plugin_dists import PluginSite

pytest_plugins = ["plugin_dists"]
ROOT = Path(__file__).resolve().parents[1]

LOSS = """
from trinity_core.components import PolicyLossFn


class SapoLoss(PolicyLossFn):
    \"\"\"A loss.\"\"\"
"""


def _package(site: PluginSite) -> str:
    """A package ``<tag>_pkg`` with one module ``losses`` holding ``SapoLoss``."""
    pkg = site.mod("pkg")
    (site.root / pkg).mkdir()
    (site.root / pkg / "__init__.py").write_text("")
    (site.root / pkg / "losses.py").write_text(LOSS)
    importlib.invalidate_caches()
    return pkg


def _install(site: PluginSite, eps: dict[str, str]) -> None:
    site.dist("trinity-plugin-typo", "0.1.0", {"trinity_core.policy_losses": eps})


def test_a_misspelt_module_gets_did_you_mean_and_no_traceback(site: PluginSite) -> None:
    pkg = _package(site)
    _install(site, {"typo": f"{pkg}.loss:SapoLoss"})
    with pytest.raises(PluginLoadError) as info:
        get_registry().record("policy_loss", "typo")
    message = str(info.value)
    assert f"did you mean '{pkg}.losses:SapoLoss'?" in message
    assert "Traceback" not in message
    assert "--debug shows the plugin's traceback" in message
    assert "Traceback" in info.value.traceback


def test_a_misspelt_class_gets_did_you_mean(site: PluginSite) -> None:
    pkg = _package(site)
    _install(site, {"typo": f"{pkg}.losses:SapoLos"})
    with pytest.raises(PluginLoadError, match=rf"did you mean '{pkg}\.losses:SapoLoss'\?"):
        get_registry().record("policy_loss", "typo")


def test_failed_entry_points_are_listed_as_failed_not_installed(site: PluginSite) -> None:
    pkg = _package(site)
    _install(site, {"works": f"{pkg}.losses:SapoLoss", "broken": f"{pkg}.nothing:X"})
    with pytest.raises(UnknownComponentError) as info:
        get_registry().record("policy_loss", "wanted")
    lines = str(info.value).splitlines()
    installed = next(line for line in lines if line.startswith("Installed policy loss names"))
    assert "works" in installed
    assert "broken" not in installed
    assert any(
        line.startswith("  'broken'")
        for line in lines[lines.index("policy loss plugins that failed to load:") :]
    )


def test_cli_prints_one_line_and_the_traceback_only_with_debug(
    site: PluginSite, capsys: pytest.CaptureFixture[str]
) -> None:
    pkg = _package(site)
    _install(site, {"typo": f"{pkg}.loss:SapoLoss"})
    assert main(["config", "validate", "--set", "algorithm.policy_loss_fn=typo"]) == 1
    err = capsys.readouterr().err
    assert f"did you mean '{pkg}.losses:SapoLoss'?" in err
    assert "Traceback" not in err
    assert main(["plugins", "show", "typo", "--kind", "policy_loss"]) == 0
    assert "Traceback" not in capsys.readouterr().out
    assert main(["--debug", "plugins", "show", "typo", "--kind", "policy_loss"]) == 0
    assert "the plugin's traceback:\nTraceback" in capsys.readouterr().out


def test_an_unknown_name_says_which_shipped_distribution_provides_it() -> None:
    with pytest.raises(UnknownComponentError) as info:
        Registry(entry_points=False).record("advantage_fn", "rloo")
    message = str(info.value)
    assert "'rloo' is provided by trinity-plugin-reinforce, which is not installed" in message
    assert "pip install trinity-plugin-reinforce" in message
    assert "pip install --find-links dist trinity-plugin-reinforce" in message
    with pytest.raises(UnknownComponentError) as info:
        Registry(entry_points=False).record("advantage_fn", "nothing_ships_this")
    assert "is provided by" not in str(info.value)


def test_the_shipped_catalog_matches_the_plugins_pyproject_files() -> None:
    expected = catalog(sorted((ROOT / "plugins").glob("*/pyproject.toml")))
    assert expected == SHIPPED, f"trinity_core/registry/shipped.py is stale; set SHIPPED = {expected!r}"


def test_a_plugin_built_for_another_api_version_fails_naming_both(site: PluginSite) -> None:
    pkg = _package(site)
    (site.root / pkg / "__init__.py").write_text('TRINITY_API_VERSION = "2"\n')
    _install(site, {"future": f"{pkg}.losses:SapoLoss"})
    with pytest.raises(PluginLoadError) as info:
        get_registry().record("policy_loss", "future")
    message = str(info.value)
    assert f"{pkg} was built for trinity-core plugin API 2" in message
    assert f"this trinity-core provides API {PLUGIN_API_VERSION}" in message
