"""Advantage computation against trinity-rft 0.6.0: GRPO, step-wise GRPO and the add strategies.

Run: ``python benchmarks/bench_advantage.py`` (the full grid, a few minutes) or ``--quick`` (N = 1,024 and
8,192 only, about a minute). Both sides get the same experiences: a 128-token prompt, a response of
``R`` tokens with rollout log-probs and an action mask (10% of the tokens masked out), a 0/1 reward
and an EID (task ``i // g``, run ``i % g``; step-wise data: 4 steps per run). Each side is timed with
only its own objects alive. Only the advantage computation is timed, never building the experiences.

What each operation includes (see also the notes the script prints):

* ``grpo process(list)``: on both sides, ``process`` on the same list of experiences: grouping,
  statistics, and writing ``advantages`` and ``returns`` into every experience. Ours builds a columnar
  batch of just the columns GRPO reads and writes back float32 views.
* ``grpo process_batch``: ours times only ``GRPOGroupedAdvantage.process_batch`` on a prebuilt full
  :class:`~trinity_core.batch.ExperienceBatch` (the trainer's columnar path, which already holds the
  batch); the reference has no columnar path, so its time is ``process(list)`` again, with its own
  per-object work.
* ``step_wise_grpo``: reference ``StepWiseGRPOAdvantageFn.process`` against ours on the list and on a
  prebuilt batch, as for ``grpo``.
* add strategies: 0.6.0 has none; where 0.6.0 has the same computation as an advantage function
  (``grpo``, ``step_wise_grpo``, ``opmd``, ``correct_bias`` = GRPO with ``rank_penalty``), the reference
  side is that function's ``process`` plus one ``await writer.write`` to a writer that drops the data;
  ours is ``await strategy.add(exps, step)`` with the same writer. The others are timed alone.

Torch runs on ``--threads`` threads (default 1: the same for both sides and stable on a shared machine).
The script exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Row, _fmt, add_reference_to_path, best_time, format_table, machine_line

PROMPT = 128
STEPS = 4  # steps per run in the step-wise data
FULL_GRID = [(n, g, r) for n in (1024, 8192, 65536) for g in (8, 16) for r in (256, 1024)]
QUICK_GRID = [(n, g, r) for n in (1024, 8192) for g in (8, 16) for r in (256,)]
#: Targets (minimum speedups) by N, from the issue; other sizes are reported without one.
LIST_TARGETS = {1024: 5.0, 65536: 8.0}
BATCH_TARGETS = {1024: 10.0, 65536: 40.0}


@dataclass(frozen=True)
class Data:
    """Shared columns from which each side builds its own experiences."""

    n: int
    group: int
    response: int
    steps: int
    tokens: torch.Tensor
    logprobs: torch.Tensor
    masks: torch.Tensor
    rewards: list[float]

    def eid(self, i: int) -> dict[str, int]:
        """EID keywords of experience ``i``: ``group`` runs per task, ``steps`` steps per run."""
        per_task = self.group * self.steps
        return {
            "batch": 0,
            "task": i // per_task,
            "run": (i // self.steps) % self.group,
            "step": i % self.steps,
        }


def make_data(n: int, group: int, response: int, steps: int = 1, seed: int = 0) -> Data:
    """Random experiences' columns (0/1 rewards, 90% of the response tokens unmasked)."""
    gen = torch.Generator().manual_seed(seed)
    return Data(
        n=n,
        group=group,
        response=response,
        steps=steps,
        tokens=torch.randint(0, 32_000, (n, PROMPT + response), generator=gen, dtype=torch.int32),
        logprobs=-torch.rand((n, response), generator=gen),
        masks=torch.rand((n, response), generator=gen) > 0.1,
        rewards=torch.randint(0, 2, (n,), generator=gen).to(torch.float64).tolist(),
    )


def build(data: Data, cls: type, eid_cls: type) -> list[Any]:
    """Experiences of class ``cls`` (each with its own tensors) from ``data``."""
    return [
        cls(
            eid=eid_cls(**data.eid(i)),
            tokens=data.tokens[i].clone(),
            prompt_length=PROMPT,
            logprobs=data.logprobs[i].clone(),
            action_mask=data.masks[i].clone(),
            reward=data.rewards[i],
        )
        for i in range(data.n)
    ]


