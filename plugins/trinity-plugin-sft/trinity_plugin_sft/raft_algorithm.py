"""``raft`` algorithm preset: :class:`RAFTAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_core.components import AlgorithmPreset
from trinity_plugin_sft.config_checks import PIPELINE_MODES, lookup, run_mode

__all__ = ["RAFTAlgorithm", "pipeline_side_advantage"]


def pipeline_side_advantage(preset: Any, config: Any) -> None:
    """An advantage function, if named, must run in the experience pipeline when the pipeline runs.

    Raises:
        ValueError: ``algorithm.advantage_fn`` names a trainer-side function (``compute_in_trainer()``
            True) and the mode runs rollouts (``both``, trinity-rft's ``explore``, or a configuration
            without a mode).
    """
    name = lookup(config, "algorithm.advantage_fn")
    if not isinstance(name, str):
        return
    mode = run_mode(config)
    if mode is not None and mode not in PIPELINE_MODES:
        return
    from trinity_core import registry

    advantage = registry.resolve("advantage_fn", name)
    if advantage.compute_in_trainer():
        raise ValueError(
            f"algorithm 'raft' computes advantages in the experience pipeline "
            f"(compute_advantage_in_trainer=False), but advantage_fn {name!r} runs in the trainer "
            f"(compute_in_trainer() is True) and mode {mode or 'both'!r} runs the experience pipeline; "
            f"remove algorithm.advantage_fn (the sft loss reads no advantages) or name a pipeline-side "
            f"function such as 'grpo'"
        )


class RAFTAlgorithm(AlgorithmPreset):
    """RAFT: reward-ranked fine-tuning, SFT on the model's own rollouts (schema ``experience``).

    Conceptually SFT, but on rollout experiences: the pipeline keeps the good samples (filters, reward
    shaping) and the trainer applies the ``sft`` loss, which reads no advantages. Flags: no critic, **no
    reference model**, advantages (if any) in the experience pipeline, batch balancing allowed.
    Defaults: the ``sft`` loss, no KL penalty, no KL loss, no entropy term, no advantage function, and in
    mode ``both`` the ``raft`` add strategy (:class:`~trinity_plugin_sft.raft_filter.RAFTAddStrategy`:
    only each task group's best responses, when rewarded, carry loss tokens).

    Difference from trinity-rft 0.6.0: there the preset inherits the base default advantage function
    ``ppo``, which runs in the trainer, so the experience pipeline rejects it in modes that explore.
    Here no advantage function is named, and the rule :func:`pipeline_side_advantage` rejects a
    trainer-side one in mode ``both`` with a RAFT-specific message. In mode ``train`` (SFT on stored
    rollouts) no advantage function runs, and trinity-core's own placement check
    (``compute_advantage_in_trainer`` against the function's ``compute_in_trainer()``) still rejects a
    trainer-side one, so the two rules never disagree.
    """

    paper = "https://arxiv.org/abs/2304.06767"
    use_reference = False
    defaults: ClassVar[Mapping[str, Any]] = {
        "add_strategy": "raft",
        "policy_loss_fn": "sft",
        "kl_penalty_fn": "none",
        "kl_loss_fn": "none",
        "entropy_loss_fn": "none",
    }
    config_rules = (pipeline_side_advantage,)
