"""Resolution: apply the algorithm preset and component defaults, then validate every component.

Order (each later source wins, per key):

1. base defaults (:data:`BASE_DEFAULTS`) for component names nobody set;
2. the embedded default's ``algorithm`` keys when the preset was switched away from its own
   (:mod:`trinity_core.config.layers`);
3. the preset's ``default_config()`` for names, args and ``repeat_times`` the user left unset;
4. the component's ``Args`` defaults, then the embedded default's args (step 2), then the preset's args
   (only when the preset's component is the one used), then ``algorithm.loss_agg_mode`` (only when the
   user set it, and only for components with a ``loss_agg_mode`` argument the user did not set per
   component), then the user's args (config file, then ``--set``);
5. each component's ``Args`` validates the merged args;
6. the preset's ``check_config(config)`` (it may adjust the config) and every ``trinity_check_config``
   hook, when the config is otherwise valid.

Unlike trinity-rft 0.6.0, the preset's ``repeat_times`` applies unless the user set it, user args never
drop the other defaults, and a global ``loss_agg_mode`` never overrides a per-loss default that the user
did not ask to change (docs/reference-differences.md, entries ``preset-defaults-apply``,
``args-one-source`` and ``global-loss-agg-mode``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from trinity_core.config.buffer_checks import buffer_problems
from trinity_core.config.errors import ConfigError, ConfigProblem
from trinity_core.config.layers import EMBEDDED, ConfigLayers, layer_config
from trinity_core.config.loading import load_config
from trinity_core.config.models import (
    COMPONENT_KEYS,
    RunConfig,
)
from trinity_core.config.resolved import ResolvedAlgorithmConfig, ResolvedConfig
from trinity_core.registry import ComponentRecord, PluginError, Registry, get_kind, get_registry
from trinity_core.registry.args import default_problems, validation_problems

__all__ = ["BASE_DEFAULTS", "CRITIC_VALUE_LOSS", "DEFAULT_REPEAT_TIMES", "resolve_config"]

BASE_DEFAULTS: dict[str, str | None] = {
    "advantage_fn": None,
    "policy_loss_fn": "ppo",
    "kl_penalty_fn": "none",
    "kl_loss_fn": "none",
    "entropy_loss_fn": "default",
    "add_strategy": None,
    "value_loss_fn": None,
}
"""Component names used when neither the user nor the preset names one.

