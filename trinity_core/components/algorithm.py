"""Algorithm types: a named preset of flags and default components (trinity-rft's ``AlgorithmType``).

An algorithm type tells the trainer what to run (critic? reference model? advantages in the trainer or
in the experience pipeline?) and which components to use unless the user names others. It has no
arguments of its own and is never instantiated: everything is a class constant or a classmethod.

:class:`AlgorithmType` is the contract (the API trinity-rft 0.6.0 defines); :class:`AlgorithmPreset` is
the way to write one: flags, default components and configuration rules as class attributes.
"""

from __future__ import annotations

import copy
import inspect
from abc import ABC, ABCMeta, abstractmethod
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Final

from trinity_core.components.base import _first_line

__all__ = [
    "ALGORITHM_CONFIG_KEYS",
    "ALGORITHM_FLAGS",
    "AlgorithmPreset",
    "AlgorithmType",
    "ConfigRule",
    "ConstantMeta",
]

ALGORITHM_FLAGS: Final[dict[str, type]] = {
    "use_critic": bool,
    "use_reference": bool,
    "compute_advantage_in_trainer": bool,
    "can_balance_batch": bool,
    "schema": str,
}
"""The class constants every concrete algorithm type defines, with their types."""

ALGORITHM_CONFIG_KEYS: Final[frozenset[str]] = frozenset(
    {
        "repeat_times",
        "advantage_fn",
        "advantage_fn_args",
        "policy_loss_fn",
        "policy_loss_fn_args",
        "kl_penalty_fn",
        "kl_penalty_fn_args",
        "kl_loss_fn",
        "kl_loss_fn_args",
        "entropy_loss_fn",
        "entropy_loss_fn_args",
        "add_strategy",
        "add_strategy_args",
        "value_loss_fn",
        "value_loss_fn_args",
        "loss_agg_mode",
    }
)
"""Keys an algorithm's ``default_config()`` may contain."""

ConfigRule = Callable[[Any, Any], None]
"""A configuration rule of a preset: ``rule(preset_class, config)`` raises ``ValueError`` naming the
config key and the fix, may adjust the config where its docstring says so, and returns ``None``.
See :mod:`trinity_core.components.preset_rules` for the shared ones."""


class ConstantMeta(ABCMeta):
    """Metaclass making public class attributes write-once.

    Assigning (or deleting) a public attribute that the class or one of its algorithm-type bases
    defines raises ``AttributeError``: ``GRPOAlgorithm.use_critic = True`` would silently change every
    run in the process, whether the flag is written in the class or inherited from
    :class:`AlgorithmPreset`. Private names (``_name``, set by the registry) stay assignable.

    For every concrete class it also checks, at definition time, that the flags in
    :data:`ALGORITHM_FLAGS` are defined with the right types and that ``default_config()`` only uses
    keys from :data:`ALGORITHM_CONFIG_KEYS`. A base class meant only to be subclassed sets
    ``_template = True`` in its own body to skip the check.
    """

    def __init__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(name, bases, namespace, **kwargs)
        if bases and not inspect.isabstract(cls) and namespace.get("_template") is not True:
            _check_algorithm_class(cls)

    def _defines(cls, name: str) -> bool:
        return any(name in k.__dict__ for k in cls.__mro__ if isinstance(k, ConstantMeta))

    def __setattr__(cls, name: str, value: Any) -> None:
        if not name.startswith("_") and cls._defines(name):
            raise AttributeError(
                f"{cls.__qualname__}.{name} is a constant of the algorithm type and cannot be reassigned; "
                f"define a subclass with the value you need instead"
            )
        super().__setattr__(name, value)

    def __delattr__(cls, name: str) -> None:
        if not name.startswith("_") and name in cls.__dict__:
            raise AttributeError(f"{cls.__qualname__}.{name} is a constant of the algorithm type")
        super().__delattr__(name)


def _check_algorithm_class(cls: type) -> None:
    problems = []
    for flag, kind in ALGORITHM_FLAGS.items():
        if not hasattr(cls, flag):
            problems.append(f"missing class constant {flag}: {kind.__name__}")
        elif not isinstance(getattr(cls, flag), kind):
            problems.append(f"{flag} must be a {kind.__name__}, got {getattr(cls, flag)!r}")
    if problems:
        raise TypeError(f"algorithm type {cls.__qualname__}: " + "; ".join(problems))
    config = cls.default_config()  # type: ignore[attr-defined]
    if not isinstance(config, dict):
        raise TypeError(f"{cls.__qualname__}.default_config() must return a dict, got {config!r}")
    unknown = sorted(set(config) - ALGORITHM_CONFIG_KEYS)
    if unknown:
        raise TypeError(
            f"{cls.__qualname__}.default_config() has unknown keys {unknown}; allowed keys are "
            f"{sorted(ALGORITHM_CONFIG_KEYS)}"
        )


