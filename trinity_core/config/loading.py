"""Reading a run configuration from YAML or a mapping, structure checked, with dotted error paths."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trinity_core.config.checks import config_problems
from trinity_core.config.errors import ConfigError, ConfigProblem
from trinity_core.config.models import RunConfig
from trinity_core.config.yaml_text import describe_yaml_error, load_yaml_text
from trinity_core.registry.args import validation_problems

__all__ = ["load_config", "read_yaml", "read_yaml_mapping"]


def read_yaml(path: str | os.PathLike[str]) -> Any:
    """Parse the YAML file at ``path``; unreadable or malformed files raise :class:`ConfigError`, as do
    duplicate keys and aliases that expand past a limit (:mod:`trinity_core.config.yaml_text`)."""
    yaml: Any = importlib.import_module("yaml")  # untyped without types-PyYAML
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            [ConfigProblem("", f"cannot read the file: {exc.strerror or exc}")], str(path)
        ) from None
    except UnicodeDecodeError as exc:
        problem = ConfigProblem(
            "", f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        )
        raise ConfigError([problem], str(path)) from None
    try:
        return load_yaml_text(text)
    except ConfigError as exc:
        raise ConfigError(exc.problems, str(path)) from None
    except yaml.YAMLError as exc:
        what = f"not valid YAML: {describe_yaml_error(exc)}"
        raise ConfigError([ConfigProblem("", what, hint="fix the syntax there")], str(path)) from None


def read_yaml_mapping(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The YAML file at ``path`` as a mapping of sections (an empty file is ``{}``).

    Raises:
        ConfigError: the file is unreadable, not UTF-8, not YAML, or its top level is not a mapping.
    """
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError([_not_a_mapping(data)], str(path))
    return dict(data)


def _not_a_mapping(data: Any) -> ConfigProblem:
    return ConfigProblem(
        "",
        f"the top level must be a mapping of sections (algorithm:, trainer:, ...), got a "
        f"{type(data).__name__}",
    )


def load_config(source: str | os.PathLike[str] | Mapping[str, Any] | RunConfig) -> RunConfig:
    """Build a :class:`RunConfig` from a YAML file path, a mapping, or a ``RunConfig`` (returned as is).

    Only the structure is checked here (unknown keys, types, ranges, and the cross-key checks of
    :mod:`trinity_core.config.checks`); component names and arguments are checked by
    :func:`~trinity_core.config.resolve_config`.

    Raises:
        ConfigError: with every structural problem and its dotted path.
    """
    if isinstance(source, RunConfig):
        return source
    label = None
    data: Any = source
    if isinstance(source, (str, os.PathLike)):
        label = str(source)
        data = read_yaml(source)
        if data is None:
            data = {}
    if not isinstance(data, Mapping):
        raise ConfigError([_not_a_mapping(data)], label)
    problems = []
    try:
        run = RunConfig.model_validate(dict(data))
    except ValidationError as exc:
        problems = [ConfigProblem(path, msg) for path, msg in validation_problems(exc, model=RunConfig)]
    problems.extend(config_problems(data))
    if problems:
        raise ConfigError(problems, label)
    return run
