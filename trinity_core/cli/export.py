"""``trinity export RUN_DIR OUT_DIR [--step N]``: a checkpoint as a ``from_pretrained`` model folder."""

from __future__ import annotations

import argparse
import sys

__all__ = ["cmd_export", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``export`` command."""
    parser = subparsers.add_parser(
        "export",
        help="write a run's checkpoint as a Hugging Face model folder",
        description=(
            "save_pretrained of the policy, tokenizer (with its chat template) and generation config of a "
            "checkpoint of RUN_DIR into OUT_DIR; AutoModelForCausalLM.from_pretrained(OUT_DIR) loads it."
        ),
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="directory of a trinity train run")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="folder to create")
    parser.add_argument("--step", type=int, help="checkpoint step (default: the newest intact checkpoint)")
    parser.add_argument("--overwrite", action="store_true", help="replace OUT_DIR when it exists")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="of a LoRA run: write the model with the adapter merged in (default: the adapter only)",
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    parser.set_defaults(func=cmd_export)


def cmd_export(ns: argparse.Namespace) -> int:
    """Export; print the folder. Exit 1 with one line when the run, checkpoint or folder is unusable."""
    from trinity_core.extras import require_extra

    require_extra("train", "trinity export")
    from trinity_core.train.export import ExportError, export_checkpoint
    from trinity_core.train.models.policy import ModelLoadError

    try:
        out = export_checkpoint(ns.run_dir, ns.out_dir, step=ns.step, overwrite=ns.overwrite, merge=ns.merge)
    except (ExportError, ModelLoadError) as exc:
        if ns.debug:
            raise
        print(f"trinity export: error: {exc}", file=sys.stderr)
        return 1
    how = (
        "PeftModel.from_pretrained on the base model"
        if (out / "adapter_config.json").exists()
        else "AutoModelForCausalLM.from_pretrained"
    )
    print(f"exported to {out} (load with {how})")
    return 0
