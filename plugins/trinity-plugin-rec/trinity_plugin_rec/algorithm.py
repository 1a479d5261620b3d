"""``rec`` algorithm preset: :class:`RECAlgorithm` (seed ``trinity.algorithm.algorithm``)."""

from __future__ import annotations

from typing import Any, ClassVar

from trinity_core.components import AlgorithmType

__all__ = ["RECAlgorithm"]


class RECAlgorithm(AlgorithmType):
    """REC: group-centred REINFORCE advantages (``rec``) with the REC token-filtered loss (``rec``).

    Flags as seed 002: no critic, a reference model (for the ``k2`` KL loss), advantages computed in the
    experience pipeline (``rec`` is a group advantage), batch balancing allowed, ``experience`` schema.

    ``policy_loss_fn_args`` carries ``epsilon_low_prime=0.6`` and ``epsilon_high_prime=2.0``: the values
    the reference actually ran with (its ``default_args()``, applied by its config validator), which
    differ from the seed constructor defaults 0.4/0.4 that :class:`~trinity_plugin_rec.RECPolicyLossFn`
    keeps. They matter only for ``clip_mode="ring"``. Needs trinity-plugin-kl (``none``, ``k2``) and
    trinity-plugin-entropy (``default``), declared as dependencies.
    """

    paper: ClassVar[str | None] = "https://arxiv.org/abs/2509.24203"
    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """``repeat_times`` 2, advantage ``rec``, loss ``rec`` (ring primes 0.6/2.0), KL penalty ``none``,
        KL loss ``k2``, entropy ``default``."""
        return {
            "repeat_times": 2,
            "advantage_fn": "rec",
            "policy_loss_fn": "rec",
            "policy_loss_fn_args": {"epsilon_low_prime": 0.6, "epsilon_high_prime": 2.0},
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }
