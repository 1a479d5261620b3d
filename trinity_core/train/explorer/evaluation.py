"""Held-out evaluation: greedy reward and accuracy, and pass@k of sampled responses.

The same figures come from ``trainer.eval_every`` during training (logged as ``eval/...``) and from
``trinity eval`` (written to ``eval.json``). On ``n`` held-out rows (``task.eval_rows``) with the run's
reward functions:

* ``eval/greedy_reward``: mean combined reward of the greedy responses (the final
  ``eval_greedy_accuracy`` of a run);
* ``eval/greedy_accuracy``: fraction of greedy responses whose reward is at least ``success``;
* with ``k > 0`` samples per prompt at the rollout temperature: ``eval/sample_reward`` (their mean
  reward), ``eval/pass@1`` (fraction solved) and ``eval/pass@k`` (fraction of prompts with at least one
  of the ``k`` solved, the unbiased estimator of Chen et al. 2021 with ``n = k``).

Responses no reward function applies to (``None``) are left out of every mean. Sampling draws from its
own seeded generator state, so evaluating leaves the training run's random streams as they were.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from trinity_core.lm.sampling import Rollout, decode_completions, generate
from trinity_core.train.data.prompts import PromptRenderer
from trinity_core.train.data.rewards import combine_rewards, prompt_conversations

__all__ = ["EvalSettings", "evaluate_policy"]


@dataclass(frozen=True)
class EvalSettings:
    """What an evaluation samples: ``n`` prompts, ``k`` samples each, the response budget, the sampling
    settings of the rollout, the success threshold and the seed."""

    n: int
    k: int
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    success: float = 1.0
    seed: int = 0

    @classmethod
    def from_config(cls, config: Any, max_new_tokens: int) -> EvalSettings:
        """The settings of a resolved run configuration (``tasks.eval_*``, ``rollout.*``, the seed)."""
        tasks, rollout = config.tasks, config.rollout
        return cls(
            n=tasks.eval_size,
            k=tasks.eval_k,
            max_new_tokens=max_new_tokens,
            temperature=rollout.temperature,
            top_p=rollout.top_p,
            top_k=rollout.top_k,
            success=tasks.eval_success,
            seed=config.trainer.seed,
        )


def _rewards(
    rewards: tuple[Sequence[str], Sequence[Any], Sequence[float]],
    tokenizer: Any,
    rows: list[dict[str, Any]],
    task: Any,
    rollout: Rollout,
    repeat: int,
) -> torch.Tensor:
    """``(len(rows), repeat)`` float64 combined rewards, NaN where no function applies."""
    names, fns, weights = rewards
    completions, completion_ids = decode_completions(tokenizer, rollout)
    given = {k: [r[k] for r in rows for _ in range(repeat)] for k in task.fields if k != "prompt"}
    given["truncated"] = rollout.truncated.tolist()
    values = combine_rewards(
        list(fns),
        list(weights),
        list(names),
        [r["prompt"] for r in rows for _ in range(repeat)],
        completions,
        given,
        completion_ids=completion_ids,
        conversations=prompt_conversations(task, rows, repeat),
    )
    scores = torch.tensor([math.nan if v is None else v for v in values], dtype=torch.float64)
    return scores.view(len(rows), repeat)


def _nanmean(values: torch.Tensor) -> float | None:
    kept = values[~values.isnan()]
    return float(kept.mean()) if kept.numel() else None


@torch.no_grad()
def evaluate_policy(
    policy: Any,
    tokenizer: Any,
    prompter: PromptRenderer,
    task: Any,
    rewards: tuple[Sequence[str], Sequence[Any], Sequence[float]],
    settings: EvalSettings,
) -> dict[str, float | None]:
    """The evaluation figures of ``policy`` (see the module docstring); ``None`` for a figure with no
    scored response."""
    rows = task.eval_rows(settings.n, settings.seed)
    if not rows:
        return {"eval/prompts": 0.0}
    texts = prompter.texts(rows)
    greedy = generate(
        policy,
        tokenizer,
        texts,
        repeat=1,
        max_new_tokens=settings.max_new_tokens,
        temperature=1.0,
        greedy=True,
    )
    scores = _rewards(rewards, tokenizer, rows, task, greedy, 1)[:, 0]
    solved = torch.where(scores.isnan(), scores, (scores >= settings.success).double())
    out: dict[str, float | None] = {
        "eval/prompts": float(len(rows)),
        "eval/greedy_reward": _nanmean(scores),
        "eval/greedy_accuracy": _nanmean(solved),
    }
    if settings.k > 0:
        device = next(policy.parameters()).device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(settings.seed)
            sampled = generate(
                policy,
                tokenizer,
                texts,
                repeat=settings.k,
                max_new_tokens=settings.max_new_tokens,
                temperature=settings.temperature,
                top_p=settings.top_p,
                top_k=settings.top_k,
            )
        samples = _rewards(rewards, tokenizer, rows, task, sampled, settings.k)
        hit = torch.where(samples.isnan(), samples, (samples >= settings.success).double())
        scored = ~samples.isnan().all(dim=1)
        any_hit = (hit.nan_to_num(0.0) > 0).any(dim=1).double()
        out["eval/sample_reward"] = _nanmean(samples)
        out["eval/pass@1"] = _nanmean(hit)
        out[f"eval/pass@{settings.k}"] = float(any_hit[scored].mean()) if bool(scored.any()) else None
    return out
