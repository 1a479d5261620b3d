"""The rows of bench_learning.py: which preset runs on which task, with which budget, target and baseline.

Every row is ``trinity train`` with the ``--set`` overrides of its :class:`Case` over the embedded default
(the ``last_digit`` task, a ~332K-parameter Qwen2, 16 prompts a step, lr 3e-4), plus the seed, one torch
thread and checkpoints for resuming. ``{parts}`` in an override is the directory of the data made offline
(bench_learning.py ``prepare_parts``): ``answers`` (2,048 prompts of the task with their answers, stored
experiences), ``text`` (the same as raw text, every token after BOS a target), ``pairs`` (DPO pairs: the
answer against a wrong digit) and ``teacher`` (an ``sft`` run on ``answers``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["CASES", "ENV_ARGS", "Case", "by_name", "slug"]

STEPS = 800
"""The embedded default's budget: grpo reaches its target in about half of it."""
TARGET = 0.9
"""last_digit: the 10-step mean of the training reward, or the held-out greedy accuracy of a checkpoint."""

TINY = (
    "model.config={hidden_size: 16, intermediate_size: 32, num_attention_heads: 2, "
    "num_key_value_heads: 2, num_hidden_layers: 1}"
)
"""The gym plugin's test model (one layer of width 16): an environment's policy is a lookup of a few
dozen states."""

ENV_ARGS = {
    "frozen_lake": {
        "task": {},
        "workflow": {"max_turns": 8, "experience": "step", "history": False, "invalid_action_penalty": -1.0},
    },
    "blackjack": {
        "task": {"seeds": 1_000_000},
        "workflow": {
            "adapter": "blackjack",
            "max_turns": 5,
            "experience": "step",
            "history": False,
            "invalid_action_penalty": -1.0,
        },
    },
}
"""Task arguments and ``gym`` workflow arguments of the environments."""


@dataclass(frozen=True)
class Case:
    """One row: ``preset`` on ``task`` for ``steps`` steps with ``sets`` (``--set key=value``)."""

    name: str
    preset: str
    task: str
    kind: str
    """``rl`` (mode both, single-turn: target on the training reward), ``offline`` (mode train: target on
    checkpoints' held-out accuracy), ``env`` (a ``gym`` environment: target on checkpoints' sampled
    episodes)."""
    sets: tuple[str, ...] = ()
    steps: int = STEPS
    quick_steps: int = 20
    target: float = TARGET
    parts: tuple[str, ...] = ()
    eval_every: int = 0
    """Checkpoints evaluated every this many steps (offline and env rows); 0: the training reward."""
    note: str = ""
    tags: tuple[str, ...] = field(default=())

    def checkpoint_every(self, steps: int) -> int:
        """Checkpoints of a run of ``steps`` steps are this many steps apart (the held-out curve's step)."""
        return min(self.eval_every or 200, steps)

    def overrides(self, parts: str, seed: int, steps: int) -> list[str]:
        """The ``--set`` overrides of one run."""
        every = self.checkpoint_every(steps)
        return [
            *(s.replace("{parts}", parts) for s in self.sets),
            f"trainer.total_steps={steps}",
            f"trainer.seed={seed}",
            "trainer.threads=1",
            f"trainer.checkpoint_every={every}",
            f"trainer.keep_checkpoints={steps // every + 1 if self.eval_every else 2}",
            "trainer.log_samples_every=0",
        ]


def _rl(preset: str, *extra: str, name: str | None = None, **kw: object) -> Case:
    sets = (f"algorithm.algorithm_type={preset}", "algorithm.repeat_times=16", *extra)
    return Case(name or preset, preset, "last_digit", "rl", sets, **kw)  # type: ignore[arg-type]


