"""pluggy hooks: isolated loading of hook plugins, check_pending, pipeline order, registrations."""

from __future__ import annotations

import inspect
import sys
import types
from typing import TYPE_CHECKING, Any

import pytest

from trinity_core import hookspecs
from trinity_core.components import KLFn
from trinity_core.experience import Experience
from trinity_core.hooks import (
    HookCallError,
    HookError,
    PluginLoadWarning,
    TrinityPluginManager,
    collect_config_problems,
    get_plugin_manager,
    notify_metrics,
    run_experience_pipeline,
)
from trinity_core.hookspecs import hookimpl
from trinity_core.registry import PluginLoadError, Registration, get_registry

if TYPE_CHECKING:
    from plugin_dists import PluginSite

pytest_plugins = ["plugin_dists"]

HOOKS = "trinity_core.hooks"

GOOD_HOOKS = """
from trinity_core.hookspecs import hookimpl

@hookimpl
def trinity_on_metrics(step, metrics):
    SEEN.append((step, dict(metrics)))

SEEN = []
"""

MISSPELLED_HOOKS = """
from trinity_core.hookspecs import hookimpl

@hookimpl
def trinity_on_metric(step, metrics):
    pass
"""


def _plugin(**hooks: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{name: hookimpl(fn) for name, fn in hooks.items()})


def test_every_hookspec_documents_args_return_firstresult_example_and_version() -> None:
    specs = [getattr(hookspecs, n) for n in dir(hookspecs) if n.startswith("trinity_")]
    assert len(specs) == 4
    for spec in specs:
        doc = inspect.getdoc(spec) or ""
        assert "Example::" in doc, spec.__name__
        assert "versionadded:: 0.1.0" in doc, spec.__name__
        assert "firstresult" in doc, spec.__name__
        assert "Returns:" in doc, spec.__name__
        assert "Args:" in doc, spec.__name__


def test_entry_point_hooks_load_with_their_distribution(site: PluginSite) -> None:
    mod = site.module("hooks", GOOD_HOOKS)
    site.dist("tt-logger", "0.4.0", {HOOKS: {"logger": mod}})
    pm = TrinityPluginManager()
    pm.load_entry_points()
    origin = pm.origin("logger")
    assert origin is not None
    assert origin.provider == "tt-logger 0.4.0"
    notify_metrics(pm, 3, {"reward/mean": 0.5})
    assert pm.get_plugin("logger").SEEN == [(3, {"reward/mean": 0.5})]


def test_broken_and_misspelled_hook_plugins_are_recorded_and_others_still_load(site: PluginSite) -> None:
    good = site.module("hooks", GOOD_HOOKS)
    bad = site.module("misspelled", MISSPELLED_HOOKS)
    broken = site.module("broken", "raise RuntimeError('boom at import')\n")
    site.dist("tt-good", "1.0", {HOOKS: {"good": good}})
    site.dist("tt-typo", "1.0", {HOOKS: {"typo": bad}})
    site.dist("tt-broken", "1.0", {HOOKS: {"broken": broken}})
    pm = TrinityPluginManager()
    with pytest.warns(PluginLoadWarning, match="its hooks will not run"):
        pm.load_entry_points(strict=False)
    assert pm.get_plugin("good") is not None
    assert pm.get_plugin("typo") is None
    failures = {f.entry_point.name: f for f in pm.failures}
    assert set(failures) == {"typo", "broken"}
    assert failures["broken"].message == "boom at import"
    assert "did you mean 'trinity_on_metrics'?" in failures["typo"].message
    assert "tt-typo 1.0" in failures["typo"].message


