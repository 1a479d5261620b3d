"""Importing this module registers every installed component in verl (``verl.register()``).

Name it in verl's external-module setting so every Ray worker registers too::

    VERL_USE_EXTERNAL_MODULES=trinity_core.integrations.verl_plugin
"""

from __future__ import annotations

from trinity_core.integrations.verl import register

REGISTERED: dict[str, list[str]] = register()
"""The names registered in verl when this module was imported."""
