"""``rec`` algorithm preset: :class:`RECAlgorithm`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trinity_core.components import AlgorithmPreset

__all__ = ["RECAlgorithm"]


class RECAlgorithm(AlgorithmPreset):
    """REC: group-centred REINFORCE advantages (``rec``) with the REC token-filtered loss (``rec``).

    The common preset flags: no critic, a reference model (for the ``k2`` KL loss), advantages computed
    in the experience pipeline (``rec`` is a group advantage), batch balancing allowed, ``experience``
    schema. Defaults: 2 responses per task, no KL penalty, the default entropy term.

    ``policy_loss_fn_args`` carries ``epsilon_low_prime=0.6`` and ``epsilon_high_prime=2.0``: the values
    trinity-rft 0.6.0 actually ran with (its ``default_args()``, applied by its config validator), which
    differ from its constructor defaults 0.4/0.4 that :class:`~trinity_plugin_rec.RECPolicyLossFn`
    keeps. They matter only for ``clip_mode="ring"``. Needs trinity-plugin-kl (``none``, ``k2``) and
    trinity-plugin-entropy (``default``), declared as dependencies.
    """

    paper = "https://arxiv.org/abs/2509.24203"
    defaults: ClassVar[Mapping[str, Any]] = {
        "repeat_times": 2,
        "advantage_fn": "rec",
        "policy_loss_fn": "rec",
        "policy_loss_fn_args": {"epsilon_low_prime": 0.6, "epsilon_high_prime": 2.0},
        "kl_penalty_fn": "none",
        "kl_loss_fn": "k2",
        "entropy_loss_fn": "default",
    }
