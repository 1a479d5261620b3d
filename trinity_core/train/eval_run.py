"""``trinity eval`` on the training side: load a model or a run's policy, evaluate it, write ``eval.json``.

The target is a run directory (its ``model`` folder, or a checkpoint with ``step``; the run's
``config.yaml`` unless another config is given) or a model folder that ``from_pretrained`` loads (a
config naming the task and reward functions is then required). The figures are those of
:func:`~trinity_core.train.explorer.evaluation.evaluate_policy`, with the configuration's ``tasks.eval_size``,
``tasks.eval_k``, ``tasks.eval_success``, ``rollout`` sampling and ``model.chat_template``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

__all__ = ["EvalError", "evaluate_target"]

EVAL_FILE = "eval.json"


class EvalError(ValueError):
    """The evaluation target or its configuration is unusable."""


def _config(
    target: Path, is_run: bool, config: str | os.PathLike[str] | None, overrides: Sequence[str]
) -> Any:
    from trinity_core.config import resolve_config
    from trinity_core.config.loading import read_yaml_mapping
    from trinity_core.train.checkpoints.commit import CONFIG_FILE
    from trinity_core.train.run import apply_overrides

    if config is None and not is_run:
        raise EvalError(
            f"{target}: a model folder, not a run directory (no {CONFIG_FILE}); give --config FILE.yaml "
            "naming the task (tasks.name, tasks.args) and reward functions to evaluate on"
        )
    source = Path(config) if config is not None else target / CONFIG_FILE
    return resolve_config(apply_overrides(read_yaml_mapping(source), overrides))


def _policy(target: Path, is_run: bool, step: int | None, resolved: Any) -> tuple[Any, Any, str]:
    """``(model, tokenizer, what)``: the run's model folder or checkpoint, or the model folder."""
    from trinity_core.train.export import find_checkpoint, load_checkpoint_policy
    from trinity_core.train.models.policy import load_policy

    if is_run and (step is not None or not (target / "model").is_dir()):
        checkpoint = find_checkpoint(target, step)
        model, tokenizer, _ = load_checkpoint_policy(target, checkpoint)
        return model, tokenizer, str(checkpoint)
    folder = target / "model" if is_run else target
    model, tokenizer = load_policy(str(folder), None, {}, "", seed=resolved.trainer.seed)
    return model, tokenizer, str(folder)


def evaluate_target(
    target: str | os.PathLike[str],
    *,
    config: str | os.PathLike[str] | None = None,
    overrides: Sequence[str] = (),
    step: int | None = None,
    output: str | os.PathLike[str] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Evaluate ``target`` and write the result as JSON; ``(path written, result)``.

    The result holds ``model`` (what was evaluated), ``settings`` (:class:`EvalSettings` as a dict) and
    ``figures`` (``eval/...``). ``output`` defaults to ``eval.json`` in ``target``; it is replaced
    atomically.

    Raises:
        EvalError: a model folder without ``config``, or a target that does not exist.
        ExportError, ModelLoadError, PromptRenderError, RewardError, ConfigError: see their modules.
    """
    from trinity_core.train.checkpoints.commit import CONFIG_FILE, write_json_atomic
    from trinity_core.train.data.prompts import build_prompter
    from trinity_core.train.data.rewards import build_rewards
    from trinity_core.train.data.tasks import build_task
    from trinity_core.train.explorer.evaluation import EvalSettings, evaluate_policy

    path = Path(target)
    if not path.is_dir():
        raise EvalError(f"{path}: no such folder; give a run directory or a model folder")
    is_run = (path / CONFIG_FILE).is_file()
    if step is not None and not is_run:
        raise EvalError(f"--step {step}: {path} is a model folder, not a run directory with checkpoints")
    resolved = _config(path, is_run, config, overrides)
    if resolved.trainer.threads is not None:
        torch.set_num_threads(resolved.trainer.threads)
    task = build_task(resolved)
    rewards = build_rewards(resolved, task)
    model, tokenizer, what = _policy(path, is_run, step, resolved)
    device = resolved.trainer.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device).eval()
    prompter = build_prompter(tokenizer, resolved.model.chat_template, task)
    budget = resolved.rollout.max_new_tokens or task.max_response_tokens()
    settings = EvalSettings.from_config(resolved, budget)
    figures = evaluate_policy(model, tokenizer, prompter, task, rewards, settings)
    result = {"model": what, "settings": dataclasses.asdict(settings), "figures": figures}
    out = Path(output) if output is not None else path / EVAL_FILE
    write_json_atomic(out, result)
    return out, result