class NullWriter:
    """A buffer writer that drops what it gets (the add strategies' write is not what is measured)."""

    async def write(self, experiences: list[Any]) -> None:
        """Do nothing."""


def run_sync(
    loop: asyncio.AbstractEventLoop, make: Callable[[], Coroutine[Any, Any, Any]]
) -> Callable[[], Any]:
    """A zero-argument callable running ``make()`` on ``loop`` (one loop for every call of both sides)."""
    return lambda: loop.run_until_complete(make())


def time_side(
    data: Data,
    cls: type,
    eid_cls: type,
    ops: dict[str, Callable[[list[Any]], Callable[[], Any]]],
    repeat: int,
) -> dict[str, float]:
    """Build one side's experiences, time each op on them, free them."""
    exps = build(data, cls, eid_cls)
    times = {}
    for name, make in ops.items():
        fn = make(exps)
        times[name] = best_time(fn, repeat=repeat)
        del fn
        gc.collect()
    del exps
    gc.collect()
    return times


def list_op(fn: Any) -> Callable[[list[Any]], Callable[[], Any]]:
    """Time ``fn.process`` on the side's list of experiences."""
    return lambda exps: partial(fn.process, exps)


def batch_op(fn: Any) -> Callable[[list[Any]], Callable[[], Any]]:
    """Time ``fn.process_batch`` on a full batch built from the side's experiences (building not timed)."""
    from trinity_core.batch import ExperienceBatch

    return lambda exps: partial(fn.process_batch, ExperienceBatch.from_experiences(exps))


def case_name(n: int, group: int, response: int, steps: int = 1) -> str:
    """The table's case column."""
    steps_part = f", {steps} steps/run" if steps > 1 else ""
    return f"N={n:,} g={group} R={response}{steps_part}"


@dataclass(frozen=True)
class WriteShare:
    """How much of our ``process(list)`` is the write-back alone (one GRPO case)."""

    case: str
    reference_s: float
    process_s: float
    write_s: float


def write_op(n: int) -> Callable[[list[Any]], Callable[[], Any]]:
    """Time only ``write_advantages`` (fixed random scores) on the side's experiences."""
    from trinity_core.components.advantage import write_advantages

    scores = torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    return lambda exps: partial(write_advantages, exps, scores)


def grpo_rows(grid: list[tuple[int, int, int]], repeat: int) -> tuple[list[Row], list[WriteShare]]:
    """GRPOGroupedAdvantage: reference ``process`` vs ours ``process(list)`` and ``process_batch``.

    Also returns, per case, the time of our write-back alone (``write_advantages``: stacking the masks,
    one multiply, two float32 views per experience assigned over the previous ones), the part of
    ``process(list)`` that any implementation producing these outputs from PyTorch has to do.
    """
    import trinity.common.experience as ref_exp
    from trinity.algorithm.advantage_fn.grpo_advantage import GRPOGroupedAdvantage as RefGRPO
    from trinity_plugin_grpo.advantage import GRPOGroupedAdvantage

    from trinity_core.experience import EID, Experience

    rows = []
    shares = []
    ref_fn, ours_fn = RefGRPO(), GRPOGroupedAdvantage()
    for n, group, response in grid:
        data = make_data(n, group, response)
        ref_ops = {"list": list_op(ref_fn)}
        ref = time_side(data, ref_exp.Experience, ref_exp.EID, ref_ops, repeat)
        ours_ops = {"list": list_op(ours_fn), "batch": batch_op(ours_fn), "write": write_op(n)}
        ours = time_side(data, Experience, EID, ours_ops, repeat)
        case = case_name(n, group, response)
        rows.append(Row(case, "grpo process(list)", ref["list"], ours["list"], LIST_TARGETS.get(n)))
        rows.append(Row(case, "grpo process_batch", ref["list"], ours["batch"], BATCH_TARGETS.get(n)))
        shares.append(WriteShare(case, ref["list"], ours["list"], ours["write"]))
        del data
        gc.collect()
    return rows, shares


def step_wise_rows(sizes: list[int], repeat: int) -> list[Row]:
    """Step-wise GRPO: reference ``StepWiseGRPOAdvantageFn.process`` vs ours (list and batch paths)."""
    import trinity.common.experience as ref_exp
    from trinity.algorithm.advantage_fn.multi_step_grpo_advantage import StepWiseGRPOAdvantageFn as RefStep
    from trinity_plugin_multistep.advantage import StepWiseGRPOAdvantageFn

    from trinity_core.experience import EID, Experience

    rows = []
    group, response = 8, 256
    ref_fn, ours_fn = RefStep(), StepWiseGRPOAdvantageFn()
    for n in sizes:
        data = make_data(n, group, response, steps=STEPS)
        ref_ops = {"list": list_op(ref_fn)}
        ref = time_side(data, ref_exp.Experience, ref_exp.EID, ref_ops, repeat)
        ours = time_side(
            data, Experience, EID, {"list": list_op(ours_fn), "batch": batch_op(ours_fn)}, repeat
        )
        case = case_name(n, group, response, STEPS)
        rows.append(Row(case, "step_wise_grpo process(list)", ref["list"], ours["list"], None))
        rows.append(Row(case, "step_wise_grpo process_batch", ref["list"], ours["batch"], None))
        del data
        gc.collect()
    return rows


def add_strategy_rows(sizes: list[int], repeat: int) -> tuple[list[Row], list[tuple[str, str, float]]]:
    """Our add strategies against the 0.6.0 advantage function doing the same computation (+ one write).

    Returns the comparison rows and ``(case, strategy, seconds)`` for the strategies without a 0.6.0
    equivalent.
    """
    import trinity.common.experience as ref_exp
    from trinity.algorithm.advantage_fn.grpo_advantage import GRPOGroupedAdvantage as RefGRPO
    from trinity.algorithm.advantage_fn.multi_step_grpo_advantage import StepWiseGRPOAdvantageFn as RefStep
    from trinity.algorithm.advantage_fn.opmd_advantage import OPMDGroupAdvantage as RefOPMD
    from trinity_plugin_grpo.add_strategy import GRPOAddStrategy
    from trinity_plugin_multistep.add_strategy import StepWiseGRPOStrategy
    from trinity_plugin_opmd.add_strategy import OPMDAddStrategy
    from trinity_plugin_polaris.correct_bias import CorrectBiasAddStrategy
    from trinity_plugin_polaris.duplicate_informative import DuplicateInformativeAddStrategy
    from trinity_plugin_polaris.reward_variance import RewardVarianceAddStrategy

    from trinity_core.experience import EID, Experience

    writer = NullWriter()
    loop = asyncio.new_event_loop()

    def ref_pipeline(fn: Any) -> Callable[[list[Any]], Callable[[], Any]]:
        async def add(exps: list[Any]) -> int:
            kept, _ = fn.process(exps)
            await writer.write(kept)
            return len(kept)

        return lambda exps: run_sync(loop, partial(add, exps))

    def ours_add(strategy: Any) -> Callable[[list[Any]], Callable[[], Any]]:
        return lambda exps: run_sync(loop, partial(strategy.add, exps, 0))

    # name -> (steps per run, reference function or None, our strategy)
    penalty = 0.25
    strategies: dict[str, tuple[int, Any, Any]] = {
        "grpo": (1, RefGRPO(), GRPOAddStrategy(writer)),
        "step_wise_grpo": (STEPS, RefStep(), StepWiseGRPOStrategy(writer)),
        "opmd": (1, RefOPMD(), OPMDAddStrategy(writer)),
        "correct_bias": (
            1,
            RefGRPO(rank_penalty=penalty),
            CorrectBiasAddStrategy(writer, rank_penalty=penalty),
        ),
        "reward_variance": (1, None, RewardVarianceAddStrategy(writer)),
        "duplicate_informative": (1, None, DuplicateInformativeAddStrategy(writer)),
    }
    rows: list[Row] = []
    alone: list[tuple[str, str, float]] = []
    group, response = 8, 256
    try:
        for n in sizes:
            for steps in sorted({s for s, _, _ in strategies.values()}):
                data = make_data(n, group, response, steps=steps)
                case = case_name(n, group, response, steps)
                chosen = {name: v for name, v in strategies.items() if v[0] == steps}
                ref_ops = {name: ref_pipeline(v[1]) for name, v in chosen.items() if v[1] is not None}
                ref = time_side(data, ref_exp.Experience, ref_exp.EID, ref_ops, repeat) if ref_ops else {}
                ours = time_side(
                    data, Experience, EID, {k: ours_add(v[2]) for k, v in chosen.items()}, repeat
                )
                for name in chosen:
                    if name in ref:
                        rows.append(Row(case, f"add strategy {name}", ref[name], ours[name], None))
                    else:
                        alone.append((case, name, ours[name]))
                del data
                gc.collect()
    finally:
        loop.close()
    return rows, alone


