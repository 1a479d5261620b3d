"""Every installed policy loss and advantage function in verl's registries, as ``trinity.<name>``.

``pip install 'trinity-core[verl]'``, then either call :func:`register` in the driver and in every
worker, or let verl import :mod:`trinity_core.integrations.verl_plugin` (which calls it) through its
external-module setting::

    VERL_USE_EXTERNAL_MODULES=trinity_core.integrations.verl_plugin python -m verl.trainer.main_ppo \\
        actor_rollout_ref.actor.policy_loss.loss_mode=trinity.sapo algorithm.adv_estimator=trinity.opmd ...

Adapters (verl 0.9.1 signatures):

* policy loss ``fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
  rollout_is_weights) -> (loss, metrics)``: our loss is called with verl's ``loss_agg_mode`` and with
  the step's global normalizers from ``config.global_batch_info`` (``batch_num_tokens``,
  ``global_batch_size``, ``dp_size``, ``loss_scale_factor``), so verl's micro-batching and data
  parallelism keep the gradient of the whole batch; metrics are 0-d detached tensors named
  ``actor/<metric>``. Rollout-correction weights (``rollout_is_weights``) are refused with a clear
  error: our losses do not take them (use verl's own loss for rollout correction).
* advantage estimator ``fn(token_level_rewards, response_mask, index, config, ...) -> (advantages,
  returns)``: the rows become experiences (reward = the row's summed token rewards, task group =
  ``index``, i.e. verl's ``uid``) and the installed function runs on them, pipeline-side or
  trainer-side alike; a row it drops gets advantage 0. verl's ``old_log_probs``, ``sum_pi_squared``,
  ``rollout_is_weights`` and ``values`` keyword arguments become the trainer-side batch columns
  ``old_logprobs``, ``sum_pi_squared``, ``rollout_is_weights``, ``values``; the reward components a
  function names in ``gdpo_reward_keys`` come from ``non_tensor_batch`` into each row's ``info``.
  verl's ``compute_advantage`` passes these only to estimators it knows by name, so through verl's
  trainer a ``trinity.*`` estimator that needs them fails with a message naming the missing column.

Component arguments are not part of verl's config: pass ``register(policy_loss_args={"sapo": {...}},
advantage_fn_args={...})``, or set ``TRINITY_VERL_ARGS`` to the same as JSON
(``{"policy_loss": {"sapo": {"tau_pos": 1.0}}, "advantage_fn": {"grpo": {"epsilon": 1e-6}}}``) so that
Ray workers, which import the plugin module, see them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from trinity_core import registry
from trinity_core.integrations._optional import require
from trinity_core.integrations.rows import experiences_from_rows, run_advantage_fn
from trinity_core.ops.loss_scale import LossScale

__all__ = ["ARGS_ENV", "PREFIX", "make_advantage_estimator", "make_policy_loss", "register"]

PREFIX = "trinity."
"""Prefix of every name registered in verl (``trinity.sapo``): verl's own names stay verl's."""

ARGS_ENV = "TRINITY_VERL_ARGS"
"""Environment variable with component arguments as JSON: ``{"policy_loss": {name: args},
"advantage_fn": {name: args}}``."""

_MARK = "__trinity_component__"


def _env_args(kind: str) -> dict[str, dict[str, Any]]:
    raw = os.environ.get(ARGS_ENV)
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{ARGS_ENV} is not valid JSON: {exc}") from exc
    section = data.get(kind, {}) if isinstance(data, dict) else None
    if not isinstance(section, dict):
        raise ValueError(f"{ARGS_ENV}: {kind!r} must map component names to argument objects")
    return section


def _as_count(value: Any, fallback: Tensor) -> Tensor:
    if value is None:
        return fallback
    return torch.as_tensor(value, device=fallback.device).to(torch.int64).reshape(())


def loss_scale_from_verl(response_mask: Tensor, config: Any) -> LossScale:
    """Our :class:`LossScale` from verl's ``config.global_batch_info`` (local counts where it is empty)."""
    info: Mapping[str, Any] = getattr(config, "global_batch_info", None) or {}
    mask = response_mask.to(torch.bool)
    local_tokens = mask.sum()
    local_sequences = mask.any(dim=-1).sum()
    factor = info.get("loss_scale_factor")
    return LossScale(
        num_tokens=_as_count(info.get("batch_num_tokens"), local_tokens),
        num_sequences=_as_count(info.get("global_batch_size"), local_sequences),
        world_size=int(info.get("dp_size", 1) or 1),
        max_tokens=float(factor) if factor is not None else float(response_mask.shape[-1]),
    )


