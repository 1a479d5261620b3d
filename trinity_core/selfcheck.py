"""An end-to-end check of the installed data path, run by ``trinity info --self-check``.

It builds a synthetic rollout (groups of responses per task, as a GRPO run makes them) and passes it
through every part of the core data model: grouping, the wire format, the columnar batch, HF datasets,
the disk buffer and, when an advantage plugin named ``grpo`` is installed, its advantage computation.
Every step checks its result and reports its wall time.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from trinity_core.experience import EID, Experience, group_by

__all__ = ["CheckResult", "run_self_check", "synthetic_rollout"]


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one step of the self-check."""

    name: str
    ok: bool
    seconds: float
    detail: str
    skipped: bool = False


def synthetic_rollout(
    tasks: int = 128, group_size: int = 8, prompt: int = 64, response: int = 64, seed: int = 0
) -> list[Experience]:
    """Experiences of one rollout step: ``group_size`` responses to each of ``tasks`` prompts.

    Rewards are 0/1 with a per-task success rate, responses have random lengths up to ``response`` and
    carry rollout log-probs.
    """
    gen = torch.Generator().manual_seed(seed)
    rates = torch.rand(tasks, generator=gen)
    out = []
    for task in range(tasks):
        prompt_tokens = torch.randint(3, 1000, (prompt,), generator=gen, dtype=torch.int32)
        for run in range(group_size):
            length = int(torch.randint(1, response + 1, (1,), generator=gen))
            out.append(
                Experience(
                    eid=EID(batch=0, task=task, run=run),
                    tokens=torch.cat([prompt_tokens, torch.randint(3, 1000, (length,), generator=gen)]),
                    prompt_length=prompt,
                    logprobs=-torch.rand(length, generator=gen),
                    reward=float(torch.rand(1, generator=gen) < rates[task]),
                    info={"task_index": task},
                )
            )
    return out


def _same(a: Experience, b: Experience) -> bool:
    tensors_equal = all(
        (x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
        for x, y in ((a.tokens, b.tokens), (a.logprobs, b.logprobs), (a.action_mask, b.action_mask))
    )
    return (
        tensors_equal
        and a.eid == b.eid
        and a.reward == b.reward
        and a.info == b.info
        and a.prompt_length == b.prompt_length
        and a.experience_type == b.experience_type
    )


class _Skip(Exception):
    """Raised by a step whose optional part is not installed."""


def _timed(name: str, step: Callable[[], tuple[bool, str]]) -> CheckResult:
    start = time.perf_counter()
    skipped = False
    try:
        ok, detail = step()
    except _Skip as skip:
        ok, detail, skipped = True, str(skip), True
    except Exception as exc:  # a self-check reports every failure instead of stopping at the first
        ok, detail = False, f"{type(exc).__name__}: {exc}"
    return CheckResult(name, ok, time.perf_counter() - start, detail, skipped)


def run_self_check(tasks: int = 128, group_size: int = 8) -> list[CheckResult]:
    """Run every step on a synthetic rollout; the list holds one result per step."""
    from trinity_core.batch import ExperienceBatch
    from trinity_core.buffer import make_buffer
    from trinity_core.codec import deserialize_many, serialize_many
    from trinity_core.hf import from_hf_datasets, to_hf_datasets

    exps = synthetic_rollout(tasks, group_size)
    n = len(exps)
    results: list[CheckResult] = []

    def grouping() -> tuple[bool, str]:
        groups = group_by(exps, "task")
        return len(groups) == tasks and all(len(g) == group_size for g in groups.values()), (
            f"{n} experiences in {len(groups)} groups of {group_size}"
        )

    def wire() -> tuple[bool, str]:
        payload = serialize_many(exps)
        back = deserialize_many(payload)
        return len(back) == n and all(
            map(_same, exps, back)
        ), f"{len(payload) / 2**20:.2f} MiB, exact round trip"

    def batch() -> tuple[bool, str]:
        b = ExperienceBatch.from_experiences(exps)
        ok = tuple(b.rewards.shape) == (n,) and int(b.group_index["task"].max()) + 1 == tasks
        return (
            ok,
            f"rewards {tuple(b.rewards.shape)}, input_ids {tuple(b.input_ids.shape)}, {tasks} task groups",
        )

    def datasets() -> tuple[bool, str]:
        ds = to_hf_datasets(exps)
        back = from_hf_datasets(ds)
        return len(back) == n and all(
            map(_same, exps, back)
        ), f"{ds.num_rows} rows, {len(ds.column_names)} columns"

    def disk_buffer() -> tuple[bool, str]:
        with tempfile.TemporaryDirectory() as folder:
            writer, reader = make_buffer("disk", folder)

            async def cycle() -> list[Experience]:
                await writer.write(exps[: n // 2])
                await writer.write(exps[n // 2 :])
                return await reader.read(n)

            back = asyncio.run(cycle())
        return len(back) == n and all(map(_same, exps, back)), "2 writes, 1 read, in order"

    for name, step in (
        ("group_by", grouping),
        ("wire format", wire),
        ("ExperienceBatch", batch),
        ("HF datasets", datasets),
        ("disk buffer", disk_buffer),
    ):
        results.append(_timed(name, step))
    results.append(_timed("advantage 'grpo'", lambda: _grpo_advantages(exps)))
    return results


def _grpo_advantages(exps: list[Experience]) -> tuple[bool, str]:
    from trinity_core.registry import UnknownComponentError, create

    try:
        fn = create("advantage_fn", "grpo")
    except UnknownComponentError:
        raise _Skip("no plugin provides advantage 'grpo' (pip install trinity-plugin-grpo)") from None
    out, _metrics = fn(list(exps))
    finite = all(e.advantages is not None and bool(torch.isfinite(e.advantages).all()) for e in out)
    return finite, f"{len(out)} experiences with finite advantages"
