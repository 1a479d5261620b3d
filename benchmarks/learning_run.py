"""One run of bench_learning.py (a worker process): train a case with one seed, then score it.

The run is ``trinity_core.train.train`` with the case's overrides over the embedded default, the same
call ``trinity train --set ...`` makes. A run directory that holds a finished run is scored again
without training; one with a checkpoint is resumed (``--resume``); one without is started afresh.
Scores: the training reward (mean of the last 50 steps, first step whose 10-step mean reaches the
target), the held-out score of the final policy, and for rows with ``eval_every`` every such checkpoint's
held-out score (steps to target); the untrained model of the same seed is scored the same way.
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Any

from learning_cases import ENV_ARGS, Case, slug

__all__ = ["run_case"]

EPISODES = {"frozen_lake": 256, "blackjack": 2000}
"""Held-out episodes per evaluation (Blackjack's returns are noisy: 2,000 hands give a standard error
of about 0.02)."""


class LoadSampler:
    """The machine's 1-minute load average, sampled every ``every`` seconds in a daemon thread."""

    def __init__(self, every: float = 15.0) -> None:
        self.samples = [_load()]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(every,), daemon=True)
        self._thread.start()

    def _loop(self, every: float) -> None:
        while not self._stop.wait(every):
            self.samples.append(_load())

    def stop(self) -> dict[str, float]:
        """Stop sampling; the first, mean and last sample."""
        self._stop.set()
        self.samples.append(_load())
        return {
            "start": self.samples[0],
            "mean": round(sum(self.samples) / len(self.samples), 2),
            "end": self.samples[-1],
        }


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _train(case: Case, run_dir: Path, overrides: list[str]) -> None:
    """Train, resume or leave alone the run in ``run_dir``."""
    from trinity_core.train import train

    if (run_dir / "summary.json").is_file():
        return
    checkpoints = run_dir / "checkpoints"
    if checkpoints.is_dir() and any(p.name.startswith("step-") for p in checkpoints.iterdir()):
        train(resume=run_dir)
        return
    train(None, overrides=overrides, run_dir=run_dir, overwrite=run_dir.exists())


