"""Configuration rules several algorithm presets share, named in ``AlgorithmPreset.config_rules``.

Each rule is a function ``rule(preset, config)``: ``preset`` is the
:class:`~trinity_core.components.AlgorithmType` subclass being checked, ``config`` a resolved run
configuration (``config.algorithm.<key>``) or a mapping (``{"algorithm": {...}}`` or the algorithm
section itself). A rule raises ``ValueError`` naming the config key and what to change.

Example::

    class DAPOAlgorithm(AlgorithmPreset):
        use_reference = False
        config_rules = (advantage_placement, no_kl_without_reference)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trinity_core import registry

__all__ = ["advantage_placement", "config_value", "no_kl_without_reference"]


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


def advantage_placement(preset: Any, config: Any) -> None:
    """The advantage function must run where the preset computes advantages (trainer or pipeline).

    The preset's ``compute_advantage_in_trainer`` must equal the configured advantage function's
    ``compute_in_trainer()``; otherwise the function is never called, or experiences reach the trainer
    without advantages. A mismatch is rejected, never switched silently, because the user named the
    function. The function is looked up in the process-wide registry; an unknown name is left to the
    config resolver, which reports it with the installed names.
    """
    name = config_value(config, "advantage_fn")
    if name is None:
        return
    try:
        advantage_fn = registry.resolve("advantage_fn", str(name))
    except registry.PluginError:
        return
    in_trainer = bool(advantage_fn.compute_in_trainer())
    if in_trainer == preset.compute_advantage_in_trainer:
        return
    if preset.compute_advantage_in_trainer:
        raise ValueError(
            f"algorithm.advantage_fn {name!r} runs in the experience pipeline (compute_in_trainer() is "
            f"False) but algorithm {preset.name()!r} computes advantages in the trainer "
            f"(compute_advantage_in_trainer=True), so it would never be called; choose a trainer-side "
            f"advantage function or an algorithm preset that computes advantages in the pipeline"
        )
    hint = " (the same formula, computed in the pipeline)" if name == "grpo_verl" else ""
    raise ValueError(
        f"algorithm.advantage_fn {name!r} runs in the trainer (compute_in_trainer() is True) but "
        f"algorithm {preset.name()!r} computes advantages in the experience pipeline "
        f"(compute_advantage_in_trainer=False), so experiences would reach the trainer without "
        f"advantages; use advantage_fn 'grpo'{hint} or a pipeline-side advantage function, or an "
        f"algorithm preset with compute_advantage_in_trainer=True"
    )


def no_kl_without_reference(preset: Any, config: Any) -> None:
    """Without a reference model (``use_reference`` False) the KL loss and KL penalty must be ``none``.

    There would be no reference log-probs to compute a KL against.
    """
    if preset.use_reference:
        return
    for key in ("kl_loss_fn", "kl_penalty_fn"):
        name = config_value(config, key)
        if name not in (None, "none"):
            raise ValueError(
                f"algorithm.{key} is {name!r} but algorithm {preset.name()!r} runs without a reference "
                f"model (use_reference=False), so there are no reference log-probs to compute a KL "
                f"against; set algorithm.{key} to 'none' or use a preset with a reference model "
                f"(e.g. 'grpo')"
            )
