"""``raft`` algorithm preset: :class:`RAFTAlgorithm` (seed ``trinity.algorithm.algorithm.RAFTAlgorithm``)."""

from __future__ import annotations

from typing import Any

from trinity_core.components import AlgorithmType
from trinity_plugin_sft.config_checks import PIPELINE_MODES, lookup, run_mode

__all__ = ["RAFTAlgorithm"]


class RAFTAlgorithm(AlgorithmType):
    """RAFT: reward-ranked fine-tuning, SFT on the model's own rollouts (schema ``experience``).

    Conceptually SFT, but on rollout experiences: the pipeline keeps the good samples (filters, reward
    shaping) and the trainer applies the ``sft`` loss, which reads no advantages. No critic, no reference
    model, no KL, no entropy term, and no advantage function by default.

    Difference from the reference (defect 14): the reference inherits the base default advantage function
    ``ppo``, which runs in the trainer, so the experience pipeline rejects it in modes that explore. Here
    no advantage function is named, and :meth:`check_config` rejects a trainer-side one in mode ``both``
    with a RAFT-specific message. In mode ``train`` (SFT on stored rollouts) no advantage function runs,
    and trinity-core's own placement check (``compute_advantage_in_trainer`` against the function's
    ``compute_in_trainer()``) still rejects a trainer-side one, so the two rules never disagree.
    """

    paper = "https://arxiv.org/abs/2304.06767"
    use_critic = False
    use_reference = False
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """Loss ``sft``; KL penalty and KL loss ``none``; entropy ``none``; no advantage function."""
        return {
            "policy_loss_fn": "sft",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "none",
            "entropy_loss_fn": "none",
        }

    @classmethod
    def check_config(cls, config: Any) -> None:
        """An advantage function, if named, must run in the experience pipeline when the pipeline runs.

        Raises:
            ValueError: ``algorithm.advantage_fn`` names a trainer-side function (``compute_in_trainer()``
                True) and the mode runs rollouts (``both``, the reference's ``explore``, or a
                configuration without a mode).
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
