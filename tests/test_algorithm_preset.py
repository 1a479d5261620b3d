"""AlgorithmPreset: flags, defaults and configuration rules declared as class attributes."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from trinity_core.components import AlgorithmPreset, AlgorithmType
from trinity_core.components.preset_rules import no_kl_without_reference


class NoReference(AlgorithmPreset):
    """A preset without a reference model."""

    use_reference = False
    defaults: ClassVar[dict[str, Any]] = {"repeat_times": 4, "advantage_fn_args": {"epsilon": 1e-6}}
    config_rules = (no_kl_without_reference,)


def test_flags_not_written_are_the_common_ones_and_all_are_write_once() -> None:
    assert issubclass(NoReference, AlgorithmType)
    flags = ("use_critic", "use_reference", "compute_advantage_in_trainer", "can_balance_batch", "schema")
    assert tuple(getattr(NoReference, f) for f in flags) == (False, False, False, True, "experience")
    for flag in ("use_reference", "use_critic"):  # written in the class, and inherited
        with pytest.raises(AttributeError, match="constant of the algorithm type"):
            setattr(NoReference, flag, True)


def test_default_config_is_a_deep_copy_of_read_only_defaults() -> None:
    config = NoReference.default_config()
    assert config == {"repeat_times": 4, "advantage_fn_args": {"epsilon": 1e-6}}
    config["advantage_fn_args"]["epsilon"] = 1.0
    assert NoReference.default_config()["advantage_fn_args"] == {"epsilon": 1e-6}
    with pytest.raises(TypeError):
        NoReference.defaults["repeat_times"] = 8  # type: ignore[index]


def test_check_config_applies_the_declared_rules_in_order() -> None:
    NoReference.check_config({"algorithm": {"kl_loss_fn": "none"}})
    with pytest.raises(ValueError, match=r"algorithm\.kl_loss_fn is 'k2' but algorithm 'NoReference'"):
        NoReference.check_config({"algorithm": {"kl_loss_fn": "k2"}})
    seen: list[str] = []

    class Ordered(AlgorithmPreset):
        """Two rules."""

        config_rules = (lambda p, c: seen.append("first"), lambda p, c: seen.append("second"))

    Ordered.check_config({})
    assert seen == ["first", "second"]


def test_bad_declarations_fail_at_class_definition() -> None:
    with pytest.raises(TypeError, match="unknown keys"):

        class UnknownKey(AlgorithmPreset):
            """Bad key."""

            defaults: ClassVar[dict[str, Any]] = {"repeat_time": 2}

    with pytest.raises(TypeError, match="config_rules must be a tuple of callables"):

        class NotCallable(AlgorithmPreset):
            """Bad rule."""

            config_rules = ("advantage_placement",)  # type: ignore[assignment]