def _history(run_dir: Path) -> list[dict[str, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    by_step = {int(r["step"]): r for r in rows}  # a resumed run may repeat steps after its checkpoint
    return [by_step[s] for s in sorted(by_step)]


def _first_reaching(values: list[tuple[int, float]], target: float) -> int | None:
    return next((step for step, v in values if v >= target), None)


def _seconds_to(history: list[dict[str, float]], step: int | None) -> float | None:
    if step is None:
        return None
    return round(sum(r.get("time/step_s", 0.0) for r in history if r["step"] <= step), 1)


def _single_turn_scores(run_dir: Path, step: int | None, untrained: bool = False) -> dict[str, float]:
    """Held-out greedy accuracy and sampled pass@1 (``tasks.eval_k`` samples) of a run's checkpoint
    (``step``), its final model (None) or, ``untrained``, the model it started from."""
    from trinity_core.train.eval_run import evaluate_target

    if not untrained:
        out = run_dir / f"eval-{step if step is not None else 'final'}.json"
        _, result = evaluate_target(run_dir, step=step, output=out)
        figures = result["figures"]
    else:
        figures = _untrained_figures(run_dir)
    return {"greedy": figures["eval/greedy_accuracy"], "pass@1": figures.get("eval/pass@1")}


def _untrained_figures(run_dir: Path) -> dict[str, Any]:
    """The evaluation figures of the model a run started from (built from its config and seed)."""
    from trinity_core.config import resolve_config
    from trinity_core.config.loading import read_yaml_mapping
    from trinity_core.train.data.prompts import build_prompter
    from trinity_core.train.data.rewards import build_rewards
    from trinity_core.train.data.tasks import build_task
    from trinity_core.train.explorer.evaluation import EvalSettings, evaluate_policy
    from trinity_core.train.models.policy import load_policy

    config = resolve_config(read_yaml_mapping(run_dir / "config.yaml"))
    task = build_task(config)
    mcfg = config.model
    model, tokenizer = load_policy(None, None, mcfg.config, task.alphabet(), seed=config.trainer.seed)
    prompter = build_prompter(tokenizer, mcfg.chat_template, task)
    budget = config.rollout.max_new_tokens or task.max_response_tokens()
    settings = EvalSettings.from_config(config, budget)
    return evaluate_policy(model.eval(), tokenizer, prompter, task, build_rewards(config, task), settings)


def _env_scores(case: Case, run_dir: Path, step: int | None, episodes: int) -> dict[str, float]:
    """Sampled and greedy held-out episodes of a checkpoint (``step``), the final model (None) or the
    untrained model (``step=-1``)."""
    from learning_envs import play

    from trinity_core.config import resolve_config
    from trinity_core.config.loading import read_yaml_mapping
    from trinity_core.train.data.tasks import build_task
    from trinity_core.train.export import find_checkpoint, load_checkpoint_policy
    from trinity_core.train.models.policy import load_policy

    config = resolve_config(read_yaml_mapping(run_dir / "config.yaml"))
    if step == -1:
        model, tokenizer = load_policy(
            None, None, config.model.config, build_task(config).alphabet(), seed=config.trainer.seed
        )
    else:
        model, tokenizer, _ = load_checkpoint_policy(run_dir, find_checkpoint(run_dir, step))
    args = ENV_ARGS[case.task]
    task = (case.task, args["task"])
    budget = config.rollout.max_new_tokens or 2
    sampled = play(model, tokenizer, task, args["workflow"], episodes, greedy=False, max_new_tokens=budget)
    greedy = play(model, tokenizer, task, args["workflow"], episodes, greedy=True, max_new_tokens=budget)
    return {"sampled": sampled, "greedy": greedy}  # type: ignore[dict-item]


def _env_metric(case: Case, scores: dict[str, Any], which: str = "sampled") -> float:
    """The env's headline number: FrozenLake's success rate, Blackjack's mean return."""
    key = "success" if case.task == "frozen_lake" else "return"
    return float(scores[which][key])


def _checkpoint_curve(case: Case, run_dir: Path, steps: int, every: int) -> list[tuple[int, float]]:
    """``(step, held-out score)`` of every ``every``-th checkpoint."""
    curve = []
    for step in range(every, steps + 1, every):
        if case.kind == "env":
            scores = _env_scores(case, run_dir, step, EPISODES[case.task] // 4)
            curve.append((step, _env_metric(case, scores)))
        else:
            curve.append((step, float(_single_turn_scores(run_dir, step)["greedy"])))
    return curve


def _reward_stats(history: list[dict[str, float]], case: Case) -> dict[str, Any]:
    rewards = [(int(r["step"]), float(r["reward/mean"])) for r in history if "reward/mean" in r]
    if not rewards:
        return {"reward_last50": None}
    values = [v for _, v in rewards]
    last = [v for v in values[-50:] if math.isfinite(v)]
    rolling = [(rewards[i][0], sum(values[i - 9 : i + 1]) / 10) for i in range(9, len(values))]
    out: dict[str, Any] = {"reward_last50": sum(last) / len(last) if last else None}
    if case.kind == "rl":
        out["steps_to_target"] = _first_reaching(rolling, case.target)
    return out


def run_case(case: Case, seed: int, steps: int, out: Path) -> dict[str, Any]:
    """Train and score one seed of ``case``; the result record (also written to the run directory)."""
    import torch

    torch.set_num_threads(1)
    parts = str(out / "parts")
    run_dir = out / "runs" / slug(case.name) / f"seed{seed}"
    overrides = case.overrides(parts, seed, steps)
    sampler = LoadSampler()
    t0 = time.perf_counter()
    _train(case, run_dir, overrides)
    train_s = time.perf_counter() - t0
    history = _history(run_dir)
    result: dict[str, Any] = {
        "case": case.name,
        "seed": seed,
        "steps": steps,
        "steps_done": int(history[-1]["step"]) if history else 0,
        "run_dir": str(run_dir),
        "train_seconds": round(sum(r.get("time/step_s", 0.0) for r in history), 1),
        **_reward_stats(history, case),
    }
    if case.kind == "env":
        curve = _checkpoint_curve(case, run_dir, steps, case.checkpoint_every(steps))
        final = _env_scores(
            case, run_dir, None if (run_dir / "model").is_dir() else steps, EPISODES[case.task]
        )
        untrained = _env_scores(case, run_dir, -1, EPISODES[case.task])
        result.update(
            heldout=_env_metric(case, final),
            heldout_greedy=_env_metric(case, final, "greedy"),
            untrained=_env_metric(case, untrained),
            untrained_greedy=_env_metric(case, untrained, "greedy"),
            final_scores=final,
            curve=curve,
            steps_to_target=_first_reaching(curve, case.target),
        )
    else:
        final = json.loads((run_dir / "summary.json").read_text())
        untrained = _single_turn_scores(run_dir, None, untrained=True)
        result.update(
            heldout=final["eval_greedy_accuracy"],
            untrained=untrained["greedy"],
            untrained_pass1=untrained["pass@1"],
        )
        if case.kind == "offline":
            curve = _checkpoint_curve(case, run_dir, steps, case.checkpoint_every(steps))
            result.update(curve=curve, steps_to_target=_first_reaching(curve, case.target))
    result["seconds_to_target"] = _seconds_to(history, result.get("steps_to_target"))
    result["wall_seconds"] = round(time.perf_counter() - t0, 1)
    result["train_wall_seconds"] = round(train_s, 1)
    result["load"] = sampler.stop()
    (run_dir / "bench_result.json").write_text(json.dumps(result, indent=1))
    return result
