"""Configuration checks of the ``grpo`` and ``dapo`` presets, kept under their earlier names.

The rules themselves are shared by every preset and live in :mod:`trinity_core.components.preset_rules`
(:func:`~trinity_core.components.preset_rules.advantage_placement`,
:func:`~trinity_core.components.preset_rules.no_kl_without_reference`); the presets name them in
``config_rules``. This module keeps the old import paths working.
"""

from __future__ import annotations

from trinity_core.components.preset_rules import (
    advantage_placement as check_advantage_placement,
)
from trinity_core.components.preset_rules import config_value
from trinity_core.components.preset_rules import (
    no_kl_without_reference as check_no_reference_kl,
)

__all__ = ["check_advantage_placement", "check_no_reference_kl", "config_value"]