def _build_loss(name: str, args: Mapping[str, Any] | None, loss_agg_mode: str) -> Any:
    """Our loss with verl's ``loss_agg_mode`` as its argument (unless ``args`` set one)."""
    merged = dict(args or {})
    model = getattr(registry.resolve("policy_loss", name), "Args", None)
    if "loss_agg_mode" not in merged and "loss_agg_mode" in getattr(model, "model_fields", {}):
        merged["loss_agg_mode"] = loss_agg_mode
    return registry.create("policy_loss", name, merged, backend="verl")


def make_policy_loss(
    name: str, args: Mapping[str, Any] | None = None
) -> Callable[..., tuple[Tensor, dict[str, Any]]]:
    """A verl policy-loss function that runs our policy loss ``name`` (built on first call)."""
    built: dict[str, Any] = {}

    def policy_loss(
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Any]]:
        if rollout_is_weights is not None:
            raise ValueError(
                f"verl policy loss {PREFIX}{name}: rollout correction weights (rollout_is_weights) are not "
                "supported by trinity policy losses; turn rollout_correction off or use a verl loss"
            )
        loss_fn = built.get(loss_agg_mode)
        if loss_fn is None:
            loss_fn = built[loss_agg_mode] = _build_loss(name, args, loss_agg_mode)
        columns = {"old_log_probs": old_log_prob, "advantages": advantages, "response_mask": response_mask}
        missing = [key for key in loss_fn.select_keys if key not in columns]
        if missing:
            raise KeyError(
                f"verl policy loss {PREFIX}{name} needs batch keys {missing}, which verl's policy-loss "
                "interface does not pass (it passes old_log_probs, advantages and response_mask)"
            )
        kwargs = {key: columns[key] for key in loss_fn.select_keys}
        scale = loss_scale_from_verl(response_mask, config)
        loss, metrics = loss_fn(log_prob, **kwargs, loss_scale=scale, loss_agg_mode=loss_agg_mode)
        return loss, {f"actor/{k}": v.detach() if isinstance(v, Tensor) else v for k, v in metrics.items()}

    setattr(policy_loss, _MARK, ("policy_loss", name))
    policy_loss.__name__ = f"trinity_{name}_policy_loss"
    return policy_loss


_EXTRAS: dict[str, str] = {
    "old_log_probs": "old_logprobs",
    "sum_pi_squared": "sum_pi_squared",
    "rollout_is_weights": "rollout_is_weights",
    "values": "values",
}
"""verl's estimator keyword arguments passed on as trainer-side batch columns (verl name -> ours)."""


def _reward_components(fn: Any, non_tensor_batch: Any, n: int) -> list[dict[str, Any]] | None:
    """Per-row ``info`` holding the reward components ``fn`` names (``gdpo_reward_keys``), read from
    verl's ``non_tensor_batch``; None when it names none."""
    keys = getattr(fn, "gdpo_reward_keys", None)
    if not keys or non_tensor_batch is None:
        return None
    missing = [k for k in keys if k not in non_tensor_batch]
    if missing:
        raise KeyError(
            f"verl advantage estimator: reward components {missing} are not in non_tensor_batch "
            f"(present: {sorted(non_tensor_batch)}); the reward function must return them"
        )
    return [{k: float(non_tensor_batch[k][i]) for k in keys} for i in range(n)]