``advantage_fn`` and ``add_strategy`` default to none at all (presets that need one name it: the
reference's base ``ppo`` advantage broke RAFT); ``kl_loss_fn`` defaults to ``none`` so no regulariser is
added unless the preset or the user asks for one; ``entropy_loss_fn`` is ``default``, whose coefficient
defaults to 0. ``value_loss_fn`` is :data:`CRITIC_VALUE_LOSS` for presets with ``use_critic`` and none
otherwise.
"""

CRITIC_VALUE_LOSS = "clipped"
"""The value loss of presets with ``use_critic`` when neither the user nor the preset names one."""

DEFAULT_REPEAT_TIMES = 1
"""``repeat_times`` when neither the user nor the preset sets it."""

_PRESET_KEYS = {"repeat_times", "loss_agg_mode"} | set(COMPONENT_KEYS) | {f"{k}_args" for k in COMPONENT_KEYS}


class _Resolver:
    def __init__(self, config: RunConfig, registry: Registry, layers: ConfigLayers | None = None) -> None:
        self.config = config
        self.user = config.algorithm
        self.registry = registry
        self.layers = layers or ConfigLayers(data={})
        self.below = self.layers.below_preset
        self.problems: list[ConfigProblem] = []
        self.sources: dict[str, str] = {}
        self.preset: ComponentRecord | None = None
        self.preset_defaults: dict[str, Any] = {}

    def load_preset(self) -> None:
        name = self.user.algorithm_type
        try:
            self.preset = self.registry.record("algorithm", name)
        except PluginError as exc:
            self.problems.append(ConfigProblem("algorithm.algorithm_type", str(exc)))
            return
        where = (f"algorithm {name!r}", self.preset.entry_point.provider)
        try:
            defaults = dict(self.preset.obj.default_config())
        except Exception as exc:
            self.problems.append(ConfigProblem("algorithm", f"default_config() raised {exc!r}", *where))
            return
        unknown = sorted(set(defaults) - _PRESET_KEYS)
        if unknown:
            msg = f"default_config() returns unknown keys {unknown}; allowed: {sorted(_PRESET_KEYS)}"
            self.problems.append(ConfigProblem("algorithm", msg, *where, hint="fix the algorithm plugin"))
        self.preset_defaults = {k: v for k, v in defaults.items() if k in _PRESET_KEYS}

    def user_label(self, path: str) -> str:
        """Origin of a value the user's layers set (config file, ``--set``, embedded default)."""
        return self.layers.origin(path) or "config"

    @property
    def preset_label(self) -> str:
        return f"preset {self.user.algorithm_type!r}"

    def repeat_times(self) -> int:
        path = "algorithm.repeat_times"
        if self.user.repeat_times is not None:
            self.sources[path] = self.user_label(path)
            return self.user.repeat_times
        if self.preset_defaults.get("repeat_times") is not None:
            self.sources[path] = self.preset_label
            return int(self.preset_defaults["repeat_times"])
        if self.below.get("repeat_times") is not None:
            self.sources[path] = EMBEDDED
            return int(self.below["repeat_times"])
        self.sources["algorithm.repeat_times"] = "base default"
        return DEFAULT_REPEAT_TIMES

    def component_name(self, key: str) -> str | None:
        user_name: str | None = getattr(self.user, key)
        if user_name is not None:
            self.sources[f"algorithm.{key}"] = self.user_label(f"algorithm.{key}")
            return user_name
        for label, layer in ((self.preset_label, self.preset_defaults), (EMBEDDED, self.below)):
            if key in layer:
                self.sources[f"algorithm.{key}"] = label
                value = layer[key]
                return None if value is None else str(value)
        self.sources[f"algorithm.{key}"] = "base default"
        if key == "value_loss_fn" and getattr(self.preset and self.preset.obj, "use_critic", False):
            return CRITIC_VALUE_LOSS
        return BASE_DEFAULTS[key]

    def component_args(self, key: str, name: str | None) -> dict[str, Any]:
        path = f"algorithm.{key}_args"
        user_args: dict[str, Any] = dict(getattr(self.user, f"{key}_args") or {})
        if name is None:
            if user_args:
                msg = f"arguments given but no {key} is selected"
                self.problems.append(ConfigProblem(path, msg, hint=f"set algorithm.{key} or remove {path}"))
            return {}
        kind = COMPONENT_KEYS[key]
        try:
            record = self.registry.record(kind, name)
        except PluginError as exc:
            source = self.sources.get(f"algorithm.{key}", "config")
            self.problems.append(ConfigProblem(f"algorithm.{key}", f"{exc!s} (name from {source})"))
            return user_args
        component = f"{get_kind(kind).title} {name!r}"
        provider = record.entry_point.provider
        model = getattr(record.obj, "Args", None)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            for bad in user_args:
                self.problems.append(
                    ConfigProblem(f"{path}.{bad}", "this component takes no arguments", component, provider)
                )
            return {}
        merged: dict[str, Any] = {}
        origin: dict[str, str] = {}
        below_args = self.below.get(f"{key}_args")
        if self.below.get(key) == name and isinstance(below_args, Mapping):
            merged.update(below_args)
            origin.update(dict.fromkeys(below_args, EMBEDDED))
        preset_name = self.preset_defaults.get(key, BASE_DEFAULTS[key])
        preset_args = self.preset_defaults.get(f"{key}_args")
        if preset_name == name and isinstance(preset_args, Mapping):
            merged.update(preset_args)
            origin.update(dict.fromkeys(preset_args, self.preset_label))
        if self.user.loss_agg_mode is not None and "loss_agg_mode" in model.model_fields:
            merged["loss_agg_mode"] = self.user.loss_agg_mode
            origin["loss_agg_mode"] = "algorithm.loss_agg_mode"
        merged.update(user_args)
        origin.update({arg: self.user_label(f"{path}.{arg}") for arg in user_args})
        for sub, msg in default_problems(model):
            if sub.split(".", 1)[0].split("[", 1)[0] not in merged:
                hint = f"fix the plugin's Args default, or set {path}.{sub} explicitly"
                self.problems.append(ConfigProblem(f"{path}.{sub}", msg, component, provider, hint))
        try:
            validated = model.model_validate(merged)
        except ValidationError as exc:
            for sub, msg in validation_problems(exc, model=model):
                top = sub.split(".", 1)[0].split("[", 1)[0]
                src = origin.get(top)
                mine = src == self.user_label(f"{path}.{top}")
                detail = f"{msg} (value from {src})" if src and not mine else msg
                self.problems.append(ConfigProblem(f"{path}.{sub}", detail, component, provider))
            return merged
        result: dict[str, Any] = validated.model_dump()
        for arg in result:
            self.sources[f"{path}.{arg}"] = origin.get(arg, "component default")
        return result

    def resolve(self) -> ResolvedConfig | None:
        self.load_preset()
        self.sources["algorithm.algorithm_type"] = self.layers.origin("algorithm.algorithm_type") or "default"
        values: dict[str, Any] = {
            "algorithm_type": self.user.algorithm_type,
            "repeat_times": self.repeat_times(),
        }
        for key in COMPONENT_KEYS:
            name = self.component_name(key)
            values[key] = name
            values[f"{key}_args"] = self.component_args(key, name)
        values["loss_agg_mode"] = self.user.loss_agg_mode
        if self.problems:
            return None
        sections = {k: getattr(self.config, k) for k in RunConfig.model_fields if k != "algorithm"}
        for name, section in sections.items():
            dumped = section.model_dump(mode="json") if isinstance(section, BaseModel) else section
            self.section_sources(name, dumped)
        return ResolvedConfig(
            algorithm=ResolvedAlgorithmConfig(**values), sources=dict(self.sources), **sections
        )

    def section_sources(self, path: str, value: Any) -> None:
        """Record the origin of every leaf under ``path`` (``"default"``: the field's own default)."""
        if isinstance(value, Mapping) and value:
            for key, sub in value.items():
                self.section_sources(f"{path}.{key}", sub)
            return
        self.sources[path] = self.layers.origin(path) or "default"

    def check(self, resolved: ResolvedConfig) -> None:
        if self.preset is not None:
            before = {k: getattr(resolved.algorithm, k) for k in COMPONENT_KEYS}
            try:
                self.preset.obj.check_config(resolved)
            except (ValueError, TypeError, AttributeError, ValidationError) as exc:
                self.problems.append(
                    ConfigProblem(
                        "algorithm",
                        f"rejected by check_config: {exc}",
                        f"algorithm {self.user.algorithm_type!r}",
                        self.preset.entry_point.provider,
                    )
                )
                return
            for key, old in before.items():
                new = getattr(resolved.algorithm, key)
                if new != old:  # the preset switched a component: give the new one its own args
                    self.sources[f"algorithm.{key}"] = f"{self.preset_label} check_config"
                    setattr(resolved.algorithm, f"{key}_args", self.component_args(key, new))
            resolved.sources.update(self.sources)
            self.check_advantage_placement(resolved)

    def check_advantage_placement(self, resolved: ResolvedConfig) -> None:
        """The preset and its advantage function must agree on where advantages are computed.

        A preset with ``compute_advantage_in_trainer`` True runs the advantage function on the trainer's
        batch; False runs it in the experience pipeline on whole groups. A function built for the other
        side would get the wrong input: trinity-rft 0.6.0 accepts a pipeline preset with the trainer-side
        ``grpo_verl`` advantage and then never computes advantages (docs/reference-differences.md,
        ``advantage-placement``).
        """
        name = resolved.algorithm.advantage_fn
        if self.preset is None or name is None:
            return
        try:
            in_trainer = bool(self.registry.resolve("advantage_fn", name).compute_in_trainer())
        except (PluginError, AttributeError):
            return  # an unknown or broken name was reported when its args were resolved
        wanted = bool(getattr(self.preset.obj, "compute_advantage_in_trainer", in_trainer))
        if in_trainer != wanted:
            where = "in the trainer" if in_trainer else "in the experience pipeline"
            preset_side = "the trainer" if wanted else "the experience pipeline"
            self.problems.append(
                ConfigProblem(
                    "algorithm.advantage_fn",
                    f"advantage function {name!r} runs {where}, but preset "
                    f"{self.user.algorithm_type!r} computes advantages in {preset_side}; pick an advantage "
                    f"function made for {preset_side} (see `trinity plugins list --kind advantage_fn`)",
                    f"advantage_fn {name!r}",
                    self.preset.entry_point.provider,
                )
            )


def resolve_config(
    config: RunConfig | Mapping[str, Any] | str | None,
    *,
    registry: Registry | None = None,
    plugin_manager: Any = None,
    overrides: Sequence[str] = (),
    embedded: Mapping[str, Any] | None = None,
) -> ResolvedConfig:
    """Resolve ``config`` (a :class:`RunConfig`, mapping or YAML path) into a :class:`ResolvedConfig`.

    Args:
        config: the run configuration; ``None``: ``embedded`` alone.
        registry: where components come from (default: the process-wide registry).
        plugin_manager: whose ``trinity_check_config`` hooks run (default: the process-wide one).
        overrides: ``key.path=value`` strings (``--set``) applied over ``config``.
        embedded: the embedded default run, used only when ``config`` is ``None``; its algorithm keys
            rank below a preset the user switched to (:mod:`trinity_core.config.layers`).

    ``resolved.sources`` names the origin of every resolved value: ``--set``, ``config file``,
    ``embedded default``, ``preset 'NAME'``, ``base default``, ``component default`` or ``default``.

    Raises:
        ConfigError: with every problem found: dotted path, component, plugin distribution, fix.
    """
    layers = None
    if not isinstance(config, RunConfig):
        layers = layer_config(config, overrides, embedded)
        label = config if isinstance(config, str) else None
        try:
            run = load_config(layers.data)
        except ConfigError as exc:
            raise ConfigError(exc.problems, label) from None
    else:
        run = load_config(config)
    resolver = _Resolver(run, registry or get_registry(), layers)
    resolved = resolver.resolve()
    if resolved is None:
        raise ConfigError(resolver.problems, config if isinstance(config, str) else None)
    resolver.check(resolved)
    resolver.problems.extend(buffer_problems(run, resolver.registry))
    if not resolver.problems:
        from trinity_core.hooks import collect_config_problems, get_plugin_manager

        pm = plugin_manager if plugin_manager is not None else get_plugin_manager()
        resolver.problems.extend(ConfigProblem("", p) for p in collect_config_problems(pm, resolved))
    if resolver.problems:
        raise ConfigError(resolver.problems, config if isinstance(config, str) else None)
    return resolved
