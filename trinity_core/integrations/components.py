"""The components of one algorithm, built from the names our config uses, and the loss they make.

Both integrations name components as ``trinity train``'s ``algorithm`` section does
(``policy_loss_fn``, ``policy_loss_fn_args``, ``advantage_fn``, ``advantage_fn_args``, ``kl_loss_fn``,
``entropy_loss_fn``, ``loss_agg_mode``, or ``algorithm_type`` for a preset whose ``default_config()``
fills what is not given). :func:`total_loss` is the loss of one micro-batch exactly as the trainer's
update forms it: policy loss, plus the KL loss, minus the entropy bonus, each aggregated with the
step's global normalizers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from trinity_core import registry
from trinity_core.components.micro_batch_loss import micro_batch_loss
from trinity_core.ops.loss_scale import LossScale

__all__ = ["OFF", "AlgorithmComponents", "build_components", "total_loss"]

OFF: tuple[str | None, ...] = (None, "", "none")
"""Names that switch a component off (as in ``trinity train``)."""


@dataclass(frozen=True)
class AlgorithmComponents:
    """The built components of one algorithm.

    Attributes:
        policy_loss: the policy loss (backend ``verl``: batch keys in verl's names).
        advantage: the advantage function, or None when the caller supplies advantages.
        kl_loss: the KL loss, or None.
        entropy: the entropy regularizer, or None.
        loss_agg_mode: the aggregation mode passed to every loss term.
        names: the resolved component names, for messages and logs.
    """

    policy_loss: Any
    advantage: Any | None
    kl_loss: Any | None
    entropy: Any | None
    loss_agg_mode: str
    names: Mapping[str, str | None]

    @property
    def needs_reference(self) -> bool:
        """Whether a reference model's log-probs are needed (a KL loss is selected)."""
        return self.kl_loss is not None

    @property
    def needs_entropy(self) -> bool:
        """Whether per-token entropies are needed (an entropy regularizer is selected)."""
        return self.entropy is not None


def _make(
    kind: str, name: str | None, args: Mapping[str, Any] | None, mode: str | None, **runtime: Any
) -> Any:
    if name in OFF:
        return None
    merged = dict(args or {})
    # As trinity train's config: a global loss_agg_mode reaches every component with that argument,
    # unless its own args set it.
    if mode is not None and "loss_agg_mode" not in merged:
        model = getattr(registry.resolve(kind, str(name)), "Args", None)
        if model is not None and "loss_agg_mode" in getattr(model, "model_fields", {}):
            merged["loss_agg_mode"] = mode
    return registry.create(kind, str(name), merged, **runtime)


def build_components(
    *,
    algorithm_type: str | None = None,
    policy_loss_fn: str | None = None,
    policy_loss_fn_args: Mapping[str, Any] | None = None,
    advantage_fn: str | None = None,
    advantage_fn_args: Mapping[str, Any] | None = None,
    kl_loss_fn: str | None = None,
    kl_loss_fn_args: Mapping[str, Any] | None = None,
    entropy_loss_fn: str | None = None,
    entropy_loss_fn_args: Mapping[str, Any] | None = None,
    loss_agg_mode: str | None = None,
) -> AlgorithmComponents:
    """Resolve and build the components named as in our config.

    With ``algorithm_type``, the preset's ``default_config()`` gives every name not passed here (pass
    ``"none"`` to switch a preset's component off); ``*_args`` merge per key over the component's
    defaults. Without a preset: policy loss ``ppo``, advantage ``grpo``, no KL loss, no entropy term,
    ``token-mean``. Unknown names raise the registry's error listing the installed names.
    """
    given: dict[str, Any] = {
        "policy_loss_fn": policy_loss_fn,
        "advantage_fn": advantage_fn,
        "kl_loss_fn": kl_loss_fn,
        "entropy_loss_fn": entropy_loss_fn,
        "loss_agg_mode": loss_agg_mode,
    }
    defaults: dict[str, Any] = {
        "policy_loss_fn": "ppo",
        "advantage_fn": "grpo",
        "loss_agg_mode": "token-mean",
    }
    if algorithm_type is not None:
        defaults.update(registry.resolve("algorithm", algorithm_type).default_config())
    names = {key: value if value is not None else defaults.get(key) for key, value in given.items()}
    if names["policy_loss_fn"] in OFF:
        raise ValueError("policy_loss_fn: no policy loss selected; name one (e.g. 'ppo', 'sapo')")

    def args(key: str, explicit: Mapping[str, Any] | None) -> dict[str, Any]:
        # A preset's args apply only to the component the preset names.
        merged = dict(defaults.get(f"{key}_args") or {}) if given[key] is None else {}
        merged.update(explicit or {})
        return merged

    mode = names["loss_agg_mode"]
    return AlgorithmComponents(
        policy_loss=_make(
            "policy_loss",
            names["policy_loss_fn"],
            args("policy_loss_fn", policy_loss_fn_args),
            mode,
            backend="verl",
        ),
        advantage=_make("advantage_fn", names["advantage_fn"], args("advantage_fn", advantage_fn_args), None),
        kl_loss=_make("kl_fn", names["kl_loss_fn"], args("kl_loss_fn", kl_loss_fn_args), mode),
        entropy=_make(
            "entropy_loss", names["entropy_loss_fn"], args("entropy_loss_fn", entropy_loss_fn_args), mode
        ),
        loss_agg_mode=str(names["loss_agg_mode"]),
        names=names,
    )


def total_loss(
    components: AlgorithmComponents,
    logprob: Tensor,
    columns: Mapping[str, Tensor],
    scale: LossScale,
    entropy: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The loss of one micro-batch and its terms, as ``trinity train``'s update forms it (both call
    :func:`~trinity_core.components.micro_batch_loss.micro_batch_loss`).

    Args:
        components: from :func:`build_components`.
        logprob: current log-probs of the response tokens ``(B, T)``, differentiable.
        columns: in trinity names: ``action_mask``, ``old_logprob``, ``advantages`` ``(B, T)``, and
            ``ref_logprob`` when a KL loss is selected (plus whatever else the policy loss asks for).
        scale: the step's global normalizers (:func:`~trinity_core.ops.loss_scale.global_normalizers`
            over every micro-batch of the optimizer step).
        entropy: per-token entropies ``(B, T)`` when an entropy term is selected.

    Returns:
        ``(loss, terms)``: ``loss = pg_loss + kl_loss − entropy_loss``; ``terms`` are detached 0-d tensors
        named ``actor/<metric>`` (no host synchronisation).
    """
    return micro_batch_loss(
        components.policy_loss,
        components.kl_loss,
        components.entropy,
        loss_agg_mode=components.loss_agg_mode,
        logprob=logprob,
        columns=columns,
        scale=scale,
        entropy=entropy,
    )
