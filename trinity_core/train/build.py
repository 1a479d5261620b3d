"""The algorithm of a run from its config, checked up front: its components and the reference model.

Bad input fails here with a message naming the config path and a fix, before any training starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trinity_core import registry
from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig
from trinity_core.train.models.policy import load_policy, reference_policy

__all__ = [
    "Components",
    "build_components",
    "build_reference",
    "needs_reference",
]

_OFF = (None, "none")


@dataclass
class Components:
    """The algorithm's components, built from the resolved ``algorithm`` section."""

    preset: Any
    policy_loss: Any
    kl_loss: Any | None
    kl_penalty: Any | None
    entropy: Any | None
    advantage: Any | None
    add_strategy: Any | None
    advantage_in_trainer: bool
    value_loss: Any | None = None
    """The critic's loss; set only for presets with ``use_critic`` (a critic is then built)."""


def needs_reference(config: ResolvedConfig) -> bool:
    """A reference pass is needed when a KL loss or KL penalty other than ``none`` is selected."""
    alg = config.algorithm
    return alg.kl_loss_fn not in _OFF or alg.kl_penalty_fn not in _OFF


def build_reference(config: ResolvedConfig, policy_loss: Any, model: Any) -> Any | None:
    """The frozen reference model, when a KL term or the policy loss reads ``ref_logprob``: loaded from
    ``model.ref_model_path``, else made from the initial ``model`` (:func:`reference_policy`)."""
    loss_reads_ref = any(policy_loss.mapper.to_trinity(k) == "ref_logprob" for k in policy_loss.select_keys)
    if not (needs_reference(config) or loss_reads_ref):
        return None
    if not config.model.ref_model_path:
        return reference_policy(model)
    ref, _ = load_policy(config.model.ref_model_path, None, {}, "", seed=config.trainer.seed)
    ref.eval()
    ref.requires_grad_(False)
    return ref


def build_components(config: ResolvedConfig, writer: Any, *, offline: bool = False) -> Components:
    """Instantiate every component (args were validated by ``resolve_config``).

    With ``offline`` (mode ``train``) nothing computes advantages: the advantage function and add
    strategy are not built (a loss that reads advantages gets the stored ones), and a KL penalty, which
    rewrites rewards before advantages are computed, is an error.

    Raises:
        ConfigError: every way the selected components cannot work together, at once.
    """
    alg = config.algorithm
    preset = registry.resolve("algorithm", alg.algorithm_type)
    problems: list[ConfigProblem] = []
    if alg.policy_loss_fn is None:
        problems.append(ConfigProblem("algorithm.policy_loss_fn", "no policy loss selected; name one"))

    def make(kind: str, key: str, **runtime: Any) -> Any:
        name = getattr(alg, key)
        if name in _OFF:
            return None
        return registry.create(kind, name, getattr(alg, f"{key}_args"), **runtime)

    advantage = add_strategy = None
    if offline:
        problems += _offline_problems(alg)
    else:
        advantage = make("advantage_fn", "advantage_fn")
        add_strategy = make("add_strategy", "add_strategy", writer=writer)
    in_trainer = advantage is not None and type(advantage).compute_in_trainer()
    if not offline:
        problems += _advantage_problems(alg, advantage, add_strategy, in_trainer)
    use_critic = bool(getattr(preset, "use_critic", False)) and not offline
    if use_critic:
        problems += _critic_problems(alg, in_trainer)
    if problems:
        raise ConfigError(problems)
    return Components(
        preset=preset,
        policy_loss=make("policy_loss", "policy_loss_fn", backend="verl"),
        kl_loss=make("kl_fn", "kl_loss_fn"),
        # Offline, a KL penalty other than none was rejected above, so this is None there.
        kl_penalty=make("kl_fn", "kl_penalty_fn"),
        entropy=make("entropy_loss", "entropy_loss_fn"),
        advantage=advantage,
        add_strategy=add_strategy,
        advantage_in_trainer=in_trainer,
        value_loss=make("value_loss", "value_loss_fn") if use_critic else None,
    )


def _offline_problems(alg: Any) -> list[ConfigProblem]:
    """Mode ``train`` computes no advantages: a KL penalty on rewards has nothing to act on."""
    if alg.kl_penalty_fn in _OFF:
        return []
    return [
        ConfigProblem(
            "algorithm.kl_penalty_fn",
            f"mode 'train' computes no advantages, so KL penalty {alg.kl_penalty_fn!r} (applied to "
            "rewards before advantages) has nothing to act on",
            hint="set algorithm.kl_penalty_fn to none, or use kl_loss_fn",
        )
    ]


def _advantage_problems(alg: Any, advantage: Any, add_strategy: Any, in_trainer: bool) -> list[ConfigProblem]:
    """Exactly one of an advantage function and an add strategy; a KL penalty needs the trainer's."""
    problems = []
    if advantage is not None and add_strategy is not None:
        problems.append(
            ConfigProblem(
                "algorithm.add_strategy",
                f"both advantage_fn {alg.advantage_fn!r} and add_strategy {alg.add_strategy!r} are set; "
                "an add strategy computes advantages itself",
                hint="set algorithm.advantage_fn or algorithm.add_strategy to none",
            )
        )
    if advantage is None and add_strategy is None:
        problems.append(
            ConfigProblem(
                "algorithm.advantage_fn",
                "neither an advantage function nor an add strategy is selected: nothing computes advantages",
                hint="set algorithm.advantage_fn (e.g. grpo)",
            )
        )
    if alg.kl_penalty_fn not in _OFF and not in_trainer:
        problems.append(
            ConfigProblem(
                "algorithm.kl_penalty_fn",
                "a KL penalty on rewards needs an advantage function that runs in the trainer",
                hint="use kl_loss_fn instead, or a trainer-side advantage function",
            )
        )
    return problems


def _critic_problems(alg: Any, in_trainer: bool) -> list[ConfigProblem]:
    """A preset that trains a critic needs a value loss and a trainer-side advantage that sets returns."""
    problems = []
    if alg.value_loss_fn in _OFF:
        problems.append(
            ConfigProblem(
                "algorithm.value_loss_fn",
                f"preset {alg.algorithm_type!r} trains a critic (use_critic), which needs a value loss",
                hint="set algorithm.value_loss_fn: clipped, mse (`trinity plugins list --kind value_loss`)",
            )
        )
    if not in_trainer:
        problems.append(
            ConfigProblem(
                "algorithm.advantage_fn",
                f"preset {alg.algorithm_type!r} trains a critic, whose values need an advantage function "
                "that runs in the trainer and sets returns (GAE)",
                hint="set algorithm.advantage_fn to ppo",
            )
        )
    return problems
