"""``trinity info``: versions and installed plugins; ``--self-check`` runs the data path end to end."""

from __future__ import annotations

import argparse
import platform
from collections import Counter

__all__ = ["cmd_info", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``info`` command."""
    parser = subparsers.add_parser("info", help="versions, installed plugins, and an optional self-check")
    parser.add_argument(
        "--self-check",
        action="store_true",
        help="pass a synthetic rollout through grouping, the wire format, the batch, HF datasets, "
        "the disk buffer and the 'grpo' advantage (if installed); exit 1 if any step fails",
    )
    parser.set_defaults(func=cmd_info)


def cmd_info(ns: argparse.Namespace) -> int:
    """Print versions and a plugin summary; with ``--self-check`` also run and report every check."""
    import torch

    import trinity_core
    from trinity_core.registry import list_components

    print(
        f"trinity-core {trinity_core.__version__} "
        f"(Python {platform.python_version()}, torch {torch.__version__})"
    )
    records = list_components()
    loaded = [r for r in records if r.error is None]
    failed = [r for r in records if r.error is not None]
    by_kind = Counter(r.kind for r in loaded)
    dists = sorted({f"{r.distribution} {r.version}" for r in loaded if r.distribution})
    summary = ", ".join(f"{count} {kind}" for kind, count in sorted(by_kind.items())) or "none"
    print(f"components: {summary}")
    print(f"plugin distributions: {', '.join(dists) or 'none (see docs/plugins.md)'}")
    if failed:
        print(f"plugins that failed to load: {len(failed)} (run `trinity plugins list` for details)")
    if not ns.self_check:
        return 0

    from trinity_core.selfcheck import run_self_check

    print("\nself-check on a synthetic rollout (128 tasks x 8 responses):")
    results = run_self_check()
    width = max(len(r.name) for r in results)
    for result in results:
        status = "skip" if result.skipped else "ok  " if result.ok else "FAIL"
        print(f"  {status} {result.name:<{width}}  {result.seconds * 1e3:8.1f} ms  {result.detail}")
    failures = [r for r in results if not r.ok]
    print("all checks passed" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0
