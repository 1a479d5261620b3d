"""Run configuration: pydantic models, YAML loading and resolution of the algorithm preset.

Example::

    from trinity_core.config import load_config, resolve_config

    resolved = resolve_config(load_config("run.yaml"))
    resolved.algorithm.policy_loss_fn_args  # complete, validated by the component's Args
"""

from __future__ import annotations

from trinity_core.config.errors import ConfigError, ConfigProblem
from trinity_core.config.loading import load_config, read_yaml
from trinity_core.config.models import (
    COMPONENT_KEYS,
    RUN_MODES,
    AlgorithmConfig,
    DataConfig,
    LossAggMode,
    ModelConfig,
    ResolvedAlgorithmConfig,
    ResolvedConfig,
    RolloutConfig,
    RunConfig,
    RunMode,
    Section,
    SynchronizerConfig,
    TasksConfig,
    TrainerConfig,
)
from trinity_core.config.resolve import BASE_DEFAULTS, DEFAULT_REPEAT_TIMES, resolve_config

__all__ = [
    "BASE_DEFAULTS",
    "COMPONENT_KEYS",
    "DEFAULT_REPEAT_TIMES",
    "RUN_MODES",
    "AlgorithmConfig",
    "ConfigError",
    "ConfigProblem",
    "DataConfig",
    "LossAggMode",
    "ModelConfig",
    "ResolvedAlgorithmConfig",
    "ResolvedConfig",
    "RolloutConfig",
    "RunConfig",
    "RunMode",
    "Section",
    "SynchronizerConfig",
    "TasksConfig",
    "TrainerConfig",
    "load_config",
    "read_yaml",
    "resolve_config",
]
