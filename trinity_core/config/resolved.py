"""A run configuration after resolution (presets, defaults and component args applied): what the trainer
reads."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from trinity_core.components import LossAggMode
from trinity_core.config.base import Section
from trinity_core.config.buffer_config import BufferConfig
from trinity_core.config.models import ModelConfig, RolloutConfig, RunMode, TasksConfig, TrainerConfig
from trinity_core.config.sections import CriticConfig, DataConfig, SynchronizerConfig

__all__ = ["ResolvedAlgorithmConfig", "ResolvedConfig"]


class ResolvedAlgorithmConfig(Section):
    """The ``algorithm`` section after resolution: every name chosen, every args dict complete.

    A component name of ``None`` means the run uses no such component (e.g. no add strategy).
    """

    algorithm_type: str
    repeat_times: int = Field(ge=1)
    advantage_fn: str | None
    advantage_fn_args: dict[str, Any]
    policy_loss_fn: str | None
    policy_loss_fn_args: dict[str, Any]
    kl_penalty_fn: str | None
    kl_penalty_fn_args: dict[str, Any]
    kl_loss_fn: str | None
    kl_loss_fn_args: dict[str, Any]
    entropy_loss_fn: str | None
    entropy_loss_fn_args: dict[str, Any]
    add_strategy: str | None
    add_strategy_args: dict[str, Any]
    value_loss_fn: str | None = None
    value_loss_fn_args: dict[str, Any] = Field(default_factory=dict)
    loss_agg_mode: LossAggMode | None = None


class ResolvedConfig(Section):
    """A run configuration ready for the trainer.

    ``sources`` maps the dotted path of every resolved value to where it came from (``"--set"``,
    ``"config file"``, ``"config"``, ``"embedded default"``, ``"preset 'grpo'"``, ``"base default"``,
    ``"component default"``, ``"algorithm.loss_agg_mode"``, ``"default"``); it is excluded from dumps.
    """

    mode: RunMode = "both"
    algorithm: ResolvedAlgorithmConfig
    model: ModelConfig
    tasks: TasksConfig
    rollout: RolloutConfig
    trainer: TrainerConfig
    data: DataConfig = Field(default_factory=DataConfig)
    synchronizer: SynchronizerConfig = Field(default_factory=SynchronizerConfig)
    critic: CriticConfig = Field(default_factory=CriticConfig)
    buffer: BufferConfig = Field(default_factory=BufferConfig)
    sources: dict[str, str] = Field(default_factory=dict, exclude=True)
