"""The kit and ``config validate`` catch what used to pass until ``trinity train``: a default that breaks
its own constraint, and a name shared with another installed distribution."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest
from pydantic import Field

from trinity_core.components import AlgorithmType, EntropyLossFn, KLFn, PolicyLossFn
from trinity_core.components._aggregation import LossAggArgs
from trinity_core.config import ConfigError, resolve_config
from trinity_core.hooks import TrinityPluginManager
from trinity_core.registry import Registry
from trinity_core.registry.args import default_problems
from trinity_core.testing import Subject, all_checks, distribution_cases
from trinity_core.testing._core import run_check

if TYPE_CHECKING:
    from plugin_dists import PluginSite

pytest_plugins = ["plugin_dists"]
ROOT = Path(__file__).resolve().parents[1]


class BrokenDefault(PolicyLossFn):
    """A loss whose clip default breaks its own constraint: -A r."""

    class Args(LossAggArgs):
        clip_range: float = Field(-1.0, gt=0, description="Clip epsilon.")

    def __call__(self, logprob: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class Preset(AlgorithmType):
    """Uses the broken loss."""

    use_critic = False
    use_reference = False
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"
    config: ClassVar[dict[str, Any]] = {"policy_loss_fn": "broken", "kl_loss_fn": "none"}

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return dict(cls.config)


class NoKL(KLFn):
    """Zero."""

    def calculate_kl(self, logprob: Any, ref_logprob: Any, old_logprob: Any = None) -> Any:
        raise NotImplementedError


class Entropy(EntropyLossFn):
    """Zero."""

    def __call__(self, entropy: Any, action_mask: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_default_problems_name_the_field_and_the_constraint() -> None:
    assert default_problems(BrokenDefault.Args) == (
        (
            "clip_range",
            "the default -1.0 breaks its own constraint: Input should be greater than 0 (got -1.0)",
        ),
    )
    assert default_problems(LossAggArgs) == ()


def test_the_kit_fails_a_default_that_breaks_its_constraint() -> None:
    subject = Subject("policy_loss", "broken", BrokenDefault, "trinity-plugin-x", "0.1.0")
    with pytest.raises(pytest.fail.Exception) as info:
        run_check(subject, next(c for c in all_checks() if c.name == "args_validate_with_defaults"))
    message = str(info.value)
    assert "policy loss 'broken'" in message
    assert "trinity-plugin-x 0.1.0" in message
    assert "clip_range: the default -1.0 breaks its own constraint" in message
    assert "How to fix: make each default satisfy its Field constraints" in message


def test_config_validate_reports_a_broken_default_unless_the_config_sets_it() -> None:
    reg = Registry(entry_points=False)
    for kind, name, cls in [
        ("algorithm", "p", Preset),
        ("policy_loss", "broken", BrokenDefault),
        ("kl_fn", "none", NoKL),
        ("entropy_loss", "default", Entropy),
    ]:
        reg.register(kind, name, cls)

    def resolve(config: dict[str, Any]) -> Any:
        return resolve_config(config, registry=reg, plugin_manager=TrinityPluginManager())

    with pytest.raises(ConfigError) as info:
        resolve({"algorithm": {"algorithm_type": "p"}})
    [problem] = info.value.problems
    assert problem.path == "algorithm.policy_loss_fn_args.clip_range"
    assert "the default -1.0 breaks its own constraint" in str(problem)
    assert "fix the plugin's Args default, or set algorithm.policy_loss_fn_args.clip_range" in str(problem)
    fixed = resolve({"algorithm": {"algorithm_type": "p", "policy_loss_fn_args": {"clip_range": 0.2}}})
    assert fixed.algorithm.policy_loss_fn_args["clip_range"] == 0.2


def test_the_kit_fails_a_name_shared_with_another_distribution_naming_both(site: PluginSite) -> None:
    mod = site.module(
        "clash", "from trinity_core.components import PolicyLossFn\nclass L(PolicyLossFn):\n    pass\n"
    )
    site.dist("trinity-plugin-first", "1.0", {"trinity_core.policy_losses": {"same": f"{mod}:L"}})
    site.dist(
        "trinity-plugin-second",
        "2.0",
        {"trinity_core.policy_losses": {"same": f"{mod}:L", "own": f"{mod}:L"}},
    )
    site.dist("trinity-plugin-third", "3.0", {"trinity_core.policy_losses": {"alone": f"{mod}:L"}})
    for dist in ("trinity-plugin-first", "trinity-plugin-second"):
        clash = [c for c in distribution_cases(dist) if c.id == "policy_loss:same:name_is_unique"]
        assert len(clash) == 1
        with pytest.raises(pytest.fail.Exception) as info:
            clash[0].run()
        problem = str(info.value)
        assert "trinity-plugin-first 1.0" in problem
        assert "trinity-plugin-second 2.0" in problem
        assert f"How to fix: rename the entry point in {dist}'s pyproject.toml" in problem
    [own] = [
        c for c in distribution_cases("trinity-plugin-second") if c.id == "policy_loss:own:name_is_unique"
    ]
    own.run()  # passes: nobody else claims 'own'
    [alone] = [c for c in distribution_cases("trinity-plugin-third") if c.id.endswith("name_is_unique")]
    alone.run()


def test_the_test_extra_brings_pytest_and_the_docs_say_to_install_it() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(dep.startswith("pytest") for dep in extras["test"])
    assert "pip install 'trinity-core[test]'" in (ROOT / "docs" / "conformance.md").read_text()
