"""The teacher of on-policy distillation (``on_policy_distill``, ``jsd``): ``model.teacher_path``.

The teacher is a causal LM loaded from a local Hugging Face folder with the policy's vocabulary; it is
frozen and scores the sampled responses in the learner's no-grad pass, filling the batch column
``teacher_logprobs`` that the distillation advantages read (and ``old_logprobs``, the student's side,
when no other pass made it).

For the embedded default (the tiny policy on ``last_digit``) a teacher is one short SFT run away:
:func:`write_answer_experiences` stores the task's prompts with their answers as experiences, a
``mode: train`` run of the ``sft`` preset learns them, and its ``model/`` folder is the teacher
(docs/training.md, "Teacher")::

    python -m trinity_core.train.learner.teacher teacher-data --rows 2048
    trinity train --set mode=train --set algorithm.algorithm_type=sft \\
        --set data.experiences=teacher-data --run-dir runs/teacher
    trinity train --set algorithm.algorithm_type=on_policy_distill --set model.teacher_path=runs/teacher/model
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig, resolve_config
from trinity_core.train.learner.update import response_logprobs

__all__ = ["load_teacher", "main", "score_with_teacher", "write_answer_experiences"]

_KEY = "model.teacher_path"


def load_teacher(config: ResolvedConfig, policy: Any, device: torch.device) -> Any | None:
    """The frozen teacher on ``device``, or None when ``model.teacher_path`` is unset or nothing trains
    on rollouts (mode ``explore`` and ``train``).

    Raises:
        ConfigError: the folder does not load as a causal LM, or its vocabulary differs from the policy's.
    """
    path = config.model.teacher_path
    if not path or config.mode != "both":
        return None
    from transformers import AutoModelForCausalLM

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            teacher: Any = AutoModelForCausalLM.from_pretrained(path)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(
            [
                ConfigProblem(
                    _KEY,
                    f"cannot load {path!r} as a causal LM ({exc})",
                    hint="give a local folder with config.json and weights, e.g. the model/ folder of an "
                    "SFT run (docs/training.md, 'Teacher')",
                )
            ]
        ) from None
    own, theirs = policy.get_input_embeddings().num_embeddings, teacher.get_input_embeddings().num_embeddings
    if own != theirs:
        raise ConfigError(
            [
                ConfigProblem(
                    _KEY,
                    f"the teacher at {path!r} has a vocabulary of {theirs} tokens, the policy {own}; it "
                    "cannot score the policy's tokens",
                    hint="train the teacher with the policy's tokenizer (model.tokenizer_path)",
                )
            ]
        )
    teacher.eval()
    teacher.requires_grad_(False)
    return teacher.to(device)


def score_with_teacher(
    teacher: Any,
    policy: Any,
    batch: Any,
    ids: Tensor,
    attn: Tensor | None,
    P: int,
    profiler: Any,
    share_prompts: bool = False,
) -> None:
    """Put the teacher's log-probs of the sampled tokens in ``batch.extras["teacher_logprobs"]``.

    The student's side, ``old_logprobs``, is added too when neither an earlier pass nor the rollout
    (``batch.logprobs``) gave it: the distillation advantages compare the two. ``share_prompts``: run
    each repeated prompt once (``trainer.share_prompts``, see :func:`response_logprobs`).
    """
    with torch.no_grad():
        with profiler.section("teacher"):
            batch.extras["teacher_logprobs"] = response_logprobs(
                teacher, ids, attn, P, False, share_prompts=share_prompts
            )[0]
        if "old_logprobs" not in batch.extras and batch.logprobs is None:
            with profiler.section("old_logprob"):
                batch.extras["old_logprobs"] = response_logprobs(
                    policy, ids, attn, P, False, share_prompts=share_prompts
                )[0]


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
    from trinity_core.train.build import build_task
    from trinity_core.train.learner.expert import pair_experiences
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
    """``python -m trinity_core.train.learner.teacher DIR``: store task answers for a teacher's SFT run."""
    parser = argparse.ArgumentParser(
        prog="python -m trinity_core.train.learner.teacher", description=main.__doc__
    )
    parser.add_argument("directory", help="where the disk buffer of experiences is written")
    parser.add_argument("--rows", type=int, default=2048, help="task prompts to store (default 2048)")
    parser.add_argument("--seed", type=int, default=0, help="task sampling seed")
    ns = parser.parse_args(argv)
    print(write_answer_experiences(ns.directory, ns.rows, seed=ns.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
