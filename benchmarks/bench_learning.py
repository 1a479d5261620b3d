"""Learning baselines: which presets learn the task each is made for, how fast, against a stated baseline.

Every row of ``learning_cases.CASES`` runs ``trinity train`` for each seed (default 0, 1, 2) in a fresh
process with one torch thread, ``--jobs`` at a time, and is scored by ``learning_run.run_case``; results go
to ``OUT/results.jsonl`` (one line per finished run; a rerun skips them, and resumes an unfinished run
from its last checkpoint). The table (mean and min-max over seeds) is printed and written to
``OUT/table.md`` and ``OUT/table.json``; docs/benchmarks.md ("Learning baselines") holds the full one and
``benchmarks/learning_baselines.json`` its data.

    python benchmarks/bench_learning.py                      # the full table (about 80 minutes on 2 cores)
    python benchmarks/bench_learning.py --presets grpo,ppo   # the rows of these presets (or row names)
    python benchmarks/bench_learning.py --quick              # smoke: 20 steps, seed 0, its own OUT
    python benchmarks/bench_learning.py --table              # the table of what OUT holds, no runs
    python benchmarks/bench_learning.py --presets grpo --compare benchmarks/learning_baselines.json

``--compare FILE`` runs the chosen rows (default: every row of FILE) into a directory named after the
working tree's commit and diff, then prints, per row, each figure's change against FILE and flags
(``!``) a change beyond the seed spread (see :func:`learning_table.compare`); exit code 1 when any is.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_cases import CASES, Case, by_name, slug

ROOT = Path(__file__).resolve().parents[1]


def select(spec: str | None) -> list[Case]:
    """The rows whose name or preset is in the comma-separated ``spec`` (all when None)."""
    if not spec:
        return list(CASES)
    wanted = {s.strip() for s in spec.split(",") if s.strip()}
    chosen = [c for c in CASES if c.name in wanted or c.preset in wanted]
    unknown = wanted - {c.name for c in chosen} - {c.preset for c in chosen}
    if unknown:
        sys.exit(f"bench_learning: no row or preset {sorted(unknown)}; rows: {[c.name for c in CASES]}")
    return chosen


def command(case: Case, seed: int, steps: int, parts: str, run_dir: str) -> str:
    """The ``trinity train`` command line of one run."""
    sets = " ".join(
        f"--set '{s}'" if " " in s or "{" in s else f"--set {s}" for s in case.overrides(parts, seed, steps)
    )
    return f"trinity train {sets} --run-dir {run_dir} --no-progress"


# --------------------------------------------------------------------------- data made offline


def prepare_parts(parts: Path, needed: set[str], quick: bool) -> None:
    """Write the parts ``needed`` (``answers``, ``text``, ``pairs``, ``teacher``) under ``parts``."""
    from filelock import FileLock

    parts.mkdir(parents=True, exist_ok=True)
    if "teacher" in needed:
        needed.add("answers")
    with FileLock(str(parts / ".lock")):
        if "answers" in needed and not (parts / "answers.done").exists():
            from trinity_core.train.data.pairs import write_answer_experiences

            write_answer_experiences(parts / "answers", 2048, seed=0)
            (parts / "answers.done").write_text("")
        for name, writer in (("text", _write_text), ("pairs", _write_pairs)):
            if name in needed and not (parts / f"{name}.done").exists():
                writer(parts / name)
                (parts / f"{name}.done").write_text("")
        if "teacher" in needed and not (parts / "teacher.done").exists():
            _train_teacher(parts, quick)
            (parts / "teacher.done").write_text("")


def _rows_and_tokenizer() -> tuple[list[dict[str, Any]], Any]:
    import torch

    from trinity_core import registry
    from trinity_core.train.models.policy import build_char_tokenizer

    task = registry.create("task", "last_digit", {})
    return task.sample(2048, torch.Generator().manual_seed(0)), build_char_tokenizer(task.alphabet())


def _write(directory: Path, exps: list[Any]) -> None:
    import asyncio

    from trinity_core.buffer import make_buffer

    asyncio.run(make_buffer("disk", str(directory)).writer.write(exps))


def _write_text(directory: Path) -> None:
    """The answers' rows as raw text for ``cpt``: BOS + prompt + answer + EOS, every token after BOS a
    target (prompt_length 1)."""
    from trinity_core.experience import Experience
    from trinity_core.train.data.pairs import pair_experiences

    rows, tok = _rows_and_tokenizer()
    exps = pair_experiences(tok, [r["prompt"] for r in rows], [r["answer"] for r in rows])
    _write(directory, [Experience(tokens=e.tokens, prompt_length=1) for e in exps])


def _write_pairs(directory: Path) -> None:
    """DPO pairs: the prompt, the answer (chosen) against a wrong digit drawn uniformly (rejected)."""
    import torch

    from trinity_core.eid import EID
    from trinity_core.experience import Experience

    rows, tok = _rows_and_tokenizer()
    wrong = torch.randint(1, 10, (len(rows),), generator=torch.Generator().manual_seed(1)).tolist()

    def enc(text: str) -> list[int]:
        return list(tok.encode(text, add_special_tokens=False))

    _write(
        directory,
        [
            Experience(
                eid=EID(task=i),
                tokens=[tok.bos_token_id, *enc(r["prompt"])],
                chosen=[*enc(r["answer"]), tok.eos_token_id],
                rejected=[*enc(str((int(r["answer"]) + k) % 10)), tok.eos_token_id],
            )
            for i, (r, k) in enumerate(zip(rows, wrong, strict=True))
        ],
    )


TEACHER_SETS = (
    "mode=train",
    "algorithm.algorithm_type=sft",
    "data.experiences={parts}/answers",
    "data.batch_size=64",
    "trainer.lr=1e-3",
    "trainer.total_steps=300",
    "trainer.threads=1",
    "trainer.checkpoint_every=0",
    "trainer.progress=false",
)
"""The distillation teacher: an ``sft`` run of the default model on the stored answers."""


def _train_teacher(parts: Path, quick: bool) -> None:
    from trinity_core.train import train

    sets = [s.replace("{parts}", str(parts)) for s in TEACHER_SETS]
    if quick:
        sets.append("trainer.total_steps=20")
    result = train(None, overrides=sets, run_dir=parts / "teacher", overwrite=True)
    (parts / "teacher.json").write_text(json.dumps({"heldout": result.eval_accuracy}))


# --------------------------------------------------------------------------- running


def _key(record: dict[str, Any]) -> tuple[str, int, int]:
    return (record["case"], int(record["seed"]), int(record["steps"]))


def read_results(out: Path) -> list[dict[str, Any]]:
    """The records of ``OUT/results.jsonl`` (the last of each run)."""
    path = out / "results.jsonl"
    if not path.is_file():
        return []
    latest = {}
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            latest[_key(record)] = record
    return list(latest.values())


def _append(out: Path, record: dict[str, Any]) -> None:
    from filelock import FileLock

    with FileLock(str(out / "results.jsonl.lock")), (out / "results.jsonl").open("a") as fh:
        fh.write(json.dumps(record) + "\n")


def _start(case: Case, seed: int, out: Path, quick: bool) -> tuple[subprocess.Popen[bytes], Path]:
    """A worker process for one run: its stdout and stderr go to ``OUT/logs/<row>-seed<k>.log``, its
    result to the ``.json`` beside it."""
    log = out / "logs" / f"{slug(case.name)}-seed{seed}.log"
    log.parent.mkdir(exist_ok=True)
    result = log.with_suffix(".json")
    result.unlink(missing_ok=True)
    argv = [sys.executable, __file__, "--worker", case.name, "--seed", str(seed), "--out", str(out)]
    argv += ["--result", str(result)] + (["--quick"] if quick else [])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    with log.open("w") as fh:
        proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
    return proc, result


def _finish(
    case: Case, seed: int, steps: int, proc: subprocess.Popen[bytes], result: Path, budget: float
) -> dict[str, Any]:
    """The record of a worker that ended, or that ran past ``budget`` seconds (then killed)."""
    record: dict[str, Any] = {"case": case.name, "seed": seed, "steps": steps}
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        return {**record, "status": f"stopped at the time budget ({budget:.0f} s)"}
    if proc.returncode != 0 or not result.is_file():
        log = result.with_suffix(".log")
        return {**record, "status": f"failed (exit {proc.returncode}): see {log}"}
    return {**json.loads(result.read_text()), "status": "ok"}


def run_all(cases: list[Case], seeds: list[int], out: Path, jobs: int, quick: bool, budget: float) -> None:
    """Run every (case, seed) not in ``OUT/results.jsonl``, ``jobs`` worker processes at a time; a run
    that failed is run again."""
    done = {_key(r) for r in read_results(out) if not r.get("status", "").startswith("failed")}
    todo = [
        (c, s) for s in seeds for c in cases if (c.name, s, c.quick_steps if quick else c.steps) not in done
    ]
    prepare_parts(out / "parts", {p for c, _ in todo for p in c.parts}, quick)
    print(f"bench_learning: {len(todo)} runs to do, {len(done)} done, {jobs} at a time", file=sys.stderr)
    running: list[tuple[Case, int, subprocess.Popen[bytes], Path, float]] = []
    while todo or running:
        while todo and len(running) < jobs:
            case, seed = todo.pop(0)
            running.append((case, seed, *_start(case, seed, out, quick), time.time()))
        time.sleep(2)
        for item in list(running):
            case, seed, proc, result, started = item
            if proc.poll() is None and time.time() - started < budget:
                continue
            running.remove(item)
            record = _finish(case, seed, case.quick_steps if quick else case.steps, proc, result, budget)
            _append(out, record)
            load = Path("/proc/loadavg").read_text().split()[0]
            held = record.get("heldout")
            print(
                f"  {case.name} seed {seed}: {record['status']}, held-out {held}, load {load}",
                file=sys.stderr,
            )


def _worktree_id() -> str:
    """The commit and a hash of the uncommitted diff: a code change gets its own result directory."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    diff = subprocess.run(["git", "diff", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return f"{head.stdout.strip()}-{hashlib.sha1(diff.stdout.encode()).hexdigest()[:8]}"


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", help="comma-separated presets or row names (default: every row)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one torch thread each)")
    parser.add_argument("--quick", action="store_true", help="20 steps, seed 0, a separate OUT")
    parser.add_argument("--out", type=Path, help="results directory (default runs/bench_learning[-quick])")
    parser.add_argument("--time-budget", type=float, default=3600.0, help="seconds per run (default 3600)")
    parser.add_argument("--table", action="store_true", help="print the table of OUT only")
    parser.add_argument("--compare", type=Path, help="a table.json to check the chosen rows against")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)

    from learning_table import compare, load_table, render, summarize

    if ns.worker:
        from learning_run import run_case

        case = by_name()[ns.worker]
        result = run_case(case, ns.seed, case.quick_steps if ns.quick else case.steps, ns.out)
        ns.result.write_text(json.dumps(result))
        return 0
    reference = load_table(ns.compare) if ns.compare else None
    spec = ns.presets or (",".join(reference["rows"]) if reference else None)
    cases = select(spec)
    seeds = [0] if ns.quick and ns.seeds == "0,1,2" else [int(s) for s in ns.seeds.split(",")]
    out = ns.out or ROOT / "runs" / ("bench_learning" + ("-quick" if ns.quick else ""))
    if reference is not None and ns.out is None:
        out = ROOT / "runs" / f"bench_learning-check-{_worktree_id()}"
    out.mkdir(parents=True, exist_ok=True)
    if not ns.table:
        run_all(cases, seeds, out, ns.jobs, ns.quick, ns.time_budget)
    # A row's runs of another length (its budget changed since) are not part of its figures.
    wanted = {(c.name, c.quick_steps if ns.quick else c.steps) for c in cases}
    table = summarize([r for r in read_results(out) if (r["case"], r["steps"]) in wanted], cases)
    (out / "table.json").write_text(json.dumps(table, indent=1))
    parts = out / "parts"
    text = render(table, cases, str(parts.relative_to(ROOT) if parts.is_relative_to(ROOT) else parts))
    (out / "table.md").write_text(text)
    print(text)
    if reference is not None:
        report, flagged = compare(reference, table)
        print(report)
        return 1 if flagged else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