NOTES = [
    "grpo process(list): both sides call process on the same list of experiences and write advantages "
    "and returns into each one; ours includes building the columns it reads (rewards, task index) and "
    "writing float32 views back.",
    "grpo process_batch: ours is only GRPOGroupedAdvantage.process_batch on a prebuilt ExperienceBatch "
    "(all columns; building it is not timed, the trainer already holds it); the reference column is "
    "its process(list), which includes its per-object work (0.6.0 has no columnar path).",
    "write-back alone: ours only, write_advantages(exps, scores) on the same experiences: stacking the "
    "masks, one multiply, two float32 views per experience (advantages, returns) assigned over the "
    "previous ones; the rest of process(list) is reading rewards and EIDs, grouping and the statistics.",
    "step_wise_grpo: reference StepWiseGRPOAdvantageFn.process vs ours, list and prebuilt-batch paths as "
    "above; no target in the issue.",
    "add strategies: 0.6.0 has none; reference = the 0.6.0 advantage function with the same computation "
    "(grpo, step_wise_grpo, opmd; correct_bias = GRPOGroupedAdvantage(rank_penalty=0.25)) + one await "
    "writer.write to a writer that drops the data; ours = await strategy.add(exps, step) with that writer.",
]


def main(argv: list[str] | None = None) -> int:
    """Print the comparison tables; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="N = 1,024 and 8,192, R = 256, 3 rounds")
    parser.add_argument("--repeat", type=int, default=5, help="timing rounds (median taken)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (both sides)")
    parser.add_argument("--skip-extra", action="store_true", help="only the GRPO grid")
    parser.add_argument(
        "--sizes", type=lambda text: [int(n) for n in text.split(",")], help="only these N (e.g. 65536)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    add_reference_to_path()
    grid, repeat = (QUICK_GRID, 3) if args.quick else (FULL_GRID, args.repeat)
    sizes = [1024, 8192] if args.quick else [1024, 8192, 65536]
    if args.sizes:
        grid = [case for case in grid if case[0] in args.sizes]
        sizes = [n for n in sizes if n in args.sizes]
    rows, shares = grpo_rows(grid, repeat)
    alone: list[tuple[str, str, float]] = []
    if not args.skip_extra:
        rows += step_wise_rows(sizes, repeat)
        extra, alone = add_strategy_rows([n for n in sizes if n <= 8192], repeat)
        rows += extra
    print(f"Advantage computation, trinity-core vs trinity-rft 0.6.0 ({machine_line()})\n")
    print(format_table(rows))
    if alone:
        print("\nAdd strategies without a 0.6.0 equivalent (ours alone):\n")
        print("| case | strategy | ours |\n|---|---|---:|")
        for case, name, seconds in alone:
            print(f"| {case} | add strategy {name} | {_fmt(seconds)} |")
    print("\nOur GRPO process(list) and its write-back alone (write_advantages), against reference / 8:\n")
    print("| case | ours process(list) | write-back alone | share | reference / 8 |")
    print("|---|---:|---:|---:|---:|")
    for share in shares:
        print(
            f"| {share.case} | {_fmt(share.process_s)} | {_fmt(share.write_s)} | "
            f"{share.write_s / share.process_s:.0%} | {_fmt(share.reference_s / 8)} |"
        )
    print()
    for note in NOTES:
        print(f"- {note}")
    missed = [row for row in rows if row.verdict == "MISSED"]
    return 1 if missed or any(math.isnan(row.ours_s) for row in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
