"""Where a run's values come from: the embedded default, a config file, ``--set`` overrides.

:func:`layer_config` merges the three into the mapping :func:`~trinity_core.config.resolve_config`
validates, and remembers each value's origin for ``trinity config validate --explain``. The embedded
default's ``algorithm`` keys are the default run's tuning of *its* preset: they apply over that preset's
defaults, but once the preset is switched (``--set algorithm.algorithm_type=sapo``) they rank below the
new preset, so every key the new preset sets is the preset's.
"""

from __future__ import annotations

import copy
import importlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trinity_core.config.errors import ConfigError, ConfigProblem
from trinity_core.config.loading import read_yaml_mapping
from trinity_core.config.yaml_text import describe_yaml_error, load_yaml_text

__all__ = ["EMBEDDED", "SET", "ConfigLayers", "apply_overrides", "layer_config"]

EMBEDDED = "embedded default"
"""Origin label of a value taken from the embedded default run."""

SET = "--set"
"""Origin label of a value given with ``--set``."""

_EXPONENT_ONLY = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+")
"""A number YAML 1.1 reads as a string (an exponent with no dot in the mantissa, ``1e-4``); ``nan``,
``inf`` and every other word stay strings (``--set tasks.name=nan`` names a task)."""


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides (values parsed as YAML, duplicate keys and alias bombs refused as
    in files) to a copy of ``data``."""
    yaml: Any = importlib.import_module("yaml")
    out = copy.deepcopy(dict(data))
    problems = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            problems.append(ConfigProblem("--set", f"{item!r} is not key.path=value (e.g. trainer.lr=1e-4)"))
            continue
        try:
            value = load_yaml_text(raw, prefix=key.strip()) if raw.strip() else None
            if isinstance(value, str) and _EXPONENT_ONLY.fullmatch(value):  # YAML 1.1 reads 1e-4 as a string
                value = float(value)
        except yaml.YAMLError as exc:
            problems.append(
                ConfigProblem(key, f"--set value {raw!r} is not valid YAML: {describe_yaml_error(exc)}")
            )
            continue
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                problems.append(ConfigProblem(key, f"--set: {part!r} is a value, not a section"))
                break
            node = child
        else:
            node[parts[-1]] = value
    if problems:
        raise ConfigError(problems)
    return out


def _has(data: Mapping[str, Any], path: str) -> bool:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _merge_under(low: Mapping[str, Any], high: Mapping[str, Any]) -> dict[str, Any]:
    """``high`` deep-merged over ``low`` (mappings merge per key; anything else is replaced)."""
    out = copy.deepcopy(dict(low))
    for key, value in high.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge_under(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@dataclass
class ConfigLayers:
    """A run's configuration with the origin of each value.

    Attributes:
        data: the merged mapping to validate (``below_preset`` excluded).
        below_preset: embedded ``algorithm`` keys that apply only where the preset sets nothing.
        file_label: origin label of the config's own values (``"config file"`` or ``"config"``).
        set_keys: the dotted keys given with ``--set``.
        config: the config's own values, before the overrides.
        embedded: the embedded default, if used.
    """

    data: dict[str, Any]
    below_preset: dict[str, Any] = field(default_factory=dict)
    file_label: str = "config"
    set_keys: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    embedded: dict[str, Any] = field(default_factory=dict)

    def origin(self, path: str) -> str | None:
        """Where the value at dotted ``path`` came from, or ``None`` when no layer set it."""
        if any(path == key or path.startswith(f"{key}.") for key in self.set_keys):
            return SET
        if _has(self.config, path):
            return self.file_label
        if _has(self.embedded, path):
            return EMBEDDED
        return None


def layer_config(
    config: Mapping[str, Any] | str | os.PathLike[str] | None,
    overrides: Sequence[str] = (),
    embedded: Mapping[str, Any] | None = None,
) -> ConfigLayers:
    """Merge ``embedded`` (used only when ``config`` is ``None``), ``config`` and ``overrides``.

    Raises:
        ConfigError: the file cannot be read, or an override is malformed.
    """
    label = "config"
    own: dict[str, Any] = {}
    if isinstance(config, (str, os.PathLike)):
        own, label = read_yaml_mapping(config), "config file"
    elif config is not None:
        own = copy.deepcopy(dict(config))
    with_set = apply_overrides(own, overrides)
    base = copy.deepcopy(dict(embedded or {})) if config is None else {}
    below: dict[str, Any] = {}
    alg_base = base.get("algorithm")
    alg_user = with_set.get("algorithm")
    chosen = alg_user.get("algorithm_type") if isinstance(alg_user, Mapping) else None
    if isinstance(alg_base, Mapping) and chosen is not None and chosen != alg_base.get("algorithm_type"):
        below = {k: v for k, v in alg_base.items() if k != "algorithm_type"}
        base["algorithm"] = {}
    keys = tuple(item.partition("=")[0].strip() for item in overrides)
    return ConfigLayers(
        data=_merge_under(base, with_set),
        below_preset=below,
        file_label=label,
        set_keys=keys,
        config=own,
        embedded=dict(embedded or {}) if config is None else {},
    )
