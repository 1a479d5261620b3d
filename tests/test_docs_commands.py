"""Every ``trinity`` command in the docs parses; the quick ones run; local install paths exist; the
plugin READMEs use paths relative to the repository; the entry-point example names a real module."""

from __future__ import annotations

import importlib.metadata as md
import re
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from trinity_core.cli.main import build_parser, main
from trinity_core.registry.shipped import SHIPPED

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([*ROOT.glob("docs/*.md"), ROOT / "README.md", *ROOT.glob("plugins/*/README.md")])
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
# Commands cheap enough to run in a unit test (no training); everything else is only parsed.
RUNNABLE = (("plugins", "list"), ("plugins", "show"), ("config", "validate"))


def _missing_plugins() -> list[str]:
    missing = []
    for dist in sorted({d for names in SHIPPED.values() for d in names.values()}):
        try:
            md.distribution(dist)
        except md.PackageNotFoundError:
            missing.append(dist)
    return missing


# The docs describe a full installation (requirements/all.txt; tox env `all`).
needs_every_plugin = pytest.mark.skipif(
    bool(_missing_plugins()), reason="needs every shipped plugin installed"
)


def commands(path: Path, program: str) -> Iterator[list[str]]:
    """Each command line of ``program`` in the shell blocks of ``path`` (prompts, env vars, comments
    and line continuations handled), as argv without the program."""
    for lang, body in FENCE.findall(path.read_text(encoding="utf-8")):
        if lang not in ("bash", "console", "sh", "shell"):
            continue
        for raw in body.replace("\\\n", " ").splitlines():
            line = raw.strip()
            if lang == "console" and not line.startswith("$ "):
                continue  # output, not a command
            line = line.removeprefix("$ ")
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue
            while words and ENV.match(words[0]):
                words = words[1:]
            if words and words[0] == program:
                yield words[1:]


def _ids(items: list[tuple[Path, list[str]]]) -> list[str]:
    return [f"{p.relative_to(ROOT)}:{' '.join(argv)[:40]}" for p, argv in items]


TRINITY = [(p, argv) for p in DOCS for argv in commands(p, "trinity")]


def test_the_docs_hold_trinity_commands() -> None:
    assert len(TRINITY) > 10


@pytest.mark.parametrize(("doc", "argv"), TRINITY, ids=_ids(TRINITY))
def test_every_documented_trinity_command_parses(doc: Path, argv: list[str]) -> None:
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{doc.relative_to(ROOT)}: `trinity {' '.join(argv)}` does not parse (exit {exc.code})")


QUICK = [
    (p, argv)
    for p, argv in TRINITY
    if tuple(argv[:2]) in RUNNABLE
    # placeholders, config files and the example distribution (installed by tests/test_authoring.py only)
    and not any(a.endswith((".yaml", ".yml")) or a.isupper() or a.startswith("example") for a in argv)
]


