"""``trinity train`` as one learner rank of a torchrun launch, for tests/train/test_train_multiproc.py::

    torchrun --nproc_per_node N multiproc_worker.py OUT ARGS...     # ARGS: the arguments of trinity train

The test rewards (``length_reward`` and the faulty ones of async_support.py) are registered first, so the
explorer processes get them. Each rank writes ``OUT/rank<r>.json``: its exit code, the launch layout it
saw and the weight broadcasts it took part in. With ``PAUSE=after_step:N`` and ``MARKER`` set, rank 0
creates ``MARKER`` after step N's metrics and checkpoint and waits until ``MARKER.go`` exists (a test
kills a process meanwhile).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from async_support import register_fault_rewards
from reliability_driver import register_length_reward

_RUNNERS: list[Any] = []


def _keep_runner() -> None:
    """Remember the runner of the run (its layout and weight broadcasts are written out at the end)."""
    from trinity_core.train.modes.runner import Runner

    original = Runner.train

    def train(self: Any) -> Any:
        _RUNNERS.append(self)
        return original(self)

    Runner.train = train  # type: ignore[method-assign]


def _pause_after(step: int, marker: Path) -> None:
    from trinity_core.hooks import get_plugin_manager
    from trinity_core.hookspecs import hookimpl

    class PauseAfter:
        @hookimpl
        def trinity_on_metrics(self, step: int, metrics: dict[str, float]) -> None:
            if step == target and os.environ.get("RANK", "0") == "0":
                marker.touch()
                while not marker.with_name(f"{marker.name}.go").exists():
                    time.sleep(0.05)

    target = step
    get_plugin_manager().register(PauseAfter(), name="pause-after")


def main(out: Path, args: list[str]) -> int:
    register_length_reward()
    register_fault_rewards()
    _keep_runner()
    if os.environ.get("PAUSE"):
        _, _, n = os.environ["PAUSE"].partition(":")
        _pause_after(int(n), Path(os.environ["MARKER"]))
    from trinity_core.cli.main import main as cli

    code = cli(["train", *args])
    rank = int(os.environ.get("RANK", "0"))
    facts: dict[str, Any] = {"rank": rank, "code": code}
    if _RUNNERS:
        runner = _RUNNERS[-1]
        layout = runner.layout
        facts.update(
            machine=layout.machine,
            machines=layout.machines,
            explorers=layout.explorers,
            local_explorers=layout.local_explorers,
            weight_broadcasts=runner.weight_broadcasts,
        )
    (out / f"rank{rank}.json").write_text(json.dumps(facts), encoding="utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
