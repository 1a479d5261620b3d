"""``trinity train``: reinforcement fine-tuning; with no arguments, the embedded offline default."""

from __future__ import annotations

import argparse
import os
import sys

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
    from trinity_core.train.async_mode import ExplorerFailed
    from trinity_core.train.checkpoint import CheckpointError
    from trinity_core.train.loop import LaunchError
    from trinity_core.train.model import ModelLoadError
    from trinity_core.train.profile import format_profile
    from trinity_core.train.rewards import RewardError
    from trinity_core.train.run import RunDirError, RunFinished, train

    overrides = list(ns.overrides)
    if ns.no_progress:
        overrides.append("trainer.progress=false")
    try:
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
    except (RunDirError, ModelLoadError, LaunchError, CheckpointError, RewardError, ExplorerFailed) as exc:
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
    if result.eval_accuracy is not None:
        lines.append(f"greedy accuracy on held-out prompts: {result.eval_accuracy:.3f}")
    if result.profile is not None:
        lines.append(format_profile(result.profile))
    contents = "config.yaml, metrics.jsonl, checkpoints/, model/, plot.png"
    lines.append(f"run directory: {result.run_dir} ({contents})")
    print("\n".join(lines))
    return 0
