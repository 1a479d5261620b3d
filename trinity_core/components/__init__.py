"""The component contracts: one base class per kind of plugin.

=============  ================================  ==========================================
kind           entry-point namespace             base class(es)
=============  ================================  ==========================================
algorithm      ``trinity_core.algorithms``       :class:`AlgorithmType` (write presets with
                                                 :class:`AlgorithmPreset`)
advantage_fn   ``trinity_core.advantage_fns``    :class:`AdvantageFn`, :class:`GroupAdvantage`,
                                                 :class:`TrainerAdvantage`
add_strategy   ``trinity_core.add_strategies``   :class:`AddStrategy`, :class:`GroupAdvantageStrategy`
policy_loss    ``trinity_core.policy_losses``    :class:`PolicyLossFn` (standard inputs only:
                                                 :class:`StandardPolicyLossFn`)
kl_fn          ``trinity_core.kl_fns``           :class:`KLFn`
entropy_loss   ``trinity_core.entropy_losses``   :class:`EntropyLossFn`
value_loss     ``trinity_core.value_losses``     :class:`ValueLossFn` (the critic's loss)
workflow       ``trinity_core.workflows``        :class:`Workflow` (tasks in :class:`WorkflowTask`)
task_selector  ``trinity_core.task_selectors``   :class:`TaskSelector` (which task rows a step samples)
operator       ``trinity_core.experience_        :class:`ExperienceOperator` (filters and mappers of a
               operators``                       step's experiences)
priority_fn    ``trinity_core.priority_fns``     :class:`PriorityFn` (the replay buffer's order)
tool_parser    ``trinity_core.tool_parsers``     :class:`ToolParser` (tool calls in a reply:
                                                 :class:`ToolCall`, :class:`ParsedReply`)
=============  ================================  ==========================================
"""

from __future__ import annotations

from trinity_core.components._aggregation import LossAggArgs, LossAggMode
from trinity_core.components.add_strategy import AddStrategy, GroupAdvantageStrategy
from trinity_core.components.advantage import (
    AdvantageFn,
    GroupAdvantage,
    GroupComputation,
    GroupedBatch,
    TrainerAdvantage,
    grouped_order,
    write_advantages,
)
from trinity_core.components.algorithm import (
    ALGORITHM_CONFIG_KEYS,
    AlgorithmPreset,
    AlgorithmType,
    ConfigRule,
    ConstantMeta,
)
from trinity_core.components.base import (
    Component,
    ComponentArgs,
    Metrics,
    aggregate_metrics,
    materialize_metrics,
    summarize_masked_metric,
    summarize_metric,
)
from trinity_core.components.entropy import EntropyLossFn
from trinity_core.components.experience_operator import ExperienceOperator, OperatorContext
from trinity_core.components.kl import AdaptiveKLController, FixedKLController, KLFn
from trinity_core.components.policy_loss import (
    BACKEND_KEY_MAPPERS,
    KeyMapper,
    PolicyLossFn,
    StandardPolicyLossFn,
)
from trinity_core.components.priority_fn import PriorityFn, ReplayStats
from trinity_core.components.task_selector import TaskSelector
from trinity_core.components.tool_parser import ParsedReply, ToolCall, ToolParser
from trinity_core.components.value_loss import ValueLossFn
from trinity_core.components.workflow import ChatModel, Workflow, WorkflowTask

KIND_BASES: dict[str, tuple[type, ...]] = {
    "algorithm": (AlgorithmType,),
    "advantage_fn": (AdvantageFn, GroupAdvantage, TrainerAdvantage),
    "add_strategy": (AddStrategy, GroupAdvantageStrategy),
    "policy_loss": (PolicyLossFn,),
    "kl_fn": (KLFn,),
    "entropy_loss": (EntropyLossFn,),
    "value_loss": (ValueLossFn,),
    "workflow": (Workflow,),
    "task_selector": (TaskSelector,),
    "operator": (ExperienceOperator,),
    "priority_fn": (PriorityFn,),
    "tool_parser": (ToolParser,),
}
"""Kind name to its base classes (a component of a kind subclasses the first of them)."""

__all__ = [
    "ALGORITHM_CONFIG_KEYS",
    "BACKEND_KEY_MAPPERS",
    "KIND_BASES",
    "AdaptiveKLController",
    "AddStrategy",
    "AdvantageFn",
    "AlgorithmPreset",
    "AlgorithmType",
    "ChatModel",
    "Component",
    "ComponentArgs",
    "ConfigRule",
    "ConstantMeta",
    "EntropyLossFn",
    "ExperienceOperator",
    "FixedKLController",
    "GroupAdvantage",
    "GroupAdvantageStrategy",
    "GroupComputation",
    "GroupedBatch",
    "KLFn",
    "KeyMapper",
    "LossAggArgs",
    "LossAggMode",
    "Metrics",
    "OperatorContext",
    "ParsedReply",
    "PolicyLossFn",
    "PriorityFn",
    "ReplayStats",
    "StandardPolicyLossFn",
    "TaskSelector",
    "ToolCall",
    "ToolParser",
    "TrainerAdvantage",
    "ValueLossFn",
    "Workflow",
    "WorkflowTask",
    "aggregate_metrics",
    "grouped_order",
    "materialize_metrics",
    "summarize_masked_metric",
    "summarize_metric",
    "write_advantages",
]
