"""Run configuration: pydantic models, YAML loading and resolution of the algorithm preset.

Example::

    from trinity_core.config import load_config, resolve_config

    resolved = resolve_config(load_config("run.yaml"))
    resolved.algorithm.policy_loss_fn_args  # complete, validated by the component's Args
"""

from __future__ import annotations

import trinity_core.config.models as models
from trinity_core.config.capabilities import check_capabilities
from trinity_core.config.errors import ConfigError, ConfigProblem
from trinity_core.config.loading import load_config, read_yaml
from trinity_core.config.models import *  # noqa: F403  (every name of models.__all__, re-exported below)
from trinity_core.config.ranges import MAX_SEED, MAX_THREADS, MIN_TEMPERATURE
from trinity_core.config.resolve import BASE_DEFAULTS, DEFAULT_REPEAT_TIMES, resolve_config
from trinity_core.config.resolved import ResolvedAlgorithmConfig, ResolvedConfig
from trinity_core.config.yaml_text import MAX_CONFIG_NODES

__all__ = [
    "BASE_DEFAULTS",
    "DEFAULT_REPEAT_TIMES",
    "MAX_CONFIG_NODES",
    "MAX_SEED",
    "MAX_THREADS",
    "MIN_TEMPERATURE",
    "ConfigError",
    "ConfigProblem",
    "ResolvedAlgorithmConfig",
    "ResolvedConfig",
    "check_capabilities",
    "load_config",
    "read_yaml",
    "resolve_config",
]
__all__ += models.__all__