def _clip(preset: str, *extra: str, label: str | None = None, **kw: object) -> Case:
    """A clipping loss off-policy: 4 minibatches x 2 epochs, 8 updates per batch, half the steps; the row
    is ``{label}+4mb2ep`` (``label`` defaults to the preset)."""
    mb = ("trainer.minibatches=4", "trainer.epochs=2")
    name = f"{label or preset}+4mb2ep"
    return _rl(preset, *extra, *mb, name=name, steps=STEPS // 2, tags=("clip",), **kw)


def _offline(preset: str, data: str, batch: int, **kw: object) -> Case:
    sets = (
        "mode=train",
        f"algorithm.algorithm_type={preset}",
        f"data.experiences={{parts}}/{data}",
        f"data.batch_size={batch}",
        "trainer.lr=1e-3",
    )
    return Case(preset, preset, "last_digit", "offline", sets, steps=500, eval_every=50, parts=(data,), **kw)  # type: ignore[arg-type]


def _env(
    preset: str, env: str, steps: int, lr: str = "1e-2", name: str | None = None, extra: tuple[str, ...] = ()
) -> Case:
    args = ENV_ARGS[env]
    flow = ", ".join(f"{k}: {v}" for k, v in args["workflow"].items())
    sets = [
        f"algorithm.algorithm_type={preset}",
        "algorithm.repeat_times=8",
        "algorithm.kl_loss_fn=none",
        f"tasks.name={env}",
        "tasks.eval_size=0",
        "rollout.prompts_per_step=8",
        "rollout.max_new_tokens=2",
        "rollout.workflow=gym",
        f"rollout.workflow_args={{{flow}}}",
        f"trainer.lr={lr}",
        TINY,
        *extra,
    ]
    if args["task"]:
        sets.append("tasks.args={" + ", ".join(f"{k}: {v}" for k, v in args["task"].items()) + "}")
    return Case(
        name or f"{preset}/{env}",
        preset,
        env,
        "env",
        tuple(sets),
        steps=steps,
        eval_every=steps // 10,
        target=0.5 if env == "frozen_lake" else -0.1,
    )


CASES: tuple[Case, ...] = (
    _rl("grpo", note="the embedded default (`trinity train`); the reference row of the single-turn presets"),
    _rl("dapo"),
    _rl("gspo"),
    _rl("cispo"),
    _rl("sapo"),
    _rl("opmd"),
    _rl("asymre"),
    _rl("sppo"),
    _rl("rec"),
    _rl("topr"),
    _rl("rloo"),
    _rl("reinforceplusplus"),
    _rl("ppo"),
    Case("ppo (1 response)", "ppo", "last_digit", "rl", ("algorithm.algorithm_type=ppo",)),
    _rl("raft"),
    _rl("mix", "data.expert_path={parts}/answers", parts=("answers",)),
    _rl("mix_chord", "data.expert_path={parts}/answers", parts=("answers",)),
    _rl("on_policy_distill", "model.teacher_path={parts}/teacher/model", parts=("teacher",)),
    _rl("jsd", "model.teacher_path={parts}/teacher/model", parts=("teacher",)),
    _rl(
        "jsd",
        "model.teacher_path={parts}/teacher/model",
        "algorithm.advantage_fn_args={estimator: reference}",
        name="jsd (reference surrogate)",
        parts=("teacher",),
        note="trinity-rft's per-token surrogate, never positive: every sampled token is raised",
    ),
    *(
        _rl(
            preset,
            "trainer.lr=1.2e-3",
            name=f"{preset} (lr 1.2e-3)",
            note="checks whether the unnormalised advantages (no division by a group std of about 1/4) "
            "fail for too small a step: at 4x the lr every seed collapsed, so they do not",
            tags=("diagnostic",),
        )
        for preset in ("rloo", "sppo", "rec")
    ),
    _clip("grpo"),
    _clip("dapo"),
    _clip("gspo"),
    _clip("cispo"),
    _clip("sapo"),
    _clip("sppo"),
    _clip("rec"),
    _clip("topr"),
    _clip("ppo"),
    _clip(
        "dapo",
        "algorithm.policy_loss_fn_args={clip_range_low: 0.2, clip_range_high: 0.28}",
        "rollout.experience_pipeline=[{name: dynamic_sampling, "
        "args: {max_extra_rounds: 3, when_empty: keep}}]",
        label="dapo (paper)",
        note="the preset is grpo without KL; the paper's clip-higher and dynamic sampling are set here",
    ),
    _offline("sft", "answers", 64),
    _offline("cpt", "text", 64),
    _offline("dpo", "pairs", 32),
    _env("multi_step_grpo", "frozen_lake", 300),
    _env("gigpo", "frozen_lake", 300),
    _env("multi_step_grpo", "blackjack", 300),
    _env("gigpo", "blackjack", 300),
    _env("multi_step_grpo", "frozen_lake", 300, lr="1e-3", name="multi_step_grpo/frozen_lake (lr 1e-3)"),
    _env("multi_step_grpo", "blackjack", 300, lr="1e-3", name="multi_step_grpo/blackjack (lr 1e-3)"),
    _env(
        "multi_step_grpo",
        "blackjack",
        300,
        name="multi_step_grpo/blackjack (entropy 0.01)",
        extra=("algorithm.entropy_loss_fn_args={entropy_coef: 0.01}",),
    ),
)


def slug(name: str) -> str:
    """A row name as a file name (``ppo (1 response)`` -> ``ppo__1_response_``)."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", name)


def by_name() -> dict[str, Case]:
    """The cases by row name."""
    return {c.name: c for c in CASES}