class AlgorithmType(ABC, metaclass=ConstantMeta):
    """Base of algorithm types: flags plus the default components of an algorithm.

    Subclasses define every flag and ``default_config()``::

        class GRPOAlgorithm(AlgorithmType):
            \"\"\"GRPO: group-relative advantages, PPO-clip loss.\"\"\"
            use_critic = False
            use_reference = True
            compute_advantage_in_trainer = False
            can_balance_batch = True
            schema = "experience"

            @classmethod
            def default_config(cls) -> dict:
                return {"repeat_times": 2, "advantage_fn": "grpo", "policy_loss_fn": "ppo"}

    Flags: ``use_critic`` (train a value model), ``use_reference`` (compute reference log-probs),
    ``compute_advantage_in_trainer`` (advantages from the trainer batch; False for algorithms that group
    experiences, whose advantages are computed in the experience pipeline), ``can_balance_batch`` (the
    trainer may reorder the batch to balance sequence lengths), ``schema`` (the experience schema:
    ``"experience"``, ``"sft"``, ``"cpt"`` or ``"dpo"``).
    """

    kind: ClassVar[str] = "algorithm"
    paper: ClassVar[str | None] = None
    """Citation or URL of the method, shown in listings."""
    requires: ClassVar[frozenset[str]] = frozenset()
    """What a run of the preset must provide besides its flags (``use_critic`` already asks for a
    critic): names as in :attr:`trinity_core.components.Component.requires`."""

    use_critic: bool
    use_reference: bool
    compute_advantage_in_trainer: bool
    can_balance_batch: bool
    schema: str

    @classmethod
    @abstractmethod
    def default_config(cls) -> dict[str, Any]:
        """Default configuration: keys from :data:`ALGORITHM_CONFIG_KEYS` (component names and args).

        User settings win; ``*_args`` dicts are merged per key over the component's defaults.
        """

    @classmethod
    def check_config(cls, config: Any) -> None:
        """Check (and where documented adjust) a resolved configuration before training.

        Raise ``ValueError`` with the offending key and the fix; the default accepts everything.
        """
        return None

    @classmethod
    def name(cls) -> str:
        """The registered name (``cls._name``, set by the registry), else the class name."""
        registered = cls.__dict__.get("_name")
        return registered if isinstance(registered, str) else cls.__name__

    @classmethod
    def summary(cls) -> str:
        """The first line of the class's own docstring ("" when it has none)."""
        return _first_line(cls.__doc__)


class AlgorithmPreset(AlgorithmType):
    """An algorithm type written as declarations: flags, default components, configuration rules.

    A preset states what differs from the common case and nothing else::

        class GRPOAlgorithm(AlgorithmPreset):
            \"\"\"GRPO: group-relative advantages in the experience pipeline, PPO-clip loss.\"\"\"

            paper = "https://arxiv.org/abs/2402.03300"
            defaults = {"repeat_times": 2, "advantage_fn": "grpo", "policy_loss_fn": "ppo"}
            config_rules = (advantage_placement,)

    Flags not written in the class keep the values below, the most common ones (a critic-free
    algorithm with a reference model, advantages computed in the experience pipeline on whole task
    groups, batch balancing allowed, ``"experience"`` schema). Every flag, inherited or not, is a
    write-once constant (see :class:`ConstantMeta`).

    Attributes:
        defaults: the default configuration, keys from :data:`ALGORITHM_CONFIG_KEYS`;
            :meth:`default_config` returns a deep copy, so callers may change what they get. A preset
            that is another one with a few components changed states only the difference,
            ``defaults = {**GRPOAlgorithm.defaults, "policy_loss_fn": "sapo"}`` (the base's key order
            is kept), when its distribution depends on the base's; it subclasses the base only if the
            base's flags and rules apply too.
        config_rules: rules :meth:`check_config` applies in order (:data:`ConfigRule`); shared ones live
            in :mod:`trinity_core.components.preset_rules`.
    """

    _template = True

    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    defaults: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    config_rules: ClassVar[tuple[ConfigRule, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "defaults" in cls.__dict__:
            # Read-only at the top level: a plugin mutating the class attribute would change every run.
            type.__setattr__(cls, "defaults", MappingProxyType(dict(cls.__dict__["defaults"])))
        bad = [rule for rule in cls.config_rules if not callable(rule)]
        if not isinstance(cls.config_rules, tuple) or bad:
            raise TypeError(
                f"{cls.__qualname__}.config_rules must be a tuple of callables rule(preset, config), "
                f"got {cls.config_rules!r}"
            )

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """A deep copy of :attr:`defaults`."""
        return copy.deepcopy(dict(cls.defaults))

    @classmethod
    def check_config(cls, config: Any) -> None:
        """Apply every rule of :attr:`config_rules`, in order; the first problem raises ``ValueError``."""
        for rule in cls.config_rules:
            rule(cls, config)
