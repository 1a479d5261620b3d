"""``trinity train`` for the reliability tests: a reward that varies, and a pause point to kill a run at.

In-process tests import :func:`register_length_reward`. The process tests run this file::

    python reliability_driver.py ARGS...        # the arguments of `trinity train`

with ``PAUSE`` set to ``after_step:N`` (after step N's metrics and checkpoint), ``in_save:N`` (half of
step N's model file written) or ``in_commit:N`` (step N's checkpoint renamed into place, ``latest`` not
yet updated), and ``MARKER`` to a file path: at the pause the process creates ``MARKER`` and waits until
``MARKER.go`` exists, so a test can ``kill -9`` it at exactly that point, or let it go on.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any


def length_reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """A reward that differs between the responses of a random model, so every step changes the
    weights (exact_match is 0 for all of them: zero advantages, no update, and resume tests that
    cannot fail)."""
    return [len(c) / 8 for c in completions]


def register_length_reward() -> None:
    """Make ``length_reward`` available to ``tasks.reward_fns`` in this process."""
    from trinity_core import registry

    registry.register("reward_fn", "length_reward", length_reward, replace=True)


def _pause(marker: str) -> None:
    Path(marker).touch()
    while not Path(f"{marker}.go").exists():
        time.sleep(0.05)


def _install_pause(where: str, step: int, marker: str) -> None:
    if where == "after_step":
        from trinity_core.hooks import get_plugin_manager
        from trinity_core.hookspecs import hookimpl

        class PauseAfter:
            @hookimpl
            def trinity_on_metrics(self, step: int, metrics: dict[str, float]) -> None:
                if step == target:
                    _pause(marker)

        target = step
        get_plugin_manager().register(PauseAfter(), name="pause-after")
    elif where == "in_save":
        import accelerate.utils.other as writer  # Accelerate's binding of safetensors' save_file

        real_save = writer.safe_save_file

        def save_file(tensors: Any, filename: str, *args: Any, **kwargs: Any) -> None:
            real_save(tensors, filename, *args, **kwargs)
            path = Path(filename)
            if path.name == "model.safetensors" and path.parent.name == f".tmp-step-{step:06d}":
                os.truncate(path, path.stat().st_size // 2)
                _pause(marker)

        writer.safe_save_file = save_file
    elif where == "in_commit":
        real_replace = os.replace

        def replace(src: Any, dst: Any, **kwargs: Any) -> None:
            if Path(dst).name == "latest" and Path(src).read_text() == f"step-{step:06d}":
                _pause(marker)
            real_replace(src, dst, **kwargs)

        os.replace = replace  # type: ignore[assignment]
    else:
        raise SystemExit(f"PAUSE={where}:{step}: unknown pause point")


if __name__ == "__main__":
    # Ctrl-C as in a terminal: a shell that started the tests in the background made SIGINT ignored, and
    # an ignored signal stays ignored in the processes it starts.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    register_length_reward()
    if os.environ.get("PAUSE"):
        where, _, n = os.environ["PAUSE"].partition(":")
        _install_pause(where, int(n), os.environ["MARKER"])
    from trinity_core.cli.main import main

    sys.exit(main(["train", *sys.argv[1:]]))
