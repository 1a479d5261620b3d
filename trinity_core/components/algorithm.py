"""Algorithm types: a named preset of flags and default components (seed ``trinity.algorithm.algorithm``).

An algorithm type tells the trainer what to run (critic? reference model? advantages in the trainer or
in the experience pipeline?) and which components to use unless the user names others. It has no
arguments of its own and is never instantiated: everything is a class constant or a classmethod.
"""

from __future__ import annotations

import inspect
from abc import ABC, ABCMeta, abstractmethod
from typing import Any, ClassVar, Final

from trinity_core.components.base import _first_line

__all__ = ["ALGORITHM_CONFIG_KEYS", "ALGORITHM_FLAGS", "AlgorithmType", "ConstantMeta"]

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
        "loss_agg_mode",
    }
)
"""Keys an algorithm's ``default_config()`` may contain."""


class ConstantMeta(ABCMeta):
    """Metaclass making public class attributes write-once.

    Assigning (or deleting) a public attribute that the class itself already defines raises
    ``AttributeError``: ``GRPOAlgorithm.use_critic = True`` would silently change every run in the
    process. Private names (``_name``, set by the registry) stay assignable.

    For every concrete class it also checks, at definition time, that the flags in
    :data:`ALGORITHM_FLAGS` are defined with the right types and that ``default_config()`` only uses
    keys from :data:`ALGORITHM_CONFIG_KEYS`.
    """

    def __init__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(name, bases, namespace, **kwargs)
        if bases and not inspect.isabstract(cls):
            _check_algorithm_class(cls)

    def __setattr__(cls, name: str, value: Any) -> None:
        if not name.startswith("_") and name in cls.__dict__:
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
