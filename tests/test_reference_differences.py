"""docs/reference-differences.md: every link to one of its entries resolves, and the k3 accuracy note
(``expm1(u) − u``) is an entry there, not only in the kl plugin's README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.core_alone  # reads files of the repository only: it runs in tox env core only

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reference-differences.md"
LINK = re.compile(r"reference-differences(?:\.md)?#([A-Za-z0-9_-]+)")


def entries() -> dict[str, str]:
    """``{anchor: text}`` of every ``### anchor`` entry."""
    parts = re.split(r"^### (\S+)\n", DOC.read_text(encoding="utf-8"), flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def linking_files() -> list[Path]:
    patterns = [
        "*.md",
        "docs/*.md",
        "plugins/*/README.md",
        "trinity_core/**/*.py",
        "plugins/*/**/*.py",
        "tests/**/*.py",
    ]
    return [path for pattern in patterns for path in ROOT.glob(pattern) if ".venv" not in path.parts]


def test_every_link_to_an_entry_resolves() -> None:
    known = entries()
    links = [
        (path.relative_to(ROOT), anchor)
        for path in linking_files()
        for anchor in LINK.findall(path.read_text(encoding="utf-8"))
    ]
    assert len(links) > 50  # code, READMEs and docs link here; a broken glob would find none
    broken = [f"{path}: #{anchor}" for path, anchor in links if anchor not in known]
    assert not broken, f"links to entries that docs/reference-differences.md does not have: {broken}"


def test_the_k3_accuracy_note_is_an_entry_and_the_kl_readme_links_to_it() -> None:
    text = entries()["k3-accuracy"]
    assert "expm1(u) − u" in text
    assert "exp(u) − 1 − u" in text
    assert "low_var_kl" in text
    readme = (ROOT / "plugins" / "trinity-plugin-kl" / "README.md").read_text(encoding="utf-8")
    assert "reference-differences.md#k3-accuracy" in readme
