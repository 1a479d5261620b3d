"""Check that trinity-core is installed without its extras and works for a plugin author.

Run by the core-slim tox environment: none of the train or hf extras' packages may be importable (a
plugin that pulls one in would hide a core import that needs it), ``import trinity_core`` and the
plugin author's modules load, and ``trinity train`` fails with one line naming the install command.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import sys

from trinity_core.extras import EXTRAS


def main() -> int:
    """Exit 0 when the installed core is slim and its plugin-author surface works; else say what is wrong."""
    # filelock is also a dependency of torch, so it is present either way.
    extra_only = {m for modules in EXTRAS.values() for m in modules} - {"filelock"}
    present = sorted(m for m in extra_only if importlib.util.find_spec(m))
    if present:
        print(f"check_slim: the environment holds {present}, which only trinity-core's extras should bring")
        return 1
    for module in ("trinity_core", "trinity_core.components", "trinity_core.ops", "trinity_core.testing"):
        importlib.import_module(module)
    from trinity_core.cli.main import main as trinity

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = trinity(["train"])
    lines = err.getvalue().strip().splitlines()
    if status != 1 or len(lines) != 1 or "pip install 'trinity-core[train]'" not in lines[0]:
        print(f"check_slim: `trinity train` without the train extra gave status {status} and {lines}")
        return 1
    print(f"check_slim: slim core OK; trinity train says: {lines[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
