"""Configuration checks shared by the ``grpo`` and ``dapo`` presets.

:func:`check_advantage_placement` enforces that the preset's ``compute_advantage_in_trainer`` agrees with the
configured advantage function's ``compute_in_trainer()``. The reference does not: its ``grpo_verl`` preset
computes advantages in the trainer but names the pipeline-side ``grpo``, and a ``grpo`` run configured with
the trainer-side ``grpo_verl`` never computes advantages at all. A mismatch is rejected, never silently
switched, because the user named the function.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trinity_core import registry

__all__ = ["check_advantage_placement", "check_no_reference_kl", "config_value"]


def config_value(config: Any, key: str) -> Any:
    """``config.algorithm.<key>`` of a resolved config, or ``config["algorithm"][key]`` / ``config[key]``."""
    section = (
        config.get("algorithm", config)
        if isinstance(config, Mapping)
        else getattr(config, "algorithm", config)
    )
    if isinstance(section, Mapping):
        return section.get(key)
    return getattr(section, key, None)


def check_advantage_placement(algorithm: Any, config: Any) -> None:
    """Raise ``ValueError`` when the advantage function runs where ``algorithm`` does not compute advantages.

    ``algorithm`` is an :class:`~trinity_core.components.AlgorithmType` subclass; the advantage function
    is looked up by name in the process-wide registry (an unknown name is left to the config resolver,
    which reports it).
    """
    name = config_value(config, "advantage_fn")
    if name is None:
        return
    try:
        advantage_fn = registry.resolve("advantage_fn", str(name))
    except registry.PluginError:
        return
    in_trainer = bool(advantage_fn.compute_in_trainer())
    if in_trainer == algorithm.compute_advantage_in_trainer:
        return
    preset = algorithm.name()
    if algorithm.compute_advantage_in_trainer:
        raise ValueError(
            f"algorithm.advantage_fn {name!r} runs in the experience pipeline (compute_in_trainer() is "
            f"False) but algorithm {preset!r} computes advantages in the trainer "
            f"(compute_advantage_in_trainer=True), so it would never be called; choose a trainer-side "
            f"advantage function or an algorithm preset that computes advantages in the pipeline"
        )
    hint = " (the same formula, computed in the pipeline)" if name == "grpo_verl" else ""
    raise ValueError(
        f"algorithm.advantage_fn {name!r} runs in the trainer (compute_in_trainer() is True) but "
        f"algorithm {preset!r} computes advantages in the experience pipeline "
        f"(compute_advantage_in_trainer=False), so experiences would reach the trainer without "
        f"advantages; use advantage_fn 'grpo'{hint} or a pipeline-side "
        f"advantage function, or an algorithm preset with compute_advantage_in_trainer=True"
    )


def check_no_reference_kl(algorithm: Any, config: Any) -> None:
    """Raise ``ValueError`` when a KL term is configured for a preset without a reference model."""
    if algorithm.use_reference:
        return
    for key in ("kl_loss_fn", "kl_penalty_fn"):
        name = config_value(config, key)
        if name not in (None, "none"):
            raise ValueError(
                f"algorithm.{key} is {name!r} but algorithm {algorithm.name()!r} runs without a reference "
                f"model (use_reference=False), so there are no reference log-probs to compute a KL "
                f"against; set algorithm.{key} to 'none' or use a preset with a reference model "
                f"(e.g. 'grpo')"
            )
