"""Prompt / answer text pairs as experiences: expert data (``data.expert_path``) and a task's answers.

A pair becomes one single-turn experience, ``<bos>`` (when the tokenizer has one) + prompt, then
response + ``<eos>``: :func:`pair_experiences`. :func:`read_expert_items` reads ``data.expert_path`` (a
file of ``prompt`` / ``response`` rows, or a directory of stored experiences) for MIX's expert rows;
:func:`write_answer_experiences` stores a task's prompts with their answers for an SFT run (a teacher for
distillation, expert data for MIX)::

    python -m trinity_core.train.data.pairs teacher-data --rows 2048
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from trinity_core.config import ConfigError, ConfigProblem, resolve_config
from trinity_core.experience import Experience

__all__ = ["main", "pair_experiences", "read_expert_items", "write_answer_experiences"]

_KEY = "data.expert_path"


def pair_experiences(tokenizer: Any, prompts: Sequence[str], responses: Sequence[str]) -> list[Experience]:
    """One experience per pair: ``<bos>`` (when the tokenizer has one) + prompt, then response + ``<eos>``."""
    enc = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    dec = tokenizer(list(responses), add_special_tokens=False)["input_ids"]
    bos = [] if tokenizer.bos_token_id is None else [tokenizer.bos_token_id]
    eos = tokenizer.eos_token_id
    return [
        Experience(tokens=[*bos, *p, *r, eos], prompt_length=len(bos) + len(p))
        for p, r in zip(enc, dec, strict=True)
    ]


def read_expert_items(path: str, tokenizer: Any) -> list[Experience]:
    """The expert items of ``path``: stored experiences (a directory) or prompt/response pairs (a file)."""
    where = Path(path)
    if where.is_dir():
        from trinity_core.train.data.stored import read_experiences

        try:
            exps = read_experiences(where)
        except ConfigError as err:
            raise ConfigError([dataclasses.replace(p, path=_KEY) for p in err.problems]) from None
        if any(e.experience_type == "dpo" for e in exps):
            raise ConfigError(
                [ConfigProblem(_KEY, f"{path} holds DPO pairs; expert data is one response each")]
            )
        return exps
    from trinity_core.train.data.dataset_io import TaskDataError, load_split

    try:
        rows = load_split(path, "train", key=_KEY)
    except TaskDataError as err:
        raise ConfigError([ConfigProblem(_KEY, str(err))]) from None
    missing = [c for c in ("prompt", "response") if c not in rows.column_names]
    if missing or len(rows) == 0:
        raise ConfigError(
            [
                ConfigProblem(
                    _KEY,
                    f"{path} has {len(rows)} rows and columns {rows.column_names}; expert data needs rows "
                    "with 'prompt' and 'response' text",
                    hint="or give a directory of stored experiences",
                )
            ]
        )
    return pair_experiences(tokenizer, rows["prompt"], rows["response"])


def write_answer_experiences(
    directory: str | Path, rows: int, config: Mapping[str, Any] | None = None, *, seed: int = 0
) -> Path:
    """Store ``rows`` prompts of the run's task with their answers as experiences (a disk buffer).

    ``config`` is the run configuration whose task and tokenizer are used (default: the embedded
    default's). A ``mode: train`` run of the ``sft`` preset on ``directory`` trains a teacher.

    Raises:
        ConfigError: the task has no ``answer`` field.
    """
    from trinity_core.buffer import make_buffer
    from trinity_core.train.data.tasks import build_task
    from trinity_core.train.models.policy import build_char_tokenizer

    # Resolved as the SFT run that will read the directory: only its task and tokenizer matter here, and
    # this needs no plugin beyond the sft one that trains the teacher.
    sft_run = {
        "mode": "train",
        "algorithm": {"algorithm_type": "sft"},
        "data": {"experiences": str(directory)},
    }
    resolved = resolve_config({**dict(config or {}), **sft_run})
    task = build_task(resolved)
    if "answer" not in task.fields:
        problem = ConfigProblem("tasks", f"task fields {list(task.fields)} have no 'answer' to learn")
        raise ConfigError([problem])
    tok_path = resolved.model.tokenizer_path or resolved.model.model_path
    if tok_path is None:
        tokenizer = build_char_tokenizer(task.alphabet())
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tok_path)
    sample = task.sample(rows, torch.Generator().manual_seed(seed))
    exps = pair_experiences(tokenizer, [r["prompt"] for r in sample], [r["answer"] for r in sample])
    writer = make_buffer("disk", str(directory)).writer
    asyncio.run(writer.write(exps))
    return Path(directory)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m trinity_core.train.data.pairs DIR``: store task answers for a teacher's SFT run."""
    parser = argparse.ArgumentParser(prog="python -m trinity_core.train.data.pairs", description=main.__doc__)
    parser.add_argument("directory", help="where the disk buffer of experiences is written")
    parser.add_argument("--rows", type=int, default=2048, help="task prompts to store (default 2048)")
    parser.add_argument("--seed", type=int, default=0, help="task sampling seed")
    ns = parser.parse_args(argv)
    print(write_answer_experiences(ns.directory, ns.rows, seed=ns.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