def make_advantage_estimator(
    name: str, args: Mapping[str, Any] | None = None
) -> Callable[..., tuple[Tensor, Tensor]]:
    """A verl advantage estimator that runs our advantage function ``name`` (built on first call)."""
    built: list[Any] = []

    def estimator(
        token_level_rewards: Tensor,
        response_mask: Tensor,
        index: Any = None,
        config: Any = None,
        **kwargs: Any,
    ) -> tuple[Tensor, Tensor]:
        if index is None:
            raise ValueError(
                f"verl advantage estimator {PREFIX}{name} needs the group ids (index, verl's 'uid' column)"
            )
        if not built:
            built.append(registry.create("advantage_fn", name, dict(args or {})))
        fn = built[0]
        mask = response_mask.to(torch.bool)
        rewards = torch.where(mask, token_level_rewards, 0).sum(dim=-1)
        exps = experiences_from_rows(
            rewards,
            [str(g) for g in list(index)],
            mask,
            logprobs=kwargs.get("old_log_probs"),
            token_level_rewards=token_level_rewards,
            infos=_reward_components(fn, kwargs.get("non_tensor_batch"), int(rewards.shape[0])),
        )
        extras = {ours: kwargs[theirs] for theirs, ours in _EXTRAS.items() if kwargs.get(theirs) is not None}
        advantages, returns, _metrics = run_advantage_fn(fn, exps, mask, extras=extras)
        dtype = token_level_rewards.dtype
        return advantages.to(dtype), returns.to(dtype)

    setattr(estimator, _MARK, ("advantage_fn", name))
    estimator.__name__ = f"trinity_{name}_advantage"
    return estimator


def _put(table: dict[str, Any], key: str, fn: Any, what: str) -> None:
    current = table.get(key)
    if current is not None and getattr(current, _MARK, None) is None:
        raise ValueError(
            f"verl {what} {key!r} is already registered by {getattr(current, '__module__', '?')}."
            f"{getattr(current, '__qualname__', current)}; choose another prefix: register(prefix=...)"
        )
    table[key] = fn  # ours (or absent): replace, so register() may run again with new arguments


def register(
    *,
    prefix: str = PREFIX,
    policy_loss_args: Mapping[str, Mapping[str, Any]] | None = None,
    advantage_fn_args: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, list[str]]:
    """Register every installed policy loss and advantage function in verl under ``prefix + name``.

    Args:
        prefix: name prefix in verl (default ``trinity.``).
        policy_loss_args: per policy-loss name, its arguments (merged over ``TRINITY_VERL_ARGS``).
        advantage_fn_args: per advantage-function name, its arguments (likewise).

    Returns:
        ``{"policy_loss": [...], "advantage_fn": [...]}``: the names registered in verl. Components whose
        plugin fails to load are skipped (``trinity plugins list`` shows why), unless strict mode is on.

    Calling it again replaces our earlier registrations; a verl name taken by anything else is an error.
    """
    core_algos = require("verl.trainer.ppo.core_algos", "verl")
    loss_args = {**_env_args("policy_loss"), **(policy_loss_args or {})}
    adv_args = {**_env_args("advantage_fn"), **(advantage_fn_args or {})}
    done: dict[str, list[str]] = {"policy_loss": [], "advantage_fn": []}
    for name in registry.get_registry().names("policy_loss"):
        key = prefix + name
        _put(core_algos.POLICY_LOSS_REGISTRY, key, make_policy_loss(name, loss_args.get(name)), "policy loss")
        done["policy_loss"].append(key)
    for name in registry.get_registry().names("advantage_fn"):
        key = prefix + name
        fn = make_advantage_estimator(name, adv_args.get(name))
        _put(core_algos.ADV_ESTIMATOR_REGISTRY, key, fn, "advantage estimator")
        done["advantage_fn"].append(key)
    return done
