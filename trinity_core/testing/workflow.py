"""Checks of workflows: built from defaults, ``run`` / ``run_async`` on a tiny real model, experiences
the trainer can use.

The kit runs the workflow on its ``conformance_task`` row (default ``{"prompt": "1+2="}``) with a
one-layer model and a character tokenizer over printable ASCII, two runs, through the explorer's
:class:`~trinity_core.workflows.WorkflowRunner` (model calls batched as in training).
"""

from __future__ import annotations

import string

import torch

from trinity_core.experience import Experience
from trinity_core.testing._core import ConformanceError, Subject, check

__all__ = ["run_workflow"]

_TINY = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
}


def run_workflow(subject: Subject, *, runs: int = 2) -> list[Experience]:
    """The experiences of ``runs`` runs of the subject on its conformance task (tiny model, seeded)."""
    from trinity_core.train.models.policy import build_char_tokenizer, tiny_model
    from trinity_core.workflows import GenerationEngine, WorkflowRunner, make_tasks

    cls = subject.obj
    tokenizer = build_char_tokenizer(string.printable)
    model = tiny_model(len(tokenizer), _TINY, seed=0)
    engine = GenerationEngine(
        model, tokenizer, {"max_new_tokens": 4, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "greedy": False}
    )
    runner = WorkflowRunner(subject.name, cls, dict(subject.args), engine, max_calls=64)
    row = dict(cls.conformance_task or {"prompt": "1+2="})
    tasks = make_tasks(cls, [row], step=0, task_offset=0, repeat_times=runs)
    for task in tasks:
        task.reward_fn = lambda completions, ids, truncated: [0.0] * len(completions)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        outcome = runner.run(tasks)
    if outcome.failures:
        raise ConformanceError(
            f"{subject.describe()} failed on its conformance task: {outcome.failures[0]}",
            "run() must finish on the task row conformance_task (set it on the class) with any model output",
        )
    return outcome.experiences


@check("workflow")
def check_workflow_args_documented(subject: Subject) -> None:
    """every argument has a default and a description"""
    for name, info in subject.obj.Args.model_fields.items():
        if info.is_required() or not info.description:
            raise ConformanceError(
                f"{subject.describe()}: argument {name!r} lacks a default or a description",
                "declare `class Args(ComponentArgs)` fields as Field(default, description=...)",
            )


@check("workflow")
def check_workflow_returns_usable_experiences(subject: Subject) -> None:
    """run() returns experiences with tokens, a response, a matching action mask and a finite reward"""
    exps = run_workflow(subject)
    if not exps:
        raise ConformanceError(f"{subject.describe()} returned no experience", "return one per run (or turn)")
    for exp in exps:
        assert exp.tokens is not None
        response = len(exp.tokens) - exp.prompt_length
        mask = exp.action_mask
        problem = None
        if exp.prompt_length < 1 or response < 1:
            problem = f"prompt length {exp.prompt_length} and response length {response}"
        elif mask is None or len(mask) != response or not bool(mask.any()):
            problem = "an action mask that is missing, of the wrong length, or all False"
        elif exp.logprobs is not None and len(exp.logprobs) != response:
            problem = f"{len(exp.logprobs)} log-probs for {response} response tokens"
        if problem:
            raise ConformanceError(
                f"{subject.describe()} returned an experience with {problem}",
                "build experiences with the model's results or trinity_core.workflows.Conversation",
            )


@check("workflow", requires=("workflow_returns_usable_experiences",))
def check_workflow_ids_are_distinct(subject: Subject) -> None:
    """the experiences of two runs have distinct (run, step) ids, one run per run"""
    exps = run_workflow(subject)
    runs = {exp.eid.run for exp in exps}
    if runs != {0, 1}:
        raise ConformanceError(
            f"{subject.describe()}: two runs gave experiences of runs {sorted(runs)}",
            "set exp.eid.run = task.run_id_base + i for the i-th run of a can_repeat workflow",
        )