@needs_every_plugin
@pytest.mark.parametrize(("doc", "argv"), QUICK, ids=_ids(QUICK))
def test_documented_listing_and_validate_commands_run(
    doc: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(argv)
    out = capsys.readouterr()
    assert status == 0, f"{doc.relative_to(ROOT)}: `trinity {' '.join(argv)}` exited {status}: {out.err}"


TRAIN = [(p, argv) for p, argv in TRINITY if argv[:1] == ["train"] and "--config" not in argv]


@needs_every_plugin
@pytest.mark.parametrize(("doc", "argv"), TRAIN, ids=_ids(TRAIN))
def test_documented_train_commands_resolve(
    doc: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The config a documented ``trinity train`` would run resolves (``config validate`` with its --set)."""
    ns = build_parser().parse_args(argv)
    sets = [word for value in ns.overrides for word in ("--set", value)]
    status = main(["config", "validate", *sets])
    assert status == 0, f"{doc.relative_to(ROOT)}: `trinity {' '.join(argv)}`: {capsys.readouterr().err}"


PIP = [(p, argv) for p in DOCS for argv in commands(p, "pip")]


@pytest.mark.parametrize(("doc", "argv"), PIP, ids=_ids(PIP))
def test_local_paths_of_documented_pip_installs_exist(doc: Path, argv: list[str]) -> None:
    for word in argv:
        local = word.split("[", 1)[0]
        if local.startswith(("./plugins/", "plugins/", "requirements/", "examples/", "./examples/")):
            assert (ROOT / local).exists(), f"{doc.relative_to(ROOT)}: {word} does not exist"


@pytest.mark.parametrize("readme", sorted(ROOT.glob("plugins/*/README.md")), ids=lambda p: p.parent.name)
def test_plugin_readmes_use_relative_paths(readme: Path) -> None:
    absolute = re.findall(r"(?<![\w.~])/(?:home|work|Users|root|tmp|srv|opt|mnt)/\S+", readme.read_text())
    assert not absolute, f"{readme.relative_to(ROOT)} names machine paths {absolute}; use repository paths"


def test_the_entry_point_example_names_the_real_modules() -> None:
    text = (ROOT / "docs" / "plugins.md").read_text()
    project = tomllib.loads((ROOT / "plugins/trinity-plugin-sapo/pyproject.toml").read_text())["project"]
    for group, eps in project["entry-points"].items():
        for name, value in eps.items():
            if f'[project.entry-points."{group}"]\n{name} = ' in text:
                assert f'{name} = "{value}"' in text


def test_requirements_all_installs_every_shipped_plugin() -> None:
    lines = (ROOT / "requirements" / "all.txt").read_text().splitlines()
    for plugin in sorted((ROOT / "plugins").glob("*/pyproject.toml")):
        assert f"-e plugins/{plugin.parent.name}" in lines


@needs_every_plugin
def test_plugins_list_of_every_shipped_plugin_fits_100_columns(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "list"]) == 0
    table = capsys.readouterr().out.split("\n\n", 1)[0].splitlines()
    assert len(table) > 50
    assert max(len(line) for line in table) <= 100


def test_requirements_all_brings_peft_through_the_lora_extra_and_tox_train_takes_it_from_there() -> None:
    """benchmarks/bench_memory.py's LoRA configuration needs peft: requirements/all.txt installs it (the
    core's lora extra), and tox's train env, which installs requirements/all.txt, pins no second peft."""
    lines = (ROOT / "requirements" / "all.txt").read_text().splitlines()
    [core] = [line for line in lines if line.startswith("-e .[")]
    extras = core.removeprefix("-e .[").removesuffix("]").split(",")
    assert "lora" in extras
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("peft") for dep in project["optional-dependencies"]["lora"])
    assert '"lora"' in (ROOT / "benchmarks" / "bench_memory.py").read_text()  # the configuration needing it
    tox = (ROOT / "tox.ini").read_text()
    train_env = tox.split("[testenv:train]", 1)[1].split("\n[", 1)[0]
    assert "-r {toxinidir}/requirements/all.txt" in train_env
    assert "peft" not in train_env.split("deps =", 1)[1].split("commands =", 1)[0]


@needs_every_plugin
def test_authoring_says_how_to_test_a_clipping_loss_off_policy() -> None:
    """The default run makes one update per batch (ratio exactly 1: every clipping loss acts as PPO);
    docs/authoring.md shows a run whose ratio leaves 1, and that run does make several updates."""
    from trinity_core.config import resolve_config
    from trinity_core.train.run import DEFAULT_CONFIG

    doc = ROOT / "docs" / "authoring.md"
    section = doc.read_text().split("### Testing a clipping loss", 1)[1].split("\n## ", 1)[0]
    assert "ratio" in section
    assert "exactly 1" in section
    assert "actor/pg_clipfrac" in section
    [argv] = [a for p, a in TRAIN if p == doc and any("minibatches" in w for w in a)]
    ns = build_parser().parse_args(argv)
    default = resolve_config(None, embedded=DEFAULT_CONFIG)
    assert default.trainer.epochs * default.trainer.minibatches == 1  # why the section exists
    resolved = resolve_config(None, overrides=ns.overrides, embedded=DEFAULT_CONFIG)
    assert resolved.trainer.epochs * resolved.trainer.minibatches > 1
