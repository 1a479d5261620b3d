"""The teacher of on-policy distillation (``on_policy_distill``, ``jsd``): ``model.teacher_path``.

The teacher is a causal LM loaded from a local Hugging Face folder with the policy's vocabulary; it is
frozen and scores the sampled responses in the learner's no-grad pass, filling the batch column
``teacher_logprobs`` that the distillation advantages read (and ``old_logprobs``, the student's side,
when no other pass made it).

For the embedded default (the tiny policy on ``last_digit``) a teacher is one short SFT run away:
:func:`~trinity_core.train.data.pairs.write_answer_experiences` stores the task's prompts with their
answers as experiences, a ``mode: train`` run of the ``sft`` preset learns them, and its ``model/``
folder is the teacher (docs/training.md, "Teacher")::

    python -m trinity_core.train.data.pairs teacher-data --rows 2048
    trinity train --set mode=train --set algorithm.algorithm_type=sft \\
        --set data.experiences=teacher-data --run-dir runs/teacher
    trinity train --set algorithm.algorithm_type=on_policy_distill --set model.teacher_path=runs/teacher/model
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import torch

from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig

__all__ = ["load_teacher"]

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
