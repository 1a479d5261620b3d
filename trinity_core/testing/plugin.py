"""The pytest plugin of the conformance kit (registered through the ``pytest11`` entry point).

``pytest --trinity-plugin=NAME`` runs :class:`~trinity_core.testing.PluginConformance` against the
installed distribution ``NAME`` (repeat the option for several), from any directory: when no test paths
are given on the command line only the kit's module :mod:`trinity_core.testing.run_plugin` is collected;
with explicit paths it is collected in addition to them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trinity_core.testing.suites import OPTION_DEST

__all__ = ["RUN_PLUGIN_MODULE", "pytest_addoption", "pytest_configure"]

RUN_PLUGIN_MODULE = Path(__file__).resolve().parent / "run_plugin.py"
"""The module whose test class runs the kit against the distributions named by ``--trinity-plugin``."""


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--trinity-plugin``."""
    group = parser.getgroup("trinity", "trinity-core conformance kit")
    group.addoption(
        "--trinity-plugin",
        action="append",
        dest=OPTION_DEST,
        default=[],
        metavar="DISTRIBUTION",
        help="run the trinity-core conformance checks against every component of this installed "
        "distribution (repeatable)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """With ``--trinity-plugin``, collect the kit's run_plugin module (only it, unless paths were given)."""
    if not config.getoption(OPTION_DEST):
        return
    target = str(RUN_PLUGIN_MODULE)
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args[:] = [target]
    elif target not in config.args:
        config.args.append(target)
