"""Everything a run needs before its first step, checked up front: components, task, rewards, model.

Bad input fails here with a message naming the config path and a fix, before any training starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trinity_core import registry
from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig
from trinity_core.train.data.rewards import RewardFn, load_reward_fns, required_fields
from trinity_core.train.data.tasks import Task
from trinity_core.train.models.policy import load_policy, reference_policy

__all__ = [
    "Components",
    "build_components",
    "build_reference",
    "build_rewards",
    "build_task",
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
    in_trainer = False
    if offline:
        if alg.kl_penalty_fn not in _OFF:
            problems.append(
                ConfigProblem(
                    "algorithm.kl_penalty_fn",
                    f"mode 'train' computes no advantages, so KL penalty {alg.kl_penalty_fn!r} (applied to "
                    "rewards before advantages) has nothing to act on",
                    hint="set algorithm.kl_penalty_fn to none, or use kl_loss_fn",
                )
            )
    else:
        advantage = make("advantage_fn", "advantage_fn")
        add_strategy = make("add_strategy", "add_strategy", writer=writer)
        in_trainer = advantage is not None and type(advantage).compute_in_trainer()
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
                    "neither an advantage function nor an add strategy is selected: nothing computes "
                    "advantages",
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
    use_critic = bool(getattr(preset, "use_critic", False)) and not offline
    if use_critic and alg.value_loss_fn in _OFF:
        problems.append(
            ConfigProblem(
                "algorithm.value_loss_fn",
                f"preset {alg.algorithm_type!r} trains a critic (use_critic), which needs a value loss",
                hint="set algorithm.value_loss_fn: clipped, mse (`trinity plugins list --kind value_loss`)",
            )
        )
    if use_critic and not in_trainer:
        problems.append(
            ConfigProblem(
                "algorithm.advantage_fn",
                f"preset {alg.algorithm_type!r} trains a critic, whose values need an advantage function "
                "that runs in the trainer and sets returns (GAE)",
                hint="set algorithm.advantage_fn to ppo",
            )
        )
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


def build_task(config: ResolvedConfig) -> Task:
    """The task set named in ``tasks.name`` (default ``last_digit``)."""
    name = config.tasks.name or "last_digit"
    try:
        task = registry.create("task", name, config.tasks.args)
    except registry.ComponentArgsError as exc:
        raise ConfigError([ConfigProblem("tasks.args", str(exc))]) from None
    except registry.PluginError as exc:
        raise ConfigError([ConfigProblem("tasks.name", str(exc))]) from None
    except ValueError as exc:  # TaskDataError and friends
        raise ConfigError([ConfigProblem("tasks", str(exc))]) from None
    return task  # type: ignore[no-any-return]


def build_rewards(config: ResolvedConfig, task: Task) -> tuple[list[str], list[RewardFn], list[float]]:
    """Reward functions, names and weights; checks that the task provides every field they need."""
    names = list(config.tasks.reward_fns or task.default_reward_fns)
    weights = list(config.tasks.reward_weights or [1.0] * len(names))
    problems: list[ConfigProblem] = []
    if len(weights) != len(names):
        problems.append(
            ConfigProblem(
                "tasks.reward_weights", f"{len(weights)} weights for {len(names)} reward functions {names}"
            )
        )
    unknown = sorted(set(config.tasks.reward_fn_args) - set(names))
    if unknown:
        problems.append(
            ConfigProblem("tasks.reward_fn_args", f"arguments for reward functions not in use: {unknown}")
        )
    try:
        fns = load_reward_fns(names, config.tasks.reward_fn_args)
    except registry.PluginError as exc:
        problems.append(ConfigProblem("tasks.reward_fns", str(exc)))
        raise ConfigError(problems) from None
    available = {*task.fields, "truncated"}
    for name, fn in zip(names, fns, strict=True):
        missing = [f for f in required_fields(fn) if f not in available]
        if missing:
            problems.append(
                ConfigProblem(
                    "tasks",
                    f"reward function {name!r} needs field(s) {missing} but task "
                    f"{config.tasks.name or 'last_digit'!r} provides {sorted(task.fields)}",
                    hint="add the column to the dataset or choose another reward function",
                )
            )
    if problems:
        raise ConfigError(problems)
    return names, fns, weights
