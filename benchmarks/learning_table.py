"""The table of bench_learning.py: per-row figures over seeds, the Markdown table, and ``--compare``.

A figure of a row is given as ``mean [min, max]`` over its seeds. Steps to target: the mean over the
seeds that reached it, with how many did when not all. ``--compare`` flags a figure whose seed ranges
(old and new) do not overlap and whose means differ by more than a floor (0.02 for rewards and
accuracies, a tenth of the old mean for steps): with 3 seeds per side, two samples of one distribution
fail to overlap with probability 1/10, so a flag asks for a look (or more seeds), not a verdict. Runs
whose figures are all equal seed by seed are reported as identical.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from learning_cases import ENV_ARGS, Case

__all__ = ["compare", "load_table", "render", "summarize"]

FIGURES = (
    "reward_last50",
    "heldout",
    "heldout_greedy",
    "untrained",
    "steps_to_target",
    "seconds_to_target",
    "train_seconds",
)


def _stats(values: list[float]) -> dict[str, Any] | None:
    kept = [v for v in values if v is not None]
    if not kept:
        return None
    return {
        "mean": statistics.fmean(kept),
        "min": min(kept),
        "max": max(kept),
        "n": len(kept),
        "values": values,
    }


def summarize(records: list[dict[str, Any]], cases: list[Case]) -> dict[str, Any]:
    """``{"rows": {name: figures}, "baselines": {...}}`` of the ``records`` of ``cases``."""
    rows: dict[str, Any] = {}
    for case in cases:
        mine = sorted((r for r in records if r["case"] == case.name), key=lambda r: r["seed"])
        ok = [r for r in mine if r.get("status") == "ok"]
        row: dict[str, Any] = {
            "seeds": [r["seed"] for r in ok],
            "steps": case.steps if not mine else mine[0]["steps"],
            "problems": [f"seed {r['seed']}: {r.get('status')}" for r in mine if r.get("status") != "ok"],
            "load": _stats([r["load"]["mean"] for r in ok]),
        }
        for figure in FIGURES:
            row[figure] = _stats([r.get(figure) for r in ok])
        rows[case.name] = row
    return {"rows": rows, "baselines": _baselines(cases)}


def _baselines(cases: list[Case]) -> dict[str, Any]:
    """The scripted policies of the environments the rows use (random; Blackjack also stick, hit<17)."""
    from learning_envs import frozen_lake_random_success, scripted_blackjack

    out: dict[str, Any] = {}
    tasks = {c.task for c in cases}
    if "frozen_lake" in tasks:
        out["frozen_lake"] = {
            "random": frozen_lake_random_success(ENV_ARGS["frozen_lake"]["workflow"]["max_turns"])
        }
    if "blackjack" in tasks:
        args = ENV_ARGS["blackjack"]
        scripted = scripted_blackjack(args["task"], 2000, args["workflow"]["max_turns"])
        out["blackjack"] = {name: s["return"] for name, s in scripted.items()}
    return out


def load_table(path: Path) -> dict[str, Any]:
    """A ``table.json`` written by bench_learning.py."""
    return json.loads(Path(path).read_text())


def _fmt(stats: dict[str, Any] | None, digits: int = 2) -> str:
    if stats is None:
        return "–"
    mean, lo, hi = stats["mean"], stats["min"], stats["max"]
    if stats["n"] == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _steps(row: dict[str, Any], budget: int) -> str:
    stats, seeds = row["steps_to_target"], len(row["seeds"])
    if stats is None:
        return f"not in {budget}" if seeds else "–"
    text = _fmt(stats, 0)
    return text if stats["n"] == seeds else f"{text} ({stats['n']}/{seeds})"


def _baseline(case: Case, table: dict[str, Any]) -> str:
    row = table["rows"][case.name]
    untrained = row["untrained"]
    if case.kind == "env":
        base = table["baselines"].get(case.task, {})
        scripted = "; ".join(
            f"{k} {v:.3f}" if case.task == "blackjack" else f"{k} {v:.4f}" for k, v in base.items()
        )
        return f"{scripted}; untrained {_fmt(untrained, 3)}"
    text = f"untrained {_fmt(untrained)}"
    grpo = table["rows"].get("grpo")
    if case.kind == "rl" and case.name != "grpo" and grpo and grpo["reward_last50"]:
        text += f"; grpo {grpo['reward_last50']['mean']:.2f}"
    return text


def render(table: dict[str, Any], cases: list[Case], parts: str) -> str:
    """The Markdown table of ``cases``, then each row's command."""
    from bench_learning import command

    head = (
        "| row | task | steps | reward, last 50 steps | held-out | steps to target | s to target | "
        "baseline | load |\n|---|---|---:|---|---|---|---|---|---|\n"
    )
    lines = []
    for case in cases:
        row = table["rows"][case.name]
        digits = 3 if case.kind == "env" else 2
        held = _fmt(row["heldout"], digits)
        if row["heldout_greedy"] is not None:
            held += f" (greedy {_fmt(row['heldout_greedy'], digits)})"
        load = row["load"]
        lines.append(
            f"| {case.name} | {case.task} | {row['steps']} | {_fmt(row['reward_last50'])} | {held} | "
            f"{_steps(row, row['steps'])} | {_fmt(row['seconds_to_target'], 0)} | {_baseline(case, table)} | "
            f"{_fmt(load, 1)} |"
        )
        lines.extend(f"|  | {p} |  |  |  |  |  |  |  |" for p in row["problems"])
    commands = "\n".join(
        f"# {c.name}\n{command(c, 0, table['rows'][c.name]['steps'], parts, 'RUN_DIR')}" for c in cases
    )
    return (
        head
        + "\n".join(lines)
        + f"\n\nCommands (seed 0; seeds 1 and 2 differ in trainer.seed):\n\n```bash\n{commands}\n```\n"
    )


def compare(reference: dict[str, Any], table: dict[str, Any]) -> tuple[str, bool]:
    """Each shared row's figures, new against ``reference``; ``(report, any flagged)``."""
    lines, flagged = ["| row | figure | old | new | change | |", "|---|---|---|---|---|---|"], False
    for name, new in table["rows"].items():
        old = reference["rows"].get(name)
        if old is None or not new["seeds"]:
            continue
        for figure in ("reward_last50", "heldout", "steps_to_target"):
            a, b = old.get(figure), new.get(figure)
            if a is None or b is None:
                if (a is None) != (b is None):
                    lines.append(f"| {name} | {figure} | {_fmt(a)} | {_fmt(b)} | reached / not reached | ! |")
                    flagged = True
                continue
            delta = b["mean"] - a["mean"]
            floor = 0.1 * abs(a["mean"]) if figure == "steps_to_target" else 0.02
            apart = b["min"] > a["max"] or b["max"] < a["min"]
            same = a["values"] == b["values"]
            mark = "identical" if same else ("!" if apart and abs(delta) > floor else "")
            flagged |= mark == "!"
            digits = 0 if figure == "steps_to_target" else 3
            change = f"{delta:+.{digits}f}"
            lines.append(f"| {name} | {figure} | {_fmt(a, digits)} | {_fmt(b, digits)} | {change} | {mark} |")
    return "\n".join(lines), flagged
