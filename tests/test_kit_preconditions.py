"""One problem, one failing check: a failing precondition skips the checks that depend on it with one
reason, check titles are whole, and ``--trinity-plugin`` given a component or folder name says which
distribution to pass (all three tripped an outside author writing a loss from the docs)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar

import pytest

from trinity_core.registry import reset_registry
from trinity_core.registry.shipped import SHIPPED
from trinity_core.testing import Subject, all_checks, check_names, distribution_cases
from trinity_core.testing._core import run_check

if TYPE_CHECKING:
    from plugin_dists import PluginSite

pytest_plugins = ["pytester", "plugin_dists"]

PLUGIN_ARGS = ["-p", "trinity_core.testing.plugin", "-v", "-rs", "-p", "no:cacheprovider"]

LOSSES = '''
import torch
from pydantic import Field
from trinity_core.components import LossAggArgs, PolicyLossFn


class ClipLoss(PolicyLossFn):
    """PPO clip: max(-A r, -A clip(r, 1-eps, 1+eps)), r = exp(logp - old)."""

    class Args(LossAggArgs):
        clip_range: float = Field(0.2, gt=0, description="Clip epsilon.")

    def __call__(self, logprob, old_logprob, action_mask, advantages, **kwargs):
        log_ratio = torch.where(action_mask, logprob - old_logprob, 0.0).clamp(-20, 20)
        ratio = torch.exp(log_ratio)
        adv = torch.where(action_mask, advantages, 0.0)
        clipped = ratio.clamp(1 - self.clip_range, 1 + self.clip_range)
        loss = self.aggregate(torch.maximum(-adv * ratio, -adv * clipped), action_mask)
        return loss, {"pg_loss": loss.detach()}


class BrokenDefault(ClipLoss):
    """PPO clip whose clip default breaks its own constraint: max(-A r, -A clip(r, 1-eps, 1+eps))."""

    class Args(LossAggArgs):
        clip_range: float = Field(-1.0, gt=0, description="Clip epsilon.")
'''


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_registry()
    yield
    reset_registry()


def _outcomes(result: pytest.RunResult) -> dict[str, str]:
    """``{case id: PASSED / FAILED / SKIPPED}`` from a verbose run."""
    found = {}
    for line in result.outlines:
        match = re.search(r"\[([^\]]+)\] (PASSED|FAILED|SKIPPED)", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def _depends_on(check_name: str, root: str) -> bool:
    checks = {c.name: c for c in all_checks()}
    todo = list(checks[check_name].requires)
    while todo:
        name = todo.pop()
        if name == root:
            return True
        todo.extend(checks[name].requires)
    return False


def test_a_broken_args_default_fails_one_check_and_skips_its_dependents_with_that_reason(
    pytester: pytest.Pytester, site: PluginSite
) -> None:
    mod = site.module("losses", LOSSES)
    site.dist(
        "trinity-plugin-broken", "0.1.0", {"trinity_core.policy_losses": {"broken": f"{mod}:BrokenDefault"}}
    )
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "--trinity-plugin=trinity-plugin-broken")
    outcomes = _outcomes(result)
    checks = check_names("policy_loss")
    assert set(outcomes) == {f"policy_loss:broken:{name}" for name in checks}
    failed = [case for case, outcome in outcomes.items() if outcome == "FAILED"]
    assert failed == ["policy_loss:broken:args_validate_with_defaults"]
    dependents = [name for name in checks if _depends_on(name, "args_validate_with_defaults")]
    # What used to fail with advice about other things: building, calling, invariance, default_args.
    assert {"builds_without_gpu", "loss_is_finite", "masked_positions_ignored", "rank_invariant"} <= set(
        dependents
    )
    for name in dependents:
        assert outcomes[f"policy_loss:broken:{name}"] == "SKIPPED", name
    result.assert_outcomes(failed=1, skipped=len(dependents), passed=len(checks) - 1 - len(dependents))
    out = result.stdout.str()
    assert out.count("precondition 'args_validate_with_defaults' failed: see that check") == len(dependents)
    assert "clip_range: the default -1.0 breaks its own constraint" in out
    assert "the kit calls it with valid inputs" not in out  # no advice about something else
    assert "microbatch_invariant = False" not in out
    # The title of the failing check is whole, not cut at "(..., and the):".
    result.stdout.fnmatch_lines(
        [
            "*fails conformance check 'args_validate_with_defaults' (Args() validates with every field "
            "defaulted, each default meets its own constraints, and the test's overrides validate):"
        ]
    )


def test_a_name_clash_fails_name_is_unique_and_skips_rank_invariant_of_that_name_only(
    pytester: pytest.Pytester, site: PluginSite
) -> None:
    mod = site.module("losses", LOSSES)
    site.dist("trinity-plugin-first", "1.0", {"trinity_core.policy_losses": {"same": f"{mod}:ClipLoss"}})
    site.dist(
        "trinity-plugin-second",
        "2.0",
        {"trinity_core.policy_losses": {"same": f"{mod}:ClipLoss", "own": f"{mod}:ClipLoss"}},
    )
    result = pytester.runpytest_inprocess(
        *PLUGIN_ARGS, "--trinity-plugin=trinity-plugin-second", "-k", "name_is_unique or rank_invariant"
    )
    outcomes = _outcomes(result)
    assert outcomes == {
        "policy_loss:own:name_is_unique": "PASSED",
        "policy_loss:own:rank_invariant": "PASSED",  # its 2-rank run is not spoilt by the clash
        "policy_loss:same:name_is_unique": "FAILED",
        "policy_loss:same:rank_invariant": "SKIPPED",
    }
    out = result.stdout.str()
    assert (
        "conformance check 'rank_invariant' not run: precondition 'name_is_unique' failed: see that check"
        in out
    )
    assert (
        "policy_loss 'same' is registered by both trinity-plugin-first 1.0 and trinity-plugin-second 2.0"
        in out
    )
    assert "gradient differs" not in out
    assert "make the plugin importable there" not in out


def test_a_precondition_the_component_opts_out_of_does_not_skip_its_dependents() -> None:
    from pydantic import Field

    from trinity_core.components import LossAggArgs, PolicyLossFn

    class Declared(PolicyLossFn):
        """A loss that opts out of the defaults check: its dependents run (and meet the bad default)."""

        conformance_skip: ClassVar[dict[str, str]] = {
            "args_validate_with_defaults": "defaults are checked elsewhere"
        }

        class Args(LossAggArgs):
            clip_range: float = Field(-1.0, gt=0, description="Clip epsilon.")

        def __call__(self, logprob, **kwargs):  # type: ignore[no-untyped-def]
            raise NotImplementedError

    subject = Subject("policy_loss", "declared", Declared, "<unregistered>")
    builds = next(c for c in all_checks() if c.name == "builds_without_gpu")
    with pytest.raises(pytest.fail.Exception, match="fails conformance check 'builds_without_gpu'"):
        run_check(subject, builds)  # run, not skipped: the opted-out check is no precondition


def test_every_check_title_is_its_whole_first_docstring_paragraph() -> None:
    dangling = {"a", "an", "and", "as", "at", "by", "of", "or", "the", "to", "with", "its", "that"}
    for chk in all_checks():
        paragraph = inspect.cleandoc(chk.func.__doc__ or "").split("\n\n", 1)[0]
        assert chk.summary == " ".join(paragraph.split()), chk.name
        assert chk.summary.split()[-1].lower() not in dangling, f"{chk.name}: {chk.summary!r}"
    by_name = {c.name: c for c in all_checks()}
    assert by_name["args_validate_with_defaults"].summary.endswith("and the test's overrides validate")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        # the component name, as the outside author typed it
        (
            "ce_gppo",
            "'ce_gppo' is the name of a policy loss that the installed distribution "
            "'trinity-plugin-ce-gppo' provides: run pytest --trinity-plugin=trinity-plugin-ce-gppo",
        ),
        # the plugin folder, or the name without the prefix
        (
            "plugins/trinity-plugin-ce-gppo/",
            "the installed distribution is 'trinity-plugin-ce-gppo': run pytest "
            "--trinity-plugin=trinity-plugin-ce-gppo",
        ),
        (
            "ce-gppo",
            "the installed distribution is 'trinity-plugin-ce-gppo': run pytest "
            "--trinity-plugin=trinity-plugin-ce-gppo",
        ),
        # a shipped plugin's component, its distribution not installed
        (
            "tt_shipped_loss",
            "'tt_shipped_loss' is a policy loss of the shipped plugin trinity-plugin-tt-shipped, which is "
            "not installed: pip install trinity-plugin-tt-shipped (from a wheelhouse: pip install "
            "--find-links dist trinity-plugin-tt-shipped; from a checkout: pip install "
            "./plugins/trinity-plugin-tt-shipped); then run pytest "
            "--trinity-plugin=trinity-plugin-tt-shipped",
        ),
        ("trinity-plugin-ce-gpp", "did you mean 'trinity-plugin-ce-gppo'"),
    ],
)
def test_a_name_that_is_not_a_distribution_gets_the_distribution_that_provides_it(
    site: PluginSite, monkeypatch: pytest.MonkeyPatch, given: str, expected: str
) -> None:
    mod = site.module("losses", LOSSES)
    site.dist(
        "trinity-plugin-ce-gppo", "0.1.0", {"trinity_core.policy_losses": {"ce_gppo": f"{mod}:ClipLoss"}}
    )
    monkeypatch.setitem(SHIPPED["trinity_core.policy_losses"], "tt_shipped_loss", "trinity-plugin-tt-shipped")
    [case] = distribution_cases(given)
    assert case.problem is not None
    assert case.problem.startswith(f"distribution {given!r} is not installed in this environment")
    assert expected in case.problem, case.problem
    assert f"plugins/{given})" not in case.problem  # not the folder it made up from the name
