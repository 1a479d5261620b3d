"""The verl examples of docs/integrations.md: the ``register()`` block runs as written and looks its
names up through verl's registries; the YAML config parses and names what ``register()`` registered;
the shell example's ``TRINITY_VERL_ARGS`` and plugin module work.

Every fenced ``python`` block of the page carries a ``<!-- test: ENV ... -->`` comment on the line
before it; this file runs the ``verl`` ones, tests/integrations/trl/test_docs_examples.py the ``trl``
ones.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
import yaml

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos", reason="needs trinity-core[verl]")

from trinity_core.integrations.verl import ARGS_ENV, PREFIX, register  # noqa: E402
from trinity_core.ops import LOSS_AGG_MODES  # noqa: E402

DOC = Path(__file__).resolve().parents[3] / "docs" / "integrations.md"
_BLOCK = re.compile(r"(?:<!-- test: (?P<env>[\w-]+)[^>]*-->\n)?```(?P<lang>\w+)\n(?P<code>.*?)```", re.S)


def doc_blocks(lang: str) -> list[tuple[str | None, str]]:
    """``(test env or None, code)`` of every fenced ``lang`` block of docs/integrations.md, in order."""
    return [(m["env"], m["code"]) for m in _BLOCK.finditer(DOC.read_text()) if m["lang"] == lang]


def _only(lang: str, env: str) -> str:
    (code,) = [code for block_env, code in doc_blocks(lang) if block_env == env]
    return code


def test_every_python_example_names_its_env() -> None:
    envs = [env for env, _ in doc_blocks("python")]
    assert envs
    assert all(env in ("trl", "verl") for env in envs), envs
    assert "verl" in envs


def test_register_example_runs_and_looks_up_through_verl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ARGS_ENV, raising=False)
    namespace: dict[str, object] = {"__name__": "docs_example"}
    exec(compile(_only("python", "verl"), f"{DOC}:verl", "exec"), namespace)
    assert namespace["loss_fn"] is core_algos.POLICY_LOSS_REGISTRY[PREFIX + "sapo"]
    assert namespace["estimator"] is core_algos.ADV_ESTIMATOR_REGISTRY[PREFIX + "opmd"]
    register()  # back to default arguments for the other tests


def test_yaml_example_names_what_register_registered() -> None:
    config = yaml.safe_load(_only("yaml", "verl-yaml"))
    registered = register()
    actor = config["actor_rollout_ref"]["actor"]
    assert config["algorithm"]["adv_estimator"] in registered["advantage_fn"]
    assert actor["policy_loss"]["loss_mode"] in registered["policy_loss"]
    assert actor["loss_agg_mode"] in LOSS_AGG_MODES
    core_algos.get_policy_loss_fn(actor["policy_loss"]["loss_mode"])
    core_algos.get_adv_estimator_fn(config["algorithm"]["adv_estimator"])


def test_shell_example_environment_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    """``VERL_USE_EXTERNAL_MODULES`` names an importable module and ``TRINITY_VERL_ARGS`` parses and
    reaches ``register()``; the command line's names are registered."""
    (shell,) = [code for _, code in doc_blocks("bash") if ARGS_ENV in code]
    env = dict(re.findall(r"^export (\w+)='?(.*?)'?$", shell, re.M))
    importlib.import_module(env["VERL_USE_EXTERNAL_MODULES"])
    json.loads(env[ARGS_ENV])
    monkeypatch.setenv(ARGS_ENV, env[ARGS_ENV])
    registered = register()
    names = dict(re.findall(r"^\s*([\w.]+)=(trinity\.\w+)", shell, re.M))
    assert names["algorithm.adv_estimator"] in registered["advantage_fn"]
    assert names["actor_rollout_ref.actor.policy_loss.loss_mode"] in registered["policy_loss"]
    monkeypatch.delenv(ARGS_ENV)
    register()


def _closure(requirements: list[str], extra: str = "") -> set[str]:
    """Normalised names of the installed distributions ``requirements`` pull in, transitively (markers
    evaluated; ``extra`` applies to the first level only)."""
    import importlib.metadata as md

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = [(r, extra) for r in requirements]
    while todo:
        raw, active = todo.pop()
        req = Requirement(raw)
        if req.marker is not None and not req.marker.evaluate({"extra": active}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        todo += [(r, e) for r in dist.requires or [] for e in ["", *req.extras]]
    return seen


def _site_view(dists: set[str], dest: Path) -> Path:
    """A folder of symlinks to the files of ``dists`` only (modules and their .dist-info), as a site that
    holds nothing else would; trinity-core itself (an editable install) is left out."""
    import importlib.metadata as md

    dest.mkdir()
    for name in sorted(dists - {"trinity-core"}):
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        for top in {f.parts[0] for f in dist.files or [] if f.parts and f.parts[0] != ".."}:
            src = Path(str(dist.locate_file(top)))
            if src.exists() and not (dest / top).exists() and not top.endswith(".pth"):
                (dest / top).symlink_to(src)
    return dest


def test_the_minimum_install_is_enough_to_import_verls_registries(tmp_path: Path) -> None:
    """docs/integrations.md's minimum install (trinity-core[train], what the block names, verl without its
    dependencies) imports verl's registries and our integration in a site that holds only those."""
    import subprocess
    import sys

    block = re.search(r"<!-- install: verl-minimum[^>]*-->\n```bash\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None
    words = [w.strip("'") for w in block.group(1).split()]
    named = [w for w in words if w not in ("pip", "install", "dist") and not w.startswith("-")]
    assert "verl==0.9.1" in named
    requirements = [w for w in named if not w.startswith(("verl", "trinity-plugin", "trinity-core"))]
    assert {"ray", "omegaconf", "codetiming"} <= set(requirements)
    wanted = {"verl"} | _closure(requirements) | _closure(["trinity-core[train]"], extra="train")
    view = _site_view(wanted, tmp_path / "site")
    root = str(DOC.parents[1])
    code = (
        f"import sys; sys.path[:0] = [{str(view)!r}, {root!r}]; "
        "import verl.trainer.ppo.core_algos, trinity_core.integrations.verl; print('imported')"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"the minimum install is not enough:\n{done.stderr[-3000:]}"
    assert "imported" in done.stdout
