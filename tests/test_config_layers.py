"""Precedence: embedded default, preset, config file, ``--set``; ``trinity config validate --explain``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from trinity_core.cli.main import main
from trinity_core.components import AlgorithmType, EntropyLossFn, KLFn, PolicyLossFn
from trinity_core.components._aggregation import LossAggArgs
from trinity_core.config import ConfigError, resolve_config
from trinity_core.config.layers import apply_overrides, layer_config
from trinity_core.hooks import TrinityPluginManager
from trinity_core.registry import Registry


class _Preset(AlgorithmType):
    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"
    config: ClassVar[dict[str, Any]] = {}

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return dict(cls.config)


class Home(_Preset):
    """The embedded default's preset: two responses, the loss's clip 0.2."""

    config: ClassVar[dict[str, Any]] = {"repeat_times": 2, "policy_loss_fn": "clip"}


class WithKL(_Preset):
    """Sets its own group size and a k2 KL loss with a coefficient."""

    config: ClassVar[dict[str, Any]] = {
        "repeat_times": 4,
        "policy_loss_fn": "clip",
        "kl_loss_fn": "k2",
        "kl_loss_fn_args": {"kl_coef": 0.05},
    }


class Bare(_Preset):
    """Sets nothing: every key falls through to the embedded default, then the base defaults."""


class Clip(PolicyLossFn):
    """A loss with one argument."""

    class Args(LossAggArgs):
        clip_range: float = 0.2

    def __call__(self, logprob: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class K2(KLFn):
    """A KL function with a coefficient."""

    class Args(KLFn.Args):
        pass

    def calculate_kl(self, logprob: Any, ref_logprob: Any, old_logprob: Any = None) -> Any:
        raise NotImplementedError


class Entropy(EntropyLossFn):
    """The default entropy term."""

    def __call__(self, entropy: Any, action_mask: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


EMBEDDED = {
    "algorithm": {"algorithm_type": "home", "repeat_times": 16, "kl_loss_fn": "none"},
    "trainer": {"lr": 3e-4, "total_steps": 800},
}


@pytest.fixture
def registry() -> Registry:
    reg = Registry(entry_points=False)
    for kind, name, cls in [
        ("algorithm", "home", Home),
        ("algorithm", "withkl", WithKL),
        ("algorithm", "bare", Bare),
        ("policy_loss", "clip", Clip),
        ("policy_loss", "ppo", Clip),
        ("kl_fn", "k2", K2),
        ("kl_fn", "none", K2),
        ("entropy_loss", "default", Entropy),
    ]:
        reg.register(kind, name, cls)
    return reg


def resolve(registry: Registry, config: Any = None, overrides: tuple[str, ...] = ()) -> Any:
    return resolve_config(
        config,
        registry=registry,
        plugin_manager=TrinityPluginManager(),
        overrides=overrides,
        embedded=EMBEDDED,
    )


def test_embedded_default_tunes_its_own_preset(registry: Registry) -> None:
    alg = resolve(registry).algorithm
    assert (alg.algorithm_type, alg.repeat_times, alg.kl_loss_fn) == ("home", 16, "none")


def test_a_switched_preset_wins_over_the_embedded_default_for_every_key_it_sets(registry: Registry) -> None:
    cfg = resolve(registry, overrides=("algorithm.algorithm_type=withkl",))
    alg = cfg.algorithm
    assert (alg.repeat_times, alg.kl_loss_fn, alg.kl_loss_fn_args["kl_coef"]) == (4, "k2", 0.05)
    assert cfg.sources["algorithm.repeat_times"] == "preset 'withkl'"
    assert cfg.sources["algorithm.kl_loss_fn_args.kl_coef"] == "preset 'withkl'"
    assert cfg.sources["algorithm.algorithm_type"] == "--set"
    assert cfg.trainer.lr == 3e-4  # the other sections of the embedded default stay
    assert cfg.sources["trainer.lr"] == "embedded default"


def test_keys_a_switched_preset_leaves_unset_keep_the_embedded_default(registry: Registry) -> None:
    cfg = resolve(registry, overrides=("algorithm.algorithm_type=bare",))
    assert (cfg.algorithm.repeat_times, cfg.algorithm.kl_loss_fn) == (16, "none")
    assert cfg.sources["algorithm.repeat_times"] == "embedded default"
    assert cfg.algorithm.policy_loss_fn == "ppo"  # neither sets it: the base default
    assert cfg.sources["algorithm.policy_loss_fn"] == "base default"


def test_set_wins_over_preset_and_embedded_default(registry: Registry) -> None:
    cfg = resolve(registry, overrides=("algorithm.algorithm_type=withkl", "algorithm.repeat_times=3"))
    assert cfg.algorithm.repeat_times == 3
    assert cfg.sources["algorithm.repeat_times"] == "--set"


def test_a_config_file_replaces_the_embedded_default(registry: Registry, tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("algorithm: {algorithm_type: home, policy_loss_fn_args: {clip_range: 0.3}}\n")
    cfg = resolve(registry, str(path), ("trainer.lr=1e-3",))
    assert cfg.algorithm.repeat_times == 2  # the preset's: the embedded default is not used with a file
    assert cfg.sources["algorithm.policy_loss_fn_args.clip_range"] == "config file"
    assert cfg.sources["algorithm.policy_loss_fn_args.loss_agg_mode"] == "component default"
    assert (cfg.trainer.lr, cfg.sources["trainer.lr"]) == (1e-3, "--set")
    assert cfg.sources["trainer.total_steps"] == "default"


def test_problems_in_a_file_name_the_file(registry: Registry, tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("trainer: {lr: -1}\n")
    with pytest.raises(ConfigError) as info:
        resolve(registry, str(path))
    assert info.value.source == str(path)
    assert info.value.problems[0].path == "trainer.lr"


def test_layer_config_keeps_inputs_and_set_keys() -> None:
    layers = layer_config(None, ["algorithm.algorithm_type=withkl"], EMBEDDED)
    assert layers.below_preset == {"repeat_times": 16, "kl_loss_fn": "none"}
    assert layers.data["algorithm"] == {"algorithm_type": "withkl"}
    assert EMBEDDED["algorithm"]["repeat_times"] == 16  # not mutated
    assert apply_overrides({}, ["a.b=[1, 2]"]) == {"a": {"b": [1, 2]}}


def test_config_validate_explain_names_every_origin(
    registry: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import trinity_core.config.resolve as resolve_module
    import trinity_core.registry as registry_module

    monkeypatch.setattr(resolve_module, "get_registry", lambda: registry)
    monkeypatch.setattr(registry_module, "_default", registry)  # the capability check looks names up there
    path = tmp_path / "run.yaml"
    path.write_text("algorithm: {algorithm_type: home}\ntrainer: {total_steps: 5}\n")
    assert main(["config", "validate", str(path), "--set", "trainer.lr=0.01", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "#   trainer.total_steps = 5  (config file)" in out
    assert "#   trainer.lr = 0.01  (--set)" in out
    assert "#   trainer.seed = 0  (default)" in out
    assert "#   algorithm.repeat_times = 2  (preset 'home')" in out
    run = pytest.importorskip("trinity_core.train.run")
    monkeypatch.setattr(run, "DEFAULT_CONFIG", EMBEDDED)
    assert (
        main(["config", "validate", "--json", "--explain", "--set", "algorithm.algorithm_type=withkl"]) == 0
    )
    sources = json.loads(capsys.readouterr().out)["sources"]
    assert sources["trainer.total_steps"] == "embedded default"
    assert sources["algorithm.kl_loss_fn"] == "preset 'withkl'"
