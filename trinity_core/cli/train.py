"""``trinity train``: reinforcement fine-tuning; with no arguments, the embedded offline default."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator

__all__ = ["cmd_train", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``train`` command."""
    parser = subparsers.add_parser(
        "train",
        help="train a policy (no arguments: the embedded offline default)",
        description=(
            "Reinforcement fine-tuning on Accelerate. Without --config, runs the embedded default: a tiny "
            "Qwen2 learns the last digit of a+b with GRPO on CPU in about a minute. Multi-process: "
            "`accelerate launch --multi_gpu --num_processes N $(which trinity) train` or torchrun."
        ),
    )
    parser.add_argument("--config", metavar="FILE.yaml", help="run configuration (default: the embedded one)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set trainer.lr=1e-4 --set tasks.name=copy (repeatable)",
    )
    parser.add_argument("--run-dir", help="run directory (default: runs/<task>-<algorithm>-<time>)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue RUN_DIR from its last checkpoint")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    parser.add_argument("--profile", action="store_true", help="report the time split of a step")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error (default: one line)"
    )
    parser.set_defaults(func=cmd_train)


def cmd_train(ns: argparse.Namespace) -> int:
    """Train; print the summary. Exit 1 with a one-line message on bad input or a failing environment."""
    from trinity_core.components.faults import ComponentFault
    from trinity_core.extras import require_extra
    from trinity_core.hooks import HookCallError
    from trinity_core.train.checkpoints.commit import CheckpointError
    from trinity_core.train.data.prompts import PromptRenderError
    from trinity_core.train.data.rewards import RewardError
    from trinity_core.train.models.policy import ModelLoadError
    from trinity_core.train.modes.async_mode import ExplorerFailed
    from trinity_core.train.report.profile import format_profile
    from trinity_core.train.report.result import LaunchError
    from trinity_core.train.run import RunDirError, RunFinished, train
    from trinity_core.workflows.errors import WorkflowError

    require_extra("train", "trinity train")  # before the log redirection, which needs tqdm
    overrides = list(ns.overrides)
    if ns.no_progress:
        overrides.append("trainer.progress=false")
    try:
        with _log_to_stderr(logging.INFO if ns.debug else logging.WARNING):
            result = train(
                ns.config,
                overrides=overrides,
                run_dir=ns.run_dir,
                resume=ns.resume,
                overwrite=ns.overwrite,
                profile=ns.profile,
            )
    except RunFinished as exc:
        print(f"trinity train: {exc}", file=sys.stderr)
        return 0
    except (
        RunDirError,
        ModelLoadError,
        LaunchError,
        CheckpointError,
        RewardError,
        PromptRenderError,
        WorkflowError,
        ExplorerFailed,
        ComponentFault,
        HookCallError,
    ) as exc:
        if ns.debug:
            raise
        print(f"trinity train: error: {exc}", file=sys.stderr)
        return 1
    if result is None or int(os.environ.get("RANK", "0")) != 0:
        return 0  # under a multi-process launcher only rank 0 prints the summary
    lines = [f"trained {result.steps} steps in {result.wall_seconds:.1f} s"]
    if result.reward_curve:
        curve = "  ".join(f"{step}:{reward:.2f}" for step, reward in result.reward_curve)
        lines.append(f"mean reward by step: {curve}")
    if result.loss_curve and not result.reward_curve:  # training-only mode: no rewards, show the loss
        curve = "  ".join(f"{step}:{loss:.3f}" for step, loss in result.loss_curve)
        lines.append(f"loss by step: {curve}")
    if result.summary:
        lines.append(f"last 10 steps: {_figures(result.summary)}")
    if result.eval_accuracy is not None:
        lines.append(f"greedy accuracy on held-out prompts: {result.eval_accuracy:.3f}")
    if result.profile is not None:
        lines.append(format_profile(result.profile))
    contents = "config.yaml, metrics.jsonl, samples.jsonl, checkpoints/, model/, plot.png"
    lines.append(f"run directory: {result.run_dir} ({contents})")
    print("\n".join(lines))
    return 0


def _figures(summary: dict[str, float]) -> str:
    """The end summary's RL figures and steps/s as one line."""
    from trinity_core.train.report.reporting import format_figures

    figures = {k: v for k, v in summary.items() if k != "steps_per_s"}
    return format_figures(figures, summary.get("steps_per_s", float("nan")))


@contextlib.contextmanager
def _log_to_stderr(level: int) -> Iterator[None]:
    """Show the training logger's lines from ``level`` on stderr as ``trinity train: ...``, above the
    progress bar (INFO with ``--debug``; otherwise stderr holds only warnings and errors, one line each)."""
    from tqdm.contrib.logging import logging_redirect_tqdm

    log = logging.getLogger("trinity_core")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("trinity train: %(message)s"))
    saved_level, propagate = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False
    try:
        with logging_redirect_tqdm([log]):
            yield
    finally:
        log.removeHandler(handler)
        log.setLevel(saved_level)
        log.propagate = propagate