def test_strict_mode_raises_on_a_broken_hook_plugin(
    site: PluginSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = site.module("broken", "raise RuntimeError('boom at import')\n")
    site.dist("tt-broken", "1.0", {HOOKS: {"broken": broken}})
    monkeypatch.setenv("TRINITY_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match="TRINITY_DISABLE_PLUGINS=tt-broken"):
        TrinityPluginManager().load_entry_points()


def test_in_process_misspelled_hook_is_an_error_naming_the_plugin() -> None:
    pm = TrinityPluginManager()
    plugin = _plugin(trinity_process_experience=lambda experiences, step: None)
    with pytest.raises(HookError) as info:
        pm.register(plugin, name="my_filter")
    message = str(info.value)
    assert "'my_filter'" in message
    assert "did you mean 'trinity_process_experiences'?" in message
    assert pm.get_plugin("my_filter") is None


def _exp(tag: str) -> Experience:
    return Experience(tokens=[1, 2], prompt_length=1, info={"tag": tag})


def _tags(experiences: list[Experience]) -> list[str]:
    return [e.info["tag"] for e in experiences]


def test_pipeline_order_tryfirst_registration_order_trylast() -> None:
    pm = TrinityPluginManager()

    def stage(tag: str) -> Any:
        return lambda experiences, step: [*experiences, _exp(f"{tag}@{step}")]

    late = types.SimpleNamespace(trinity_process_experiences=hookimpl(trylast=True)(stage("late")))
    first = types.SimpleNamespace(trinity_process_experiences=hookimpl(tryfirst=True)(stage("first")))
    pm.register(late, name="late")
    pm.register(_plugin(trinity_process_experiences=stage("a")), name="a")
    pm.register(first, name="first")
    pm.register(_plugin(trinity_process_experiences=lambda experiences, step: None), name="keep")
    pm.register(_plugin(trinity_process_experiences=stage("b")), name="b")
    got = run_experience_pipeline(pm, [_exp("x")], 7)
    assert _tags(got) == ["x", "first@7", "a@7", "b@7", "late@7"]


def test_pipeline_stage_filters_and_errors_name_the_plugin() -> None:
    pm = TrinityPluginManager()
    pm.register(_plugin(trinity_process_experiences=lambda experiences, step: experiences[1:]), name="drop1")
    assert _tags(run_experience_pipeline(pm, [_exp("1"), _exp("2"), _exp("3")], 0)) == ["2", "3"]
    pm.register(
        _plugin(trinity_process_experiences=lambda experiences, step: tuple(experiences)), name="tuple"
    )
    with pytest.raises(HookCallError, match=r"plugin 'tuple'.*returned tuple"):
        run_experience_pipeline(pm, [_exp("1"), _exp("2")], 0)


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (lambda experiences: [None], r"plugin 'bad' at step 3 returned a list whose item 0 is NoneType"),
        (lambda experiences: [*experiences, "x"], r"item 1 is str, not an Experience"),
        (lambda experiences: [], r"plugin 'bad' at step 3 dropped every experience of the step"),
    ],
    ids=["none", "a-string", "empty"],
)
def test_a_stage_must_return_experiences_and_keep_some(returned: Any, message: str) -> None:
    pm = TrinityPluginManager()
    pm.register(
        _plugin(trinity_process_experiences=lambda experiences, step: returned(experiences)), name="bad"
    )
    with pytest.raises(HookCallError, match=message):
        run_experience_pipeline(pm, [_exp("1")], 3)


def test_a_stage_may_leave_an_empty_step_empty() -> None:
    pm = TrinityPluginManager()
    pm.register(_plugin(trinity_process_experiences=lambda experiences, step: []), name="filter")
    assert run_experience_pipeline(pm, [], 3) == []


def test_pipeline_wraps_stage_exceptions_and_exits() -> None:
    pm = TrinityPluginManager()

    def crash(experiences: list[Any], step: int) -> list[Any]:
        raise ValueError("bad reward")

    pm.register(_plugin(trinity_process_experiences=crash), name="shaper")
    with pytest.raises(HookCallError, match=r"plugin 'shaper'.*step 4.*bad reward"):
        run_experience_pipeline(pm, [], 4)
    pm.unregister(name="shaper")
    pm.register(_plugin(trinity_process_experiences=lambda experiences, step: sys.exit(2)), name="quitter")
    with pytest.raises(HookCallError, match=r"plugin 'quitter' at step 4 called sys.exit\(2\)"):
        run_experience_pipeline(pm, [], 4)


def test_an_observer_that_raises_or_exits_is_named() -> None:
    pm = TrinityPluginManager()
    seen: list[dict[str, float]] = []
    pm.register(_plugin(trinity_on_metrics=lambda metrics: seen.append(metrics)), name="partial-args")
    notify_metrics(pm, 5, {"reward/mean": 1.0})
    assert seen == [{"reward/mean": 1.0}]  # an observer may declare only the arguments it reads
    pm.register(_plugin(trinity_on_metrics=lambda step, metrics: sys.exit(0)), name="stopper")
    with pytest.raises(
        HookCallError, match=r"trinity_on_metrics of plugin 'stopper' after step 5 called sys.exit"
    ):
        notify_metrics(pm, 5, {})


def test_check_config_problems_are_prefixed_with_the_plugin() -> None:
    pm = TrinityPluginManager()

    def check(config: Any) -> Any:
        if config["n"] < 2:
            yield "n must be at least 2"

    pm.register(_plugin(trinity_check_config=check), name="rules")
    pm.register(_plugin(trinity_check_config=lambda config: None), name="quiet")
    assert collect_config_problems(pm, {"n": 1}) == ["plugin 'rules': n must be at least 2"]
    assert collect_config_problems(pm, {"n": 3}) == []


class HookKL(KLFn):
    """A KL registered through a hook."""

    def calculate_kl(self, logprob, ref_logprob, old_logprob=None):  # type: ignore[no-untyped-def]
        return logprob - ref_logprob


def test_register_components_hook_feeds_the_global_registry(site: PluginSite) -> None:
    def registrations() -> Any:
        yield Registration("kl_fn", "hook_kl", HookKL)

    get_plugin_manager().register(_plugin(trinity_register_components=registrations), name="nb")
    record = get_registry().record("kl_fn", "hook_kl")
    assert record.obj is HookKL
    assert record.distribution == "<in-process>"
    assert HookKL.name() == "hook_kl"


def test_register_components_hook_must_yield_registrations() -> None:
    pm = TrinityPluginManager()
    pm.register(_plugin(trinity_register_components=lambda: [("kl_fn", "x", HookKL)]), name="sloppy")
    with pytest.raises(HookCallError, match=r"plugin 'sloppy'.*Registration"):
        list(pm.component_registrations())


def test_registry_never_imports_hooks() -> None:
    import subprocess
    import sys

    code = "import sys, trinity_core.registry; print('trinity_core.hooks' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
