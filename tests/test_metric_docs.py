"""docs/training.md's Metrics section names every metric `trinity train` logs: the keys the trainer writes
itself, and the metrics every shipped component returns under the prefix the trainer gives them (a
policy loss's `x` is `actor/x`, an advantage function's `advantage/x`, ...)."""

from __future__ import annotations

import importlib.metadata as md
import re
from pathlib import Path

import pytest

from trinity_core.registry.shipped import SHIPPED

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = (
    "actor",
    "advantage",
    "balance",
    "buffer",
    "critic",
    "data",
    "eval",
    "explorer",
    "kl_penalty",
    "learner",
    "response",
    "reward",
    "staleness",
    "throughput",
    "time",
    "workflow",
)
"""The sections of the keys `trinity train` writes."""
SOURCES = [
    *sorted((ROOT / "trinity_core" / "train").rglob("*.py")),
    *sorted((ROOT / "trinity_core" / "workflows").rglob("*.py")),
    ROOT / "trinity_core" / "components" / "micro_batch_loss.py",
]
LITERAL = re.compile(r"(?<![\w{])[\"']((?:" + "|".join(SECTIONS) + r")/[A-Za-z0-9_@/]+)[\"']")


def _metrics_section() -> str:
    text = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    return text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]


def test_every_key_the_trainer_writes_is_documented() -> None:
    doc = _metrics_section()
    found = {key for path in SOURCES for key in LITERAL.findall(path.read_text(encoding="utf-8"))}
    assert {"reward/mean", "actor/grad_norm", "time/step_s", "workflow/turns_mean"} <= found  # the scan works
    missing = sorted(k for k in found if f"`{k}`" not in doc and not _in_a_family(k, doc))
    assert not missing, f"docs/training.md (Metrics) does not name {missing}"
    for key in ("`step`", "`lr`", "`actor/<metric>`", "`advantage/<metric>`", "trainer.progress_metrics"):
        assert key in doc


def _in_a_family(key: str, doc: str) -> bool:
    """``eval/pass@4`` is documented as ``eval/pass@k``; ``x/mean`` as ``x/{mean,max,min}``."""
    stem, _, last = key.rpartition("/")
    return (f"`{stem}/{{" in doc and last in doc) or (key.startswith("eval/pass@") and "`eval/pass@k`" in doc)


def _installed(dist: str) -> bool:
    try:
        md.distribution(dist)
    except md.PackageNotFoundError:
        return False
    return True


every_plugin = pytest.mark.skipif(
    not all(_installed(d) for names in SHIPPED.values() for d in names.values()),
    reason="needs every shipped plugin installed (tox env all)",
)


def _component_metrics() -> dict[str, set[str]]:
    """``{kind:name: metric names as logged}`` of every installed loss-like and advantage component, called
    as the conformance kit calls it."""
    from trinity_core import registry
    from trinity_core.testing import _loss, entropy_loss, kl_fn, policy_loss, value_loss
    from trinity_core.testing._core import Subject
    from trinity_core.testing.advantage_fn import _rewards, _run, is_group_computation
    from trinity_core.testing.trainer_advantage import _compute, is_trainer_advantage

    probes = {
        "policy_loss": [(policy_loss.PROBE, "actor/")],
        "kl_fn": [(kl_fn.LOSS_PROBE, "actor/"), (kl_fn.PENALTY_PROBE, "kl_penalty/")],
        "entropy_loss": [(entropy_loss.PROBE, "actor/")],
        "value_loss": [(value_loss.PROBE, "critic/")],
    }
    out: dict[str, set[str]] = {}
    for rec in registry.list_components(strict=False):
        if rec.error is not None:
            continue
        subject = Subject(rec.kind, rec.name, rec.obj, rec.distribution, rec.version, rec.value, {})
        keys: set[str] = set()
        for probe, prefix in probes.get(rec.kind, []):
            prepared = _loss._prepare(subject, probe, 0)
            _, metrics, _ = _loss._call(probe, prepared, prepared.inputs)
            keys |= {prefix + k for k in metrics}
        if rec.kind in ("advantage_fn", "add_strategy"):
            if is_group_computation(subject):
                keys |= {f"advantage/{k}" for k in _run(subject, _rewards(0))[1]}
            elif is_trainer_advantage(subject):
                keys |= {f"advantage/{k}" for k in _compute(subject, _rewards(0))[3]}
        out[f"{rec.kind}:{rec.name}"] = keys
    return out


@every_plugin
def test_every_metric_of_every_shipped_component_is_documented() -> None:
    doc = _metrics_section()
    metrics = _component_metrics()
    assert "actor/pg_clipfrac" in metrics["policy_loss:ppo"]  # the probe sees the losses' metrics
    missing = {}
    for component, keys in metrics.items():
        for key in keys:
            # The documented name: the key's last segment, a summary suffix (/mean, /max, ...) left out.
            parts = [p for p in key.split("/") if p not in ("mean", "max", "min", "sum", "last")]
            name = parts[-1]
            if not re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", doc):
                missing.setdefault(component, []).append(key)
    assert not missing, f"docs/training.md (Metrics) does not say what these are: {missing}"
