"""Access to the published reference implementation, trinity-rft 0.6.0, for comparison tests.

``scripts/test.sh`` (what ``.ci/run`` runs) installs it with
``pip install --no-deps --target .ref trinity-rft==0.6.0 omegaconf``: a
separate folder, because its ``trinity`` console script and top-level package name would otherwise clash
with ours. The folder is ``$TRINITY_REFERENCE_DIR``, else ``.ref`` at the root of the trinity-core
checkout. Its algorithm modules import ``ray`` only for logging; ``_refstub/ray`` stands in for it.
Plugin tests use it as ``from trinity_core.testing.reference import import_reference``.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

__all__ = ["REF_DIR", "ROOT", "STUB_DIR", "import_reference", "reference_available"]

ROOT = Path(__file__).resolve().parents[2]
REF_DIR = Path(os.environ.get("TRINITY_REFERENCE_DIR", ROOT / ".ref"))
STUB_DIR = Path(__file__).resolve().parent / "_refstub"


def reference_available() -> bool:
    """True when the reference wheel is unpacked in ``REF_DIR``."""
    return (REF_DIR / "trinity" / "__init__.py").is_file()


def import_reference(module: str) -> ModuleType:
    """Import ``module`` (e.g. ``"trinity.common.experience"``) from the reference.

    Skips the calling test outside CI when the reference is not installed; in CI (``CI`` set) a missing
    reference is a failure, so comparisons can never silently vanish.
    """
    if not reference_available():
        message = (
            f"reference trinity-rft 0.6.0 not found in {REF_DIR}; run scripts/test.sh or set "
            f"TRINITY_REFERENCE_DIR (see trinity_core/testing/reference.py)"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    for path in (str(REF_DIR), str(STUB_DIR)):
        if path not in sys.path:
            sys.path.append(path)
    return importlib.import_module(module)
