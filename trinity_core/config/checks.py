"""Checks of a run configuration that per-field ranges cannot state: the transformer shape in
``model.config`` and one weight per reward function.

They run on the mapping the user wrote, beside the section models' own validation, so ``trinity config
validate`` and ``trinity train`` report them together with every other problem, before a model is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from trinity_core.config.errors import ConfigProblem
from trinity_core.registry.args import validation_problems

__all__ = ["ModelShape", "config_problems"]

_AT = "model.config"


class ModelShape(BaseModel):
    """The common transformer keys of ``model.config``, each checked only when given.

    Strict integers: the mapping goes to transformers as written, so ``7.0`` or ``"7"`` must not pass
    here as 7. ``num_key_value_heads: null`` means as many as the attention heads (transformers' own
    default).
    """

    model_config = ConfigDict(extra="ignore")

    hidden_size: StrictInt | None = Field(default=None, ge=1, description="Width of the residual stream.")
    num_attention_heads: StrictInt | None = Field(default=None, ge=1, description="Query heads per layer.")
    num_key_value_heads: StrictInt | None = Field(
        default=None, ge=1, description="Key/value heads per layer (grouped-query attention)."
    )
    head_dim: StrictInt | None = Field(
        default=None, ge=1, description="Width of one head; unset: hidden_size / num_attention_heads."
    )
    num_hidden_layers: StrictInt | None = Field(default=None, ge=1, description="Transformer layers.")
    intermediate_size: StrictInt | None = Field(default=None, ge=1, description="Width of the MLP.")
    vocab_size: StrictInt | None = Field(default=None, ge=1, description="Rows of the embedding.")
    max_position_embeddings: StrictInt | None = Field(default=None, ge=1, description="Longest sequence.")


def _shape_problems(config: Mapping[Any, Any]) -> list[ConfigProblem]:
    given = {name: config[name] for name in ModelShape.model_fields if name in config}
    try:
        shape = ModelShape.model_validate(given)
    except ValidationError as exc:
        return [ConfigProblem(path, msg) for path, msg in validation_problems(exc, prefix=_AT)]
    problems = []
    hidden, heads, kv_heads = shape.hidden_size, shape.num_attention_heads, shape.num_key_value_heads
    if hidden is not None and heads is not None and shape.head_dim is None and hidden % heads:
        problems.append(
            ConfigProblem(
                f"{_AT}.hidden_size",
                f"{hidden} is not divisible by {_AT}.num_attention_heads ({heads}), whose heads split it "
                "evenly (head_dim = hidden_size / num_attention_heads)",
                hint=f"choose a multiple of {heads}, or set {_AT}.head_dim",
            )
        )
    if heads is not None and kv_heads is not None and heads % kv_heads:
        problems.append(
            ConfigProblem(
                f"{_AT}.num_key_value_heads",
                f"{_AT}.num_attention_heads ({heads}) is not divisible by {kv_heads}: grouped-query "
                "attention shares each key/value head among an equal number of query heads",
                hint=f"choose a divisor of {heads}",
            )
        )
    return problems


def _weight_problems(tasks: Mapping[Any, Any]) -> list[ConfigProblem]:
    names, weights = tasks.get("reward_fns"), tasks.get("reward_weights")
    # An empty list is the trainer's "unset" (all 1), as null is.
    if not (isinstance(names, list) and isinstance(weights, list) and weights):
        return []
    if len(names) == len(weights):
        return []
    return [
        ConfigProblem(
            "tasks.reward_weights",
            f"{len(weights)} weight{'s' if len(weights) != 1 else ''} for {len(names)} reward "
            f"function{'s' if len(names) != 1 else ''} {names}",
            hint="give one weight per entry of tasks.reward_fns, in the same order",
        )
    ]


def config_problems(data: Mapping[str, Any]) -> list[ConfigProblem]:
    """The cross-key problems of the run configuration ``data`` (as written, before validation).

    Parts of the wrong type are skipped: the section models report them.
    """
    problems: list[ConfigProblem] = []
    model, tasks = data.get("model"), data.get("tasks")
    if isinstance(model, Mapping) and isinstance(model.get("config"), Mapping):
        problems.extend(_shape_problems(model["config"]))
    if isinstance(tasks, Mapping):
        problems.extend(_weight_problems(tasks))
    return problems
