"""Entry-point discovery: lazy resolution, isolated listing, conflicts, strict mode, in-process use."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from trinity_core.components import AdvantageFn, KLFn
from trinity_core.registry import (
    ComponentArgsError,
    EntryPointInfo,
    PluginConflictError,
    PluginError,
    PluginLoadError,
    Registration,
    Registry,
    UnknownComponentError,
    get_kind,
    kinds,
)

if TYPE_CHECKING:
    from plugin_dists import PluginSite

pytest_plugins = ["plugin_dists"]

NS = "trinity_core.kl_fns"

KL_MODULE = '''
from pydantic import Field
from trinity_core.components import AdvantageFn, KLFn


class SquareKL(KLFn):
    """Squared log-ratio: 0.5 (logp - ref)^2."""

    paper = "https://example.org/k2"

    class Args(KLFn.Args):
        scale: float = Field(1.0, gt=0, description="Extra scale.")

    def calculate_kl(self, logprob, ref_logprob, old_logprob=None):
        return 0.5 * self.scale * (logprob - ref_logprob) ** 2


class NotAKL:
    """Not a KLFn."""
'''


def _install_kl(site: PluginSite, dist: str = "tt-kl", version: str = "1.2.0", name: str = "square") -> str:
    mod = site.module("kl", KL_MODULE)
    site.dist(dist, version, {NS: {name: f"{mod}:SquareKL"}})
    return mod


def _install_broken(site: PluginSite, name: str = "broken") -> str:
    mod = site.module(
        name,
        f"import sys\nsys.modules.setdefault('{site.mod('imported_' + name)}', sys)\n"
        "raise ImportError('needs a library that is not installed')\n",
    )
    site.dist(f"tt-{name}", "0.0.1", {NS: {name: f"{mod}:Anything"}})
    return mod


def test_resolve_installed_plugin_with_provenance(site: PluginSite) -> None:
    _install_kl(site)
    reg = Registry()
    record = reg.record("kl_fn", "square")
    assert issubclass(record.obj, KLFn)
    assert (record.distribution, record.version) == ("tt-kl", "1.2.0")
    assert record.summary == "Squared log-ratio: 0.5 (logp - ref)^2."
    assert record.paper == "https://example.org/k2"
    assert record.obj.name() == "square"
    assert reg.resolve("kl_fn", "square") is record.obj


def test_resolving_one_name_never_imports_an_unrelated_broken_plugin(site: PluginSite) -> None:
    kl_mod = _install_kl(site)
    broken_mod = _install_broken(site)
    reg = Registry()
    reg.resolve("kl_fn", "square")
    assert kl_mod in sys.modules
    assert broken_mod not in sys.modules
    assert site.mod("imported_broken") not in sys.modules


def test_listing_isolates_failures_and_records_them(site: PluginSite) -> None:
    _install_kl(site)
    broken_mod = _install_broken(site)
    records = {r.name: r for r in Registry().list_components("kl_fn", strict=False)}
    assert records["square"].obj is not None
    assert records["square"].error is None
    failure = records["broken"].error
    assert records["broken"].obj is None
    assert failure is not None
    assert failure.kind == "kl_fn"
    assert failure.entry_point == EntryPointInfo(NS, "broken", f"{broken_mod}:Anything", "tt-broken", "0.0.1")
    assert failure.error_type == "ImportError"
    assert failure.message == "needs a library that is not installed"
    assert "Traceback" in failure.traceback
    assert broken_mod in failure.traceback


def test_broken_plugin_is_imported_once_and_load_error_says_how_to_block_it(site: PluginSite) -> None:
    _install_broken(site)
    reg = Registry()
    reg.list_components("kl_fn", strict=False)
    del sys.modules[site.mod("imported_broken")]  # the marker is set again only if the module re-runs
    with pytest.raises(PluginLoadError) as info:
        reg.resolve("kl_fn", "broken")
    assert site.mod("imported_broken") not in sys.modules
    assert "tt-broken 0.0.1" in str(info.value)
    assert "TRINITY_DISABLE_PLUGINS=tt-broken" in str(info.value)


def test_strict_mode_raises_after_trying_every_plugin(
    site: PluginSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_kl(site)
    _install_broken(site, "broken")
    _install_broken(site, "broken2")
    with pytest.raises(PluginLoadError) as info:
        Registry().list_components("kl_fn", strict=True)
    assert "'broken'" in str(info.value)
    assert "'broken2'" in str(info.value)
    monkeypatch.setenv("TRINITY_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError):
        Registry().list_components("kl_fn")
    assert Registry().resolve("kl_fn", "square").name() == "square"  # a healthy name still resolves


def test_two_distributions_with_one_name_conflict_and_can_be_disabled(
    site: PluginSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = _install_kl(site, "tt-sapo", "0.1.0", name="dup")
    site.dist("tt-sapo-fork", "0.2.0", {NS: {"dup": f"{mod}:SquareKL"}})
    reg = Registry()
    with pytest.raises(PluginConflictError) as info:
        reg.resolve("kl_fn", "dup")
    message = str(info.value)
    assert "tt-sapo 0.1.0" in message
    assert "tt-sapo-fork 0.2.0" in message
    assert "uninstall" in message
    assert "TRINITY_DISABLE_PLUGINS" in message
    assert [c.name for c in reg.conflicts("kl_fn")] == ["dup"]
    with pytest.raises(PluginConflictError):
        reg.list_components("kl_fn", strict=True)

    monkeypatch.setenv("TRINITY_DISABLE_PLUGINS", "TT_Sapo.Fork")  # normalized like pip does
    reg.refresh()
    assert reg.record("kl_fn", "dup").distribution == "tt-sapo"
    assert [ep.distribution for ep in reg.disabled()] == ["tt-sapo-fork"]


def test_same_distribution_seen_twice_is_not_a_conflict(site: PluginSite, tmp_path: Path) -> None:
    mod = _install_kl(site)
    other = tmp_path / "second_path_entry"
    other.mkdir()
    site.dist("tt-kl", "1.2.0", {NS: {"square": f"{mod}:SquareKL"}}, root=other)
    sys.path.append(str(other))
    try:
        assert Registry().conflicts("kl_fn") == []
        assert Registry().record("kl_fn", "square").distribution == "tt-kl"
    finally:
        sys.path.remove(str(other))


def test_unknown_name_lists_installed_names_failures_and_close_matches(site: PluginSite) -> None:
    _install_kl(site)
    _install_broken(site)
    with pytest.raises(UnknownComponentError) as info:
        Registry().resolve("kl_fn", "sqaure")
    message = str(info.value)
    assert "unknown KL function 'sqaure'" in message
    assert "Did you mean 'square'?" in message
    assert "broken" in message
    assert "ImportError" in message
    assert "tt-broken 0.0.1" in message
    assert "register('kl_fn', 'sqaure', cls)" in message


def test_unknown_kind_lists_the_kinds() -> None:
    with pytest.raises(PluginError, match="known kinds: algorithm, advantage_fn"):
        get_kind("policy_losses")
    assert {k.namespace for k in kinds()} >= {"trinity_core.policy_losses", "trinity_core.kl_fns"}
    assert all(not k.namespace.startswith("trinity.") for k in kinds())


def test_wrong_base_class_is_a_load_error_naming_plugin_and_distribution(site: PluginSite) -> None:
    mod = site.module("kl", KL_MODULE)
    site.dist("tt-wrong", "3.0", {NS: {"wrong": f"{mod}:NotAKL"}})
    reg = Registry()
    with pytest.raises(PluginLoadError) as info:
        reg.resolve("kl_fn", "wrong")
    assert "'wrong'" in str(info.value)
    assert "tt-wrong 3.0" in str(info.value)
    assert "not a subclass of KLFn" in str(info.value)
    (wrong,) = [r for r in reg.list_components("kl_fn", strict=False) if r.name == "wrong"]
    assert wrong.error is not None


def test_class_under_two_names_keeps_its_first_name(site: PluginSite) -> None:
    mod = site.module("kl", KL_MODULE)
    site.dist("tt-two", "1.0", {NS: {"first": f"{mod}:SquareKL", "second": f"{mod}:SquareKL"}})
    reg = Registry()
    second = reg.record("kl_fn", "second")
    first = reg.record("kl_fn", "first")
    assert first.obj is second.obj
    assert (first.name, second.name) == ("first", "second")
    assert first.obj.name() == "second"  # set once, never overwritten


def test_entry_point_scan_is_cached_until_refresh(site: PluginSite) -> None:
    reg = Registry()
    assert "square" not in reg.names("kl_fn")
    _install_kl(site)
    assert "square" not in reg.names("kl_fn")
    reg.refresh()
    assert "square" in reg.names("kl_fn")


class LocalKL(KLFn):
    """A KL defined in a notebook."""

    def calculate_kl(self, logprob, ref_logprob, old_logprob=None):  # type: ignore[no-untyped-def]
        return logprob - ref_logprob


def test_in_process_registration_conflicts_unless_replace(site: PluginSite) -> None:
    _install_kl(site)
    reg = Registry()
    with pytest.raises(PluginConflictError, match=r"tt-kl 1\.2\.0.*replace=True"):
        reg.register("kl_fn", "square", LocalKL)
    reg.register("kl_fn", "square", LocalKL, replace=True)
    assert reg.resolve("kl_fn", "square") is LocalKL
    reg.unregister("kl_fn", "square")
    assert reg.resolve("kl_fn", "square") is not LocalKL

    rec = reg.register("kl_fn", "local", LocalKL)
    assert reg.register("kl_fn", "local", LocalKL) == rec  # idempotent
    assert rec.distribution == "<in-process>"
    with pytest.raises(PluginLoadError, match="not a subclass of KLFn"):
        reg.register("kl_fn", "bad", object)


def test_hook_registrations_are_pulled_once(site: PluginSite) -> None:
    calls = []
    origin = EntryPointInfo("trinity_core.hooks", "nb", "nb_module", "tt-hooks", "0.3")

    def source():  # type: ignore[no-untyped-def]
        calls.append(1)
        yield Registration("kl_fn", "from_hook", LocalKL), origin

    reg = Registry(hook_source=source)
    record = reg.record("kl_fn", "from_hook")
    assert record.obj is LocalKL
    assert record.distribution == "tt-hooks"
    assert record.version == "0.3"
    reg.names("kl_fn")
    assert calls == [1]


def test_create_validates_args_per_key_and_names_the_component(site: PluginSite) -> None:
    _install_kl(site)
    reg = Registry()
    kl = reg.create("kl_fn", "square", {"scale": 2.0})
    assert (kl.scale, kl.kl_coef) == (2.0, 0.001)
    with pytest.raises(ComponentArgsError) as info:
        reg.create("kl_fn", "square", {"scael": 2.0, "kl_coef": -1})
    message = str(info.value)
    assert "KL function 'square' (tt-kl 1.2.0)" in message
    assert "scael: unknown key; did you mean 'scale'?" in message
    assert "kl_coef: Input should be greater than or equal to 0 (got -1)" in message
    assert {k for k, _ in info.value.problems} == {"scael", "kl_coef"}


@pytest.mark.parametrize(
    ("kind", "name", "replacement"),
    [
        ("algorithm", "grpo_verl", "'grpo'"),
        ("advantage_fn", "opmd_verl", "'opmd'"),
        ("advantage_fn", "asymre_verl", "'asymre'"),
    ],
)
def test_trinity_rft_names_without_an_equal_component_are_refused_in_one_line_naming_the_replacement(
    kind: str, name: str, replacement: str
) -> None:
    with pytest.raises(UnknownComponentError) as info:
        Registry().resolve(kind, name)
    message = str(info.value)
    assert "\n" not in message
    assert f"{name!r} of trinity-rft 0.6.0 is not provided by trinity-core: use " in message
    assert replacement in message


def test_retired_names_are_no_shipped_component_and_a_plugin_may_still_provide_one() -> None:
    from trinity_core.registry.retired import RETIRED
    from trinity_core.registry.shipped import SHIPPED

    for kind, names in RETIRED.items():
        assert not set(names) & set(SHIPPED[get_kind(kind).namespace]), kind
    # The trainer-side grpo_verl advantage function equals the reference's and stays a component.
    assert "grpo_verl" in SHIPPED["trinity_core.advantage_fns"]
    reg = Registry()
    reg.register("advantage_fn", "opmd_verl", _TrainerSideOPMD)
    assert reg.resolve("advantage_fn", "opmd_verl") is _TrainerSideOPMD


class _TrainerSideOPMD(AdvantageFn):
    """A plugin's own ``opmd_verl``: a registered name wins over the refusal."""

    def __call__(self, exps: object, **kwargs: object) -> tuple[object, dict[str, float]]:
        return exps, {}

    @classmethod
    def default_args(cls) -> dict[str, object]:
        return {}
