"""Run configuration: structure errors, preset resolution, per-key args merge, collected problems."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from trinity_core.components import AdvantageFn, AlgorithmType, EntropyLossFn, KLFn, PolicyLossFn
from trinity_core.components._aggregation import LossAggArgs
from trinity_core.config import ConfigError, RunConfig, load_config, resolve_config
from trinity_core.hooks import TrinityPluginManager
from trinity_core.hookspecs import hookimpl
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


class GroupPreset(_Preset):
    """A GRPO-like preset."""

    config: ClassVar[dict[str, Any]] = {
        "repeat_times": 8,
        "advantage_fn": "grpo",
        "policy_loss_fn": "ppo",
        "policy_loss_fn_args": {"clip_range": 0.3},
        "kl_loss_fn": "k2",
    }


class PairPreset(_Preset):
    """A DPO-like preset whose check_config forces a pair per task and a KL loss."""

    config: ClassVar[dict[str, Any]] = {"policy_loss_fn": "ppo"}

    @classmethod
    def check_config(cls, config: Any) -> None:
        config.algorithm.repeat_times = 2
        if config.algorithm.kl_loss_fn in (None, "none"):
            config.algorithm.kl_loss_fn = "k2"


class StrictPreset(_Preset):
    """Rejects every config."""

    @classmethod
    def check_config(cls, config: Any) -> None:
        raise ValueError("this preset needs trainer.total_steps >= 1000")


class SloppyPreset(_Preset):
    """Computes its defaults at run time and returns a key that is not a config key."""

    config: ClassVar[dict[str, Any]] = {}


SloppyPreset.config["sample_strategy"] = "warmup"  # after the class check, as a dynamic preset could


class BadArgsPreset(_Preset):
    """Ships an invalid default for its policy loss."""

    config: ClassVar[dict[str, Any]] = {"policy_loss_fn": "ppo", "policy_loss_fn_args": {"clip_range": -1.0}}


class PPOLoss(PolicyLossFn):
    """Clipped surrogate (test double)."""

    class Args(LossAggArgs):
        clip_range: float = Field(0.2, gt=0, description="Clip epsilon.")
        clip_range_high: float | None = Field(None, gt=0, description="Upper clip epsilon.")

    def __call__(self, logprob: Any, **kwargs: Any) -> Any:
        return logprob.sum(), {}


class GSPOLoss(PolicyLossFn):
    """Sequence-level loss (test double) with its own aggregation default."""

    class Args(LossAggArgs):
        loss_agg_mode: Any = Field("seq-mean-token-mean", description="Aggregation.")
        clip_range: float = Field(3e-4, gt=0, description="Clip epsilon.")

    def __call__(self, logprob: Any, **kwargs: Any) -> Any:
        return logprob.sum(), {}


class GroupAdv(AdvantageFn):
    """Group-normalised advantage (test double)."""

    class Args(AdvantageFn.Args):
        epsilon: float = Field(1e-6, gt=0, description="Added to the std.")

    def __call__(self, exps: Any, **kwargs: Any) -> Any:
        return exps, {}

    @classmethod
    def compute_in_trainer(cls) -> bool:
        return False  # runs in the experience pipeline, like the presets that name it


class SquareKL(KLFn):
    """0.5 (logp - ref)^2 (test double)."""

    def calculate_kl(self, logprob: Any, ref_logprob: Any, old_logprob: Any = None) -> Any:
        return 0.5 * (logprob - ref_logprob) ** 2


class NoKL(KLFn):
    """No KL (test double)."""

    def calculate_kl(self, logprob: Any, ref_logprob: Any, old_logprob: Any = None) -> Any:
        return logprob * 0


class Entropy(EntropyLossFn):
    """Entropy bonus (test double)."""

    def __call__(self, entropy: Any, action_mask: Any, **kwargs: Any) -> Any:
        return entropy.sum() * 0, {}


def make_registry() -> Registry:
    reg = Registry(entry_points=False)  # exactly these doubles, whatever plugins are installed
    for kind, name, cls in [
        ("algorithm", "grpo", GroupPreset),
        ("algorithm", "pair", PairPreset),
        ("algorithm", "strict", StrictPreset),
        ("algorithm", "sloppy", SloppyPreset),
        ("algorithm", "badargs", BadArgsPreset),
        ("policy_loss", "ppo", PPOLoss),
        ("policy_loss", "gspo", GSPOLoss),
        ("advantage_fn", "grpo", GroupAdv),
        ("kl_fn", "k2", SquareKL),
        ("kl_fn", "none", NoKL),
        ("entropy_loss", "default", Entropy),
    ]:
        reg.register(kind, name, cls)
    return reg


def resolve(config: Any, pm: TrinityPluginManager | None = None) -> Any:
    return resolve_config(config, registry=make_registry(), plugin_manager=pm or TrinityPluginManager())


def problems_of(config: Any) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        resolve(config)
    return {p.path: str(p) for p in info.value.problems}


def test_preset_fills_unset_names_repeat_times_and_args() -> None:
    resolved = resolve({})
    alg = resolved.algorithm
    assert alg.algorithm_type == "grpo"
    # the preset's value applies; the reference keeps 1 (reference-differences.md#preset-defaults-apply)
    assert alg.repeat_times == 8
    assert (alg.advantage_fn, alg.policy_loss_fn, alg.kl_loss_fn) == ("grpo", "ppo", "k2")
    assert (alg.kl_penalty_fn, alg.entropy_loss_fn, alg.add_strategy) == ("none", "default", None)
    assert alg.policy_loss_fn_args == {
        "loss_agg_mode": "token-mean",
        "clip_range": 0.3,
        "clip_range_high": None,
    }
    assert alg.advantage_fn_args == GroupAdv.default_args()
    assert alg.add_strategy_args == {}
    assert resolved.sources["algorithm.repeat_times"] == "preset 'grpo'"
    assert resolved.sources["algorithm.policy_loss_fn_args.clip_range"] == "preset 'grpo'"
    assert resolved.sources["algorithm.policy_loss_fn_args.clip_range_high"] == "component default"


def test_user_values_win_and_args_merge_per_key() -> None:
    resolved = resolve({"algorithm": {"repeat_times": 4, "policy_loss_fn_args": {"clip_range_high": 0.28}}})
    assert resolved.algorithm.repeat_times == 4
    assert resolved.algorithm.policy_loss_fn_args == {
        "loss_agg_mode": "token-mean",
        "clip_range": 0.3,
        "clip_range_high": 0.28,
    }


def test_preset_args_apply_only_to_the_presets_component() -> None:
    resolved = resolve({"algorithm": {"policy_loss_fn": "gspo"}})
    assert resolved.algorithm.policy_loss_fn_args == {
        "loss_agg_mode": "seq-mean-token-mean",
        "clip_range": 3e-4,
    }


def test_global_loss_agg_mode_only_when_set_and_per_component_value_wins() -> None:
    kept = resolve({"algorithm": {"policy_loss_fn": "gspo"}}).algorithm
    assert kept.policy_loss_fn_args["loss_agg_mode"] == "seq-mean-token-mean"
    assert kept.entropy_loss_fn_args["loss_agg_mode"] is None
    forced = resolve({"algorithm": {"policy_loss_fn": "gspo", "loss_agg_mode": "token-mean"}}).algorithm
    assert forced.policy_loss_fn_args["loss_agg_mode"] == "token-mean"
    assert forced.entropy_loss_fn_args["loss_agg_mode"] == "token-mean"
    explicit = resolve(
        {
            "algorithm": {
                "loss_agg_mode": "token-mean",
                "policy_loss_fn_args": {"loss_agg_mode": "seq-mean-token-sum"},
            }
        }
    ).algorithm
    assert explicit.policy_loss_fn_args["loss_agg_mode"] == "seq-mean-token-sum"


def test_base_defaults_apply_when_the_preset_names_nothing() -> None:
    alg = resolve({"algorithm": {"algorithm_type": "pair"}}).algorithm
    assert alg.advantage_fn is None
    assert alg.advantage_fn_args == {}
    assert alg.policy_loss_fn == "ppo"
    assert alg.policy_loss_fn_args["clip_range"] == 0.2  # the preset's args are for the grpo preset only


def test_check_config_adjustments_get_their_own_args() -> None:
    resolved = resolve({"algorithm": {"algorithm_type": "pair", "repeat_times": 5}})
    assert resolved.algorithm.repeat_times == 2
    assert resolved.algorithm.kl_loss_fn == "k2"
    assert resolved.algorithm.kl_loss_fn_args == SquareKL.default_args()
    assert resolved.sources["algorithm.kl_loss_fn"] == "preset 'pair' check_config"


def test_structure_errors_give_dotted_paths_and_suggestions() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(
            {"algorithm": {"policy_los_fn": "ppo", "repeat_times": 0}, "rollout": {"temperature": -1}}
        )
    found = {p.path: p.message for p in info.value.problems}
    assert set(found) == {"algorithm.policy_los_fn", "algorithm.repeat_times", "rollout.temperature"}
    assert "did you mean 'policy_loss_fn'?" in found["algorithm.policy_los_fn"]
    assert "greater than or equal to 1" in found["algorithm.repeat_times"]
    assert "(got -1)" in found["rollout.temperature"]
    with pytest.raises(ConfigError, match="did you mean 'algorithm'"):
        load_config({"algoritm": {}})


def test_component_problems_are_all_collected_with_component_and_plugin() -> None:
    found = problems_of(
        {
            "algorithm": {
                "policy_loss_fn_args": {"clip_range": -1, "clip_rnage": 0.1},
                "kl_loss_fn": "k3",
                "advantage_fn_args": {"epsilon": 0},
                "add_strategy_args": {"x": 1},
            }
        }
    )
    assert set(found) == {
        "algorithm.policy_loss_fn_args.clip_range",
        "algorithm.policy_loss_fn_args.clip_rnage",
        "algorithm.kl_loss_fn",
        "algorithm.advantage_fn_args.epsilon",
        "algorithm.add_strategy_args",
    }
    assert "[policy loss 'ppo' from <in-process>]" in found["algorithm.policy_loss_fn_args.clip_range"]
    assert "did you mean 'clip_range'?" in found["algorithm.policy_loss_fn_args.clip_rnage"]
    assert "unknown KL function 'k3'" in found["algorithm.kl_loss_fn"]
    assert "(name from config)" in found["algorithm.kl_loss_fn"]
    assert "set algorithm.add_strategy" in found["algorithm.add_strategy_args"]


def test_bad_preset_value_is_reported_with_its_origin() -> None:
    found = problems_of({"algorithm": {"algorithm_type": "badargs"}})
    assert list(found) == ["algorithm.policy_loss_fn_args.clip_range"]
    assert "(value from preset 'badargs')" in found["algorithm.policy_loss_fn_args.clip_range"]
    assert resolve({"algorithm": {"algorithm_type": "badargs", "policy_loss_fn_args": {"clip_range": 0.1}}})


def test_unknown_preset_and_preset_errors() -> None:
    assert (
        "Did you mean 'grpo'"
        in problems_of({"algorithm": {"algorithm_type": "grp"}})["algorithm.algorithm_type"]
    )
    rejected = problems_of({"algorithm": {"algorithm_type": "strict"}})["algorithm"]
    assert "rejected by check_config: this preset needs" in rejected
    assert "[algorithm 'strict' from <in-process>]" in rejected
    sloppy = problems_of({"algorithm": {"algorithm_type": "sloppy"}})["algorithm"]
    assert "unknown keys ['sample_strategy']" in sloppy


def test_a_trinity_rft_name_without_an_equal_component_names_its_replacement() -> None:
    problem = problems_of({"algorithm": {"algorithm_type": "grpo_verl"}})["algorithm.algorithm_type"]
    assert "algorithm 'grpo_verl' of trinity-rft 0.6.0 is not provided by trinity-core" in problem
    assert "use algorithm_type 'grpo'" in problem


def test_check_config_hook_problems_are_collected() -> None:
    class Rules:
        @hookimpl
        def trinity_check_config(self, config: Any) -> Any:
            if config.algorithm.repeat_times < 16:
                yield "algorithm.repeat_times: use at least 16 with binary rewards"

    pm = TrinityPluginManager()
    pm.register(Rules(), name="rules")
    with pytest.raises(ConfigError) as info:
        resolve({}, pm)
    assert [str(p) for p in info.value.problems] == [
        "plugin 'rules': algorithm.repeat_times: use at least 16 with binary rewards"
    ]


def test_yaml_file_round_trip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("algorithm:\n  repeat_times: 3\ntrainer:\n  lr: 0.001\n", encoding="utf-8")
    config = load_config(path)
    assert isinstance(config, RunConfig)
    assert (config.algorithm.repeat_times, config.trainer.lr) == (3, 0.001)
    assert load_config(config) is config
    (tmp_path / "bad.yaml").write_text("algorithm: [1, 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(tmp_path / "list.yaml")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


@settings(max_examples=40, deadline=None)
@given(
    user=st.fixed_dictionaries(
        {},
        optional={
            "clip_range": st.floats(0.01, 1.0),
            "clip_range_high": st.none() | st.floats(0.01, 1.0),
            "loss_agg_mode": st.sampled_from(["token-mean", "seq-mean-token-sum"]),
        },
    ),
    global_mode=st.none() | st.sampled_from(["token-mean", "seq-mean-token-sum-norm"]),
)
def test_merge_is_per_key_with_documented_precedence(user: dict[str, Any], global_mode: str | None) -> None:
    algorithm: dict[str, Any] = {"policy_loss_fn_args": user}
    if global_mode is not None:
        algorithm["loss_agg_mode"] = global_mode
    args = resolve({"algorithm": algorithm}).algorithm.policy_loss_fn_args
    expected = {**PPOLoss.default_args(), "clip_range": 0.3}
    if global_mode is not None:
        expected["loss_agg_mode"] = global_mode
    expected.update(user)
    assert args == expected


def test_preset_and_advantage_fn_must_agree_on_where_advantages_are_computed() -> None:
    from trinity_core.components import AlgorithmType, TrainerAdvantage
    from trinity_core.config import ConfigError, resolve_config

    class PipelinePreset(AlgorithmType):
        """A test preset computing advantages in the experience pipeline."""

        use_critic = False
        use_reference = False
        compute_advantage_in_trainer = False
        can_balance_batch = True
        schema = "experience"

        @classmethod
        def default_config(cls) -> dict[str, object]:
            return {"advantage_fn": "trainer_side", "policy_loss_fn": None}

    class TrainerSide(TrainerAdvantage):
        """A test advantage function that runs in the trainer."""

        def compute(self, batch):  # type: ignore[no-untyped-def]
            raise AssertionError("never called")

    registry = make_registry()
    registry.register("algorithm", "pipeline_preset", PipelinePreset)
    registry.register("advantage_fn", "trainer_side", TrainerSide)
    with pytest.raises(
        ConfigError, match=r"'trainer_side' runs in the trainer, but preset 'pipeline_preset'"
    ):
        resolve_config(
            {"algorithm": {"algorithm_type": "pipeline_preset", "policy_loss_fn": None}}, registry=registry
        )


def test_progress_metrics_default_to_the_standard_figures_and_take_a_list_of_keys() -> None:
    """`trainer.progress_metrics`: metric keys the progress line shows after the standard figures (none by
    default, today's line); each key once and without blanks, so a typo'd list fails before training."""
    assert RunConfig().trainer.progress_metrics == []
    keys = ["actor/unmasked_frac", "advantage/raft/kept_fraction"]
    assert RunConfig.model_validate({"trainer": {"progress_metrics": keys}}).trainer.progress_metrics == keys
    for bad, why in (
        (["actor/x", "actor/x"], "given more than once"),
        ([" actor/x"], "blank or have spaces"),
        ([""], "blank or have spaces"),
        ("actor/x", "list"),
    ):
        with pytest.raises(pydantic.ValidationError, match=why):
            RunConfig.model_validate({"trainer": {"progress_metrics": bad}})
