"""Reading a run configuration from YAML or a mapping, structure checked, with dotted error paths."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trinity_core.config.errors import ConfigError, ConfigProblem
from trinity_core.config.models import RunConfig
from trinity_core.registry.args import validation_problems

__all__ = ["load_config", "read_yaml"]


def read_yaml(path: str | os.PathLike[str]) -> Any:
    """Parse the YAML file at ``path``; unreadable or malformed files raise :class:`ConfigError`."""
    yaml: Any = importlib.import_module("yaml")  # untyped without types-PyYAML
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            [ConfigProblem("", f"cannot read the file: {exc.strerror or exc}")], str(path)
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigProblem("", f"not valid YAML: {exc}")], str(path)) from None


def load_config(source: str | os.PathLike[str] | Mapping[str, Any] | RunConfig) -> RunConfig:
    """Build a :class:`RunConfig` from a YAML file path, a mapping, or a ``RunConfig`` (returned as is).

    Only the structure is checked here (unknown keys, types, ranges); component names and arguments
    are checked by :func:`~trinity_core.config.resolve_config`.

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
        problem = ConfigProblem("", f"the top level must be a mapping of sections, got {type(data).__name__}")
        raise ConfigError([problem], label)
    try:
        return RunConfig.model_validate(dict(data))
    except ValidationError as exc:
        problems = [ConfigProblem(path, msg) for path, msg in validation_problems(exc, model=RunConfig)]
        raise ConfigError(problems, label) from None
