"""Checks of algorithm presets: typed flags, a valid ``default_config()``, every component it names
installed, with its preset arguments valid, and a config naming only the preset valid end to end
(``resolve_config`` and ``trinity config validate``)."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trinity_core.components.algorithm import ALGORITHM_CONFIG_KEYS, ALGORITHM_FLAGS
from trinity_core.ops import LOSS_AGG_MODES
from trinity_core.testing._core import ConformanceError, Subject, check, skip_check

__all__ = ["CONFIG_KEY_KINDS"]

CONFIG_KEY_KINDS: dict[str, str] = {
    "advantage_fn": "advantage_fn",
    "policy_loss_fn": "policy_loss",
    "kl_penalty_fn": "kl_fn",
    "kl_loss_fn": "kl_fn",
    "entropy_loss_fn": "entropy_loss",
    "add_strategy": "add_strategy",
    "value_loss_fn": "value_loss",
}
"""``default_config()`` keys that name a component, with the kind of that component."""


@check("algorithm")
def check_flags_are_typed(subject: Subject) -> None:
    """use_critic, use_reference, compute_advantage_in_trainer, can_balance_batch are bools, schema a str"""
    for flag, kind in ALGORITHM_FLAGS.items():
        value = getattr(subject.obj, flag, None)
        # bool is an int subclass; a flag typed int would pass isinstance(…, int) checks elsewhere.
        if type(value) is not kind:
            raise ConformanceError(
                f"class constant {flag} is {value!r}, not a {kind.__name__}",
                f"define `{flag}: {kind.__name__} = ...` on the class",
            )


def _config(subject: Subject) -> dict[str, Any]:
    config = subject.obj.default_config()
    if not isinstance(config, dict):
        raise ConformanceError(
            f"default_config() returned {type(config).__name__}, not a dict", "return a dict of config keys"
        )
    return config


@check("algorithm")
def check_default_config_is_valid(subject: Subject) -> None:
    """default_config() uses only known keys with values of the right type"""
    config = _config(subject)
    unknown = sorted(set(config) - ALGORITHM_CONFIG_KEYS)
    if unknown:
        raise ConformanceError(
            f"default_config() has unknown keys {unknown}",
            f"use only {', '.join(sorted(ALGORITHM_CONFIG_KEYS))}",
        )
    repeat = config.get("repeat_times", 1)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ConformanceError(f"repeat_times is {repeat!r}", "set repeat_times to an int >= 1")
    mode = config.get("loss_agg_mode", "token-mean")
    if mode not in LOSS_AGG_MODES:
        raise ConformanceError(f"loss_agg_mode is {mode!r}", f"use one of {', '.join(LOSS_AGG_MODES)}")
    for key in CONFIG_KEY_KINDS:
        name = config.get(key)
        if name is not None and not isinstance(name, str):
            raise ConformanceError(
                f"{key} is {name!r}, not a component name", f"set {key} to a registered name"
            )
        args = config.get(f"{key}_args")
        if args is not None and not isinstance(args, dict):
            raise ConformanceError(f"{key}_args is {args!r}, not a dict", f"set {key}_args to a dict")


@check("algorithm", requires=("default_config_is_valid",))
def check_named_components_resolve(subject: Subject) -> None:
    """every component the preset names is installed and accepts the preset's arguments"""
    from trinity_core import registry

    config = _config(subject)
    for key, kind in CONFIG_KEY_KINDS.items():
        name = config.get(key)
        if not isinstance(name, str):
            continue
        try:
            registry.record(kind, name)
        except registry.PluginError as exc:
            raise ConformanceError(
                f"default_config()[{key!r}] names {kind} {name!r}, which does not resolve:\n{exc}",
                "add the distribution that provides it to this plugin's dependencies, or fix the name",
            ) from None
        try:
            registry.validate_args(kind, name, config.get(f"{key}_args"))
        except registry.ComponentArgsError as exc:
            raise ConformanceError(
                f"default_config()[{key + '_args'!r}] is not valid for {kind} {name!r}: {exc}",
                "use argument names and values the component's Args accepts",
            ) from None


CONFIG_ATTRIBUTE = "conformance_config"
"""Algorithm class attribute: the other top-level config sections no run of the preset can do without
(an offline preset: ``{"mode": "train", "data": {"experiences": "<dir>"}}``); ``preset_validates``
adds them to the minimal config."""


def _minimal_config(subject: Subject) -> dict[str, Any]:
    extra = getattr(subject.obj, CONFIG_ATTRIBUTE, None) or {}
    if not isinstance(extra, Mapping) or "algorithm" in extra:
        raise ConformanceError(
            f"{CONFIG_ATTRIBUTE} is {extra!r}, not a mapping of top-level config sections without "
            f"'algorithm'",
            f'declare e.g. {CONFIG_ATTRIBUTE} = {{"mode": "train", "data": {{"experiences": "<dir>"}}}}',
        )
    return {**copy.deepcopy(dict(extra)), "algorithm": {"algorithm_type": subject.name}}


def _validate_with_cli(config: Mapping[str, Any]) -> tuple[int, str]:
    """``trinity config validate`` on a YAML file holding ``config``: (exit status, its output)."""
    from trinity_core.cli.main import main

    with tempfile.TemporaryDirectory(prefix="trinity-kit-") as tmp:
        path = Path(tmp, "minimal.yaml")
        path.write_text(json.dumps(config))  # JSON is valid YAML
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(["config", "validate", str(path)])
    return status, (err.getvalue() or out.getvalue()).strip()


@check("algorithm", requires=("named_components_resolve",))
def check_preset_validates(subject: Subject) -> None:
    """a config naming only the preset resolves and `trinity config validate` accepts it"""
    from trinity_core.config import ConfigError, resolve_config

    if subject.distribution == "<unregistered>":
        skip_check(
            subject,
            "preset_validates",
            "the class is not registered, so no config can name it; register it (entry point or "
            "trinity_core.registry.register) and give its name as `component`",
        )
    minimal = _minimal_config(subject)
    fix = (
        "make every component the preset names (and the base defaults it keeps: see `trinity config "
        "validate --sources`) resolve with the preset's arguments: add the distributions that provide "
        "them to this plugin's dependencies, fix names or *_args, or fix check_config; a preset that "
        f"needs other config sections in every run declares them as {CONFIG_ATTRIBUTE} on its class"
    )
    try:
        resolve_config(copy.deepcopy(minimal))
    except ConfigError as exc:
        raise ConformanceError(f"resolve_config({minimal!r}) fails: {exc}", fix) from None
    status, output = _validate_with_cli(minimal)
    if status != 0:
        raise ConformanceError(
            f"`trinity config validate` on a file holding {json.dumps(minimal)} exited {status}:\n{output}",
            fix,
        )
