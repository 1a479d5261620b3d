"""``trinity eval MODEL_OR_RUN_DIR [--config FILE]``: greedy and pass@k figures on the held-out rows."""

from __future__ import annotations

import argparse
import sys

__all__ = ["cmd_eval", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``eval`` command."""
    parser = subparsers.add_parser(
        "eval",
        help="evaluate a model folder or a run on held-out prompts (greedy, pass@k)",
        description=(
            "Greedy reward and accuracy, and pass@k of tasks.eval_k samples, on tasks.eval_size held-out "
            "rows of the configured task with its reward functions; writes eval.json. MODEL_OR_RUN_DIR is a "
            "run directory (its model/ folder, or a checkpoint with --step; its config.yaml unless --config "
            "is given) or a model folder that from_pretrained loads (then --config is required)."
        ),
    )
    parser.add_argument("target", metavar="MODEL_OR_RUN_DIR", help="a run directory or a model folder")
    parser.add_argument("--config", metavar="FILE.yaml", help="run configuration (task, rewards, eval_*)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set tasks.eval_k=8 (repeatable)",
    )
    parser.add_argument("--step", type=int, help="evaluate the run's checkpoint of this step")
    parser.add_argument(
        "--output", metavar="FILE.json", help="where to write (default: MODEL_OR_RUN_DIR/eval.json)"
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    parser.set_defaults(func=cmd_eval)


def cmd_eval(ns: argparse.Namespace) -> int:
    """Evaluate; print the figures. Exit 1 with one line when the target, config or data is unusable."""
    from trinity_core.extras import require_extra

    require_extra("train", "trinity eval")
    from trinity_core.train.data.prompts import PromptRenderError
    from trinity_core.train.data.rewards import RewardError
    from trinity_core.train.eval_run import EvalError, evaluate_target
    from trinity_core.train.export import ExportError
    from trinity_core.train.models.policy import ModelLoadError

    try:
        out, result = evaluate_target(
            ns.target, config=ns.config, overrides=ns.overrides, step=ns.step, output=ns.output
        )
    except (EvalError, ExportError, ModelLoadError, PromptRenderError, RewardError, OSError) as exc:
        if ns.debug:
            raise
        print(f"trinity eval: error: {exc}", file=sys.stderr)
        return 1
    figures = "  ".join(
        f"{k.removeprefix('eval/')} {v:.3f}" for k, v in result["figures"].items() if v is not None
    )
    print(f"{result['model']}: {figures}\nwritten to {out}")
    return 0
