"""What a run shows its user: RL figures on the progress bar and in the summary, the hyperparameters
for the trackers, sample rows in ``samples.jsonl``, the reward curve.

The progress bar and the summary show figures that say whether RL is working (reward, response
length, entropy, KL, clip fraction, gradient norm, a windowed steps/s), not the policy loss: with
group-normalised advantages its on-policy value is about zero at every step.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "FIGURES",
    "RunReport",
    "SampleLog",
    "StepRate",
    "format_figures",
    "hparams",
    "init_trackers",
    "markdown_table",
    "metric_curve",
    "rl_figures",
    "run_summary",
]


def _logger() -> Any:
    """The training logger (Accelerate's: main process only), imported when a run reports: the core
    without the train extra imports this module and must say which extra is missing, not fail here."""
    from accelerate.logging import get_logger

    return get_logger("trinity_core.train")


FIGURES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("reward", ("reward/mean",), "{:.3f}"),
    ("len", ("response/length",), "{:.1f}"),
    ("entropy", ("actor/entropy", "actor/entropy_loss"), "{:.3f}"),
    ("kl", ("actor/kl_loss", "actor/ppo_kl"), "{:.2g}"),
    ("clip", ("actor/pg_clipfrac",), "{:.3f}"),
    ("gnorm", ("actor/grad_norm",), "{:.3f}"),
)
"""``(short name, metric keys in order of preference, format)`` of the figures shown to the user. KL is
the KL loss term when the run has one, else the policy's KL to the sampling policy (``ppo_kl``)."""


def rl_figures(out: Mapping[str, float], extra: Sequence[str] = ()) -> dict[str, float]:
    """The figures of :data:`FIGURES` that one step's metrics hold (not NaN), by short name, then the
    metrics named in ``extra`` (``trainer.progress_metrics``) that it holds, by their own key."""
    figures = {}
    for name, keys, _ in FIGURES:
        value = next((out[k] for k in keys if k in out and not math.isnan(out[k])), None)
        if value is not None:
            figures[name] = float(value)
    for key in extra:
        if key in out and not math.isnan(out[key]):
            figures[key] = float(out[key])
    return figures


def format_figures(figures: Mapping[str, float], steps_per_s: float = math.nan) -> str:
    """``reward 0.812 | len 2.0 | ... | 9.1 step/s`` (the figures present, then the rate if known)."""
    formats = {name: fmt for name, _, fmt in FIGURES}
    parts = [f"{name} {formats.get(name, '{:.3g}').format(v)}" for name, v in figures.items()]
    if not math.isnan(steps_per_s):
        parts.append(f"{steps_per_s:.2f} step/s")
    return " | ".join(parts)


class StepRate:
    """Steps per second over the last ``window`` steps (the whole run's mean hides a slow-down)."""

    def __init__(self, window: int = 20) -> None:
        self.times: deque[float] = deque(maxlen=window + 1)

    def start(self, now: float | None = None) -> None:
        """Mark the start of the first step timed."""
        self.times.append(time.perf_counter() if now is None else now)

    def tick(self, now: float | None = None) -> float:
        """Mark the end of a step; return the windowed rate (NaN before two marks)."""
        self.times.append(time.perf_counter() if now is None else now)
        span = self.times[-1] - self.times[0]
        return (len(self.times) - 1) / span if len(self.times) > 1 and span > 0 else math.nan


def run_summary(
    history: Sequence[Mapping[str, float]], window: int = 10, extra: Sequence[str] = ()
) -> dict[str, float]:
    """Means of the RL figures (and the ``extra`` metrics) over the last ``window`` steps, and their
    steps/s (from ``time/step_s``)."""
    last = [rl_figures(r, extra) for r in history[-window:]]
    summary: dict[str, float] = {}
    for name in [*(name for name, _, _ in FIGURES), *extra]:
        values = [f[name] for f in last if name in f]
        if values:
            summary[name] = sum(values) / len(values)
    steps = history[-window:]
    seconds = [r["time/step_s"] for r in steps if not math.isnan(r.get("time/step_s", math.nan))]
    if seconds and sum(seconds) > 0:
        summary["steps_per_s"] = len(seconds) / sum(seconds)
    return summary


def metric_curve(rows: Sequence[Mapping[str, float]], key: str, points: int = 9) -> list[tuple[int, float]]:
    """Mean of ``key`` over windows of ``rows`` ending at ``points`` evenly spaced steps.

    Empty when no row holds ``key`` (mode ``train`` on experiences without rewards).
    """
    rows = [r for r in rows if key in r]
    if not rows:
        return []
    window = max(len(rows) // (points * 2), 1)
    picks = sorted({round(i * (len(rows) - 1) / (points - 1)) for i in range(points)})
    curve = []
    for p in picks:
        values = [r[key] for r in rows[max(p - window + 1, 0) : p + 1]]
        curve.append((int(rows[p]["step"]), sum(values) / len(values)))
    return curve


def hparams(config: Any) -> dict[str, bool | int | float | str]:
    """The resolved config as flat ``section/key`` scalars, as trackers take them (TensorBoard's
    hparams accept only bool, int, float and str: lists, mappings' leaves and None become text)."""
    flat: dict[str, bool | int | float | str] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, Mapping) and node:
            for key, value in node.items():
                walk(f"{prefix}/{key}" if prefix else str(key), value)
        elif isinstance(node, bool | int | float | str):
            flat[prefix] = node
        else:
            flat[prefix] = json.dumps(node)

    walk("", config.model_dump(mode="json"))
    return flat


def init_trackers(accelerator: Any, config: Any) -> None:
    """Start the accelerator's trackers (project ``trinity``) with the run's :func:`hparams`."""
    if accelerator.log_with:
        # TensorBoard's writer queue holds 10 events by default and each metric is one event: with a
        # few dozen metrics a step, the training thread waited on the writer thread every step.
        init_kwargs = {"tensorboard": {"max_queue": 1000}}
        accelerator.init_trackers("trinity", config=hparams(config), init_kwargs=init_kwargs)


def markdown_table(columns: Sequence[str], data: Sequence[Sequence[Any]]) -> str:
    """``data`` as a Markdown table (what TensorBoard's text panel renders); pipes and line breaks in
    the cells are escaped so that each row stays one table row."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", "<br>")

    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in data]
    return "\n".join(lines)


class SampleLog:
    """Every ``every`` steps, ``rows`` prompt/completion/reward rows (one response of each of the first
    prompts) appended to ``path`` as JSON lines and to the trackers that have a table (``log_table``:
    wandb, ClearML), or to TensorBoard as a Markdown table in its text panel (tag ``samples``).

    Args:
        path: the run's ``samples.jsonl`` (None: not written, e.g. on processes other than the main).
        every: the interval in steps (0: never).
        tokenizer: decodes prompts and completions (special tokens dropped).
        trackers: the accelerator's trackers.
    """

    def __init__(
        self, path: Path | None, every: int, tokenizer: Any, trackers: Sequence[Any], rows: int = 4
    ) -> None:
        self.path, self.every, self.tokenizer, self.trackers, self.rows = (
            path,
            every,
            tokenizer,
            trackers,
            rows,
        )

    def due(self, step: int) -> bool:
        """Whether 0-based step ``step`` logs samples."""
        return self.path is not None and self.every > 0 and (step + 1) % self.every == 0

    def __call__(self, step: int, rollout: Any, rewards: Sequence[float | None], group_size: int) -> None:
        """Log samples of step ``step`` (0-based) from its rollout and rewards when due."""
        if not self.due(step):
            return
        picks = list(range(0, len(rewards), group_size))[: self.rows]
        prompts = [rollout.prompt_ids[i][rollout.prompt_mask[i]].tolist() for i in picks]
        responses = [rollout.response_ids[i, : int(rollout.response_lengths[i])].tolist() for i in picks]
        self._write(step, prompts, responses, [rewards[i] for i in picks])

    def experiences(self, step: int, experiences: Sequence[Any]) -> None:
        """Log samples of step ``step`` (0-based) from the experiences it made, when due: where the
        learner gets no rollout, only experiences (an explorer process). One experience of each of the
        first tasks, as from a rollout."""
        if not self.due(step):
            return
        picks: dict[str, Any] = {}  # the first experience of each task (GRPO group), by task id
        for exp in experiences:
            if len(picks) == self.rows:
                break
            if exp.tokens is not None:
                picks.setdefault(exp.eid.tid, exp)
        chosen = list(picks.values())
        prompts = [e.tokens[: e.prompt_length].tolist() for e in chosen]
        responses = [e.tokens[e.prompt_length :].tolist() for e in chosen]
        self._write(step, prompts, responses, [e.reward for e in chosen])

    def _write(
        self,
        step: int,
        prompts: Sequence[list[int]],
        responses: Sequence[list[int]],
        rewards: Sequence[float | None],
    ) -> None:
        """Decode the picked rows and append them to the file and the trackers."""
        if self.path is None or not prompts:
            return
        decode = self.tokenizer.batch_decode
        rows = [
            {"step": step + 1, "prompt": p, "completion": c, "reward": r}
            for p, c, r in zip(
                decode(prompts, skip_special_tokens=True),
                decode(responses, skip_special_tokens=True),
                rewards,
                strict=True,
            )
        ]
        with self.path.open("a", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in rows)
        columns = ["step", "prompt", "completion", "reward"]
        data = [[r[c] for c in columns] for r in rows]
        for tracker in self.trackers:
            if hasattr(tracker, "log_table"):
                tracker.log_table("samples", columns=columns, data=data, step=step + 1)
            elif getattr(tracker, "name", None) == "tensorboard":  # no tables: a Markdown one as text
                tracker.log({"samples": markdown_table(columns, data)}, step=step + 1)


class RunReport:
    """The reporting of one run for the runner: start line, sample rows, progress-bar figures, the
    end summary and the plot.

    Args:
        config: the resolved run configuration (``trainer.log_samples_every``, names for the plot).
        run_dir: the run directory (``samples.jsonl``, ``plot.png``).
        tokenizer: decodes the sample rows.
        accelerator: its trackers receive the sample tables; only its main process writes files.
    """

    def __init__(self, config: Any, run_dir: Path, tokenizer: Any, accelerator: Any) -> None:
        self.config, self.run_dir = config, run_dir
        path = run_dir / "samples.jsonl" if accelerator.is_main_process else None
        every = config.trainer.log_samples_every
        self.sample_log = SampleLog(path, every, tokenizer, accelerator.trackers)
        self.rate = StepRate()
        self._checked_extra = False

    def begin(self, start_step: int, total_steps: int) -> None:
        """Log (at debug level: an error later must stay the only line on stderr) what the run is about to
        do; start the step clock."""
        _logger().debug(
            f"{self.config.mode}: steps {start_step + 1}-{total_steps}, run directory {self.run_dir}"
        )
        self.rate.start()

    def samples(
        self,
        step: int,
        rollout: Any,
        rewards: Sequence[float | None],
        experiences: Sequence[Any] | None = None,
    ) -> None:
        """Log sample rows of step ``step`` (0-based) when due: from its rollout, or from its experiences
        when a per-task workflow made them (no rollout)."""
        if rollout is None:
            self.sample_log.experiences(step, experiences or ())
        else:
            self.sample_log(step, rollout, rewards, self.config.algorithm.repeat_times)

    def sample_experiences(self, step: int, experiences: Sequence[Any]) -> None:
        """Log sample rows of step ``step`` (0-based) from its experiences when due (an explorer process)."""
        self.sample_log.experiences(step, experiences)

    def postfix(self, out: Mapping[str, float]) -> str:
        """The progress bar's text after a step with metrics ``out`` (ticks the step clock).

        A ``trainer.progress_metrics`` key the first step did not log is warned about once.
        """
        extra = self.config.trainer.progress_metrics
        if not self._checked_extra:
            self._checked_extra = True
            missing = [k for k in extra if k not in out]
            if missing:
                _logger().warning(
                    f"trainer.progress_metrics: {missing} were not logged at the first step (see the Metrics "
                    "section of docs/training.md for the keys)"
                )
        return format_figures(rl_figures(out, extra), self.rate.tick())

    def summary(self, history: Sequence[Mapping[str, float]]) -> dict[str, float]:
        """:func:`run_summary` of the run, also logged."""
        summary = run_summary(history, extra=self.config.trainer.progress_metrics)
        figures = {k: v for k, v in summary.items() if k != "steps_per_s"}
        _logger().info(f"last 10 steps: {format_figures(figures, summary.get('steps_per_s', math.nan))}")
        return summary

    def plot(self) -> str | None:
        """``plot.png`` of the run, titled with the run, the algorithm and the task."""
        from trinity_core.train.report.plot import plot_run

        algorithm, task = self.config.algorithm.algorithm_type, self.config.tasks.label
        title = f"{self.run_dir.name}: {algorithm} on {task}"
        return plot_run(self.run_dir / "metrics.jsonl", self.run_dir / "plot.png", title=title)
