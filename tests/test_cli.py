"""The ``trinity`` command: plugins list/show and config validate, in-process and as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from trinity_core.cli.main import main

if TYPE_CHECKING:
    from plugin_dists import PluginSite

pytest_plugins = ["plugin_dists"]

PLUGIN = '''
from typing import Literal
from pydantic import Field
from trinity_core.components import AlgorithmType, EntropyLossFn, KLFn, PolicyLossFn
from trinity_core.components._aggregation import LossAggArgs


class Preset(AlgorithmType):
    """Test preset naming every component."""

    use_critic = False
    use_reference = False
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls):
        return {"repeat_times": 4, "policy_loss_fn": "tt_loss", "kl_penalty_fn": "tt_kl",
                "kl_loss_fn": "tt_kl", "entropy_loss_fn": "tt_entropy"}


class Loss(PolicyLossFn):
    """A clipped test loss."""

    paper = "arXiv:0000.00000"

    class Args(LossAggArgs):
        clip_range: float = Field(0.2, gt=0, le=1, description="Clip epsilon.")
        mode: Literal["a", "b"] = Field("a", description="A choice.")

    def __call__(self, logprob, **kwargs):
        return logprob.sum(), {}


class KL(KLFn):
    """Zero KL."""

    def calculate_kl(self, logprob, ref_logprob, old_logprob=None):
        return logprob * 0


class Entropy(EntropyLossFn):
    """Zero entropy loss."""

    def __call__(self, entropy, action_mask, **kwargs):
        return entropy.sum() * 0, {}
'''


@pytest.fixture
def installed(site: PluginSite) -> PluginSite:
    mod = site.module("plugin", PLUGIN)
    broken = site.module("broken", "raise ImportError('missing dependency foo')\n")
    site.dist(
        "tt-plugin",
        "0.3.1",
        {
            "trinity_core.algorithms": {"tt_algo": f"{mod}:Preset"},
            "trinity_core.policy_losses": {"tt_loss": f"{mod}:Loss"},
            "trinity_core.kl_fns": {"tt_kl": f"{mod}:KL"},
            "trinity_core.entropy_losses": {"tt_entropy": f"{mod}:Entropy"},
        },
    )
    site.dist("tt-broken", "9.9", {"trinity_core.policy_losses": {"tt_broken": f"{broken}:Loss"}})
    return site


def test_plugins_list_table_shows_components_and_failures(
    installed: PluginSite, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plugins", "list"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "tt_loss" in line)
    assert row.split()[:3] == ["policy_loss", "tt_loss", "tt-plugin"]  # the version is in --wide
    assert "A clipped test loss." in row
    table = out.split("\n\n", 1)[0].splitlines()
    assert max(len(line) for line in table) <= 100
    assert "tt_broken" not in "\n".join(table)  # failed: listed below, not as installed
    assert main(["plugins", "list", "--wide"]) == 0
    wide = next(line for line in capsys.readouterr().out.splitlines() if "tt_loss" in line)
    assert wide.split()[:4] == ["policy_loss", "tt_loss", "tt-plugin", "0.3.1"]
    assert "failed to load:" in out
    assert "'tt_broken'" in out
    assert "tt-broken 9.9: ImportError: missing dependency foo" in out


def test_plugins_list_wide_adds_the_shipped_plugins_not_installed_with_their_install_line(
    installed: PluginSite, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from trinity_core.registry.shipped import SHIPPED

    # One shipped distribution that is not installed here, and one that is (the fake tt-plugin).
    monkeypatch.setitem(SHIPPED["trinity_core.policy_losses"], "tt_absent_loss", "trinity-plugin-tt-absent")
    monkeypatch.setitem(SHIPPED["trinity_core.algorithms"], "tt_absent", "trinity-plugin-tt-absent")
    monkeypatch.setitem(SHIPPED["trinity_core.policy_losses"], "tt_loss", "tt-plugin")
    assert main(["plugins", "list", "--wide"]) == 0
    out = capsys.readouterr().out
    section = out.split("shipped with trinity-core, not installed:\n", 1)[1]
    assert "  trinity-plugin-tt-absent: algorithm tt_absent, policy_loss tt_absent_loss\n" in section
    assert (
        "    install: pip install trinity-plugin-tt-absent (from a wheelhouse: pip install --find-links dist "
        "trinity-plugin-tt-absent; from a checkout: pip install ./plugins/trinity-plugin-tt-absent)"
    ) in section
    assert "tt-plugin" not in section  # installed: listed in the table, not here
    assert main(["plugins", "list", "--wide", "--kind", "algorithm"]) == 0
    assert "trinity-plugin-tt-absent: algorithm tt_absent\n" in capsys.readouterr().out
    assert main(["plugins", "list"]) == 0
    assert (
        "shipped plugin(s) not installed: `trinity plugins list --wide` lists them" in capsys.readouterr().out
    )
    assert main(["plugins", "list", "--json"]) == 0
    missing = {d["distribution"]: d for d in json.loads(capsys.readouterr().out)["not_installed"]}
    assert missing["trinity-plugin-tt-absent"]["provides"] == [
        "algorithm tt_absent",
        "policy_loss tt_absent_loss",
    ]
    assert "tt-plugin" not in missing


def test_plugins_list_strict_exits_1(installed: PluginSite, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "list", "--kind", "policy_loss", "--strict"]) == 1
    assert "strict mode: 1 failed plugin(s)" in capsys.readouterr().err
    assert main(["plugins", "list", "--kind", "kl_fn", "--strict"]) == 0


def test_plugins_list_json_and_conflicts(installed: PluginSite, capsys: pytest.CaptureFixture[str]) -> None:
    mod = installed.mod("plugin")
    installed.dist("tt-fork", "0.4", {"trinity_core.kl_fns": {"tt_kl": f"{mod}:KL"}})
    assert main(["plugins", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    loss = next(c for c in data["components"] if c["name"] == "tt_loss")
    assert loss == {
        "kind": "policy_loss",
        "name": "tt_loss",
        "value": f"{mod}:Loss",
        "distribution": "tt-plugin",
        "version": "0.3.1",
        "summary": "A clipped test loss.",
        "paper": "arXiv:0000.00000",
    }
    failure = next(f for f in data["failures"] if f["entry_point"]["name"] == "tt_broken")
    assert failure["error_type"] == "ImportError"
    conflict = next(c for c in data["conflicts"] if c["name"] == "tt_kl")
    assert {p["distribution"] for p in conflict["providers"]} == {"tt-plugin", "tt-fork"}


def test_plugins_show_prints_the_args_table(
    installed: PluginSite, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plugins", "show", "tt_loss"]) == 0
    out = capsys.readouterr().out
    assert "policy_loss 'tt_loss' from tt-plugin 0.3.1" in out
    clip = next(line for line in out.splitlines() if line.startswith("clip_range"))
    assert clip.split()[:6] == ["clip_range", "float", "0.2", ">", "0,", "<="]
    assert "Clip epsilon." in clip
    mode = next(line for line in out.splitlines() if line.startswith("mode"))
    assert "one of 'a', 'b'" in mode


def test_plugins_show_prints_a_presets_flags_defaults_and_rules(
    site: PluginSite, capsys: pytest.CaptureFixture[str]
) -> None:
    from trinity_core import registry
    from trinity_core.components import AlgorithmPreset
    from trinity_core.components.preset_rules import advantage_placement

    class ShownPreset(AlgorithmPreset):
        """A preset to show."""

        use_reference = False
        defaults = {"repeat_times": 4, "advantage_fn": "grpo", "advantage_fn_args": {"epsilon": 1e-6}}  # noqa: RUF012
        config_rules = (advantage_placement,)

    registry.register("algorithm", f"{site.tag}_preset", ShownPreset)
    assert main(["plugins", "show", f"{site.tag}_preset"]) == 0
    out = capsys.readouterr().out
    assert "(no arguments)" not in out
    lines = [line.strip() for line in out.splitlines()]
    flags = lines[lines.index("flags:") + 1 : lines.index("defaults:")]
    assert flags == [
        "use_critic = False",
        "use_reference = False",
        "compute_advantage_in_trainer = False",
        "can_balance_batch = True",
        "schema = 'experience'",
    ]
    defaults = lines[lines.index("defaults:") + 1 : lines.index("config rules:")]
    assert defaults == ["repeat_times = 4", "advantage_fn = 'grpo'", "advantage_fn_args = {'epsilon': 1e-06}"]
    assert lines[lines.index("config rules:") + 1].startswith("advantage_placement: The advantage function")


def test_plugins_show_unknown_name(installed: PluginSite, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "show", "tt_los", "--kind", "policy_loss"]) == 1
    assert "Did you mean 'tt_loss'?" in capsys.readouterr().err
    assert main(["plugins", "show", "nothing_like_it"]) == 1
    assert "no component named 'nothing_like_it'" in capsys.readouterr().err


def test_config_validate(installed: PluginSite, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "algorithm:\n  algorithm_type: tt_algo\n  policy_loss_fn_args: {mode: b}\n", encoding="utf-8"
    )
    assert main(["config", "validate", str(good), "--json", "--sources"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["algorithm"]["repeat_times"] == 4
    assert data["algorithm"]["policy_loss_fn_args"] == {
        "loss_agg_mode": "token-mean",
        "clip_range": 0.2,
        "mode": "b",
    }
    assert data["sources"]["algorithm.policy_loss_fn_args.mode"] == "config file"
    assert main(["config", "validate", str(good)]) == 0
    assert "policy_loss_fn: tt_loss" in capsys.readouterr().out

    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "algorithm:\n  algorithm_type: tt_algo\n  policy_loss_fn_args: {clip_range: 2, mdoe: a}\n",
        encoding="utf-8",
    )
    assert main(["config", "validate", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "2 problems" in err
    assert "algorithm.policy_loss_fn_args.clip_range" in err
    assert "algorithm.policy_loss_fn_args.mdoe: unknown key; did you mean 'mode'?" in err
    assert "[policy loss 'tt_loss' from tt-plugin 0.3.1]" in err


def test_config_validate_takes_the_file_as_trinity_train_does(
    installed: PluginSite, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`trinity config validate --config x.yaml` validates x.yaml, like the positional form (an outside
    author wrote it as for `trinity train --config` and got a usage error)."""
    good = tmp_path / "good.yaml"
    good.write_text("algorithm:\n  algorithm_type: tt_algo\n  policy_loss_fn_args: {mode: b}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm:\n  algorithm_type: tt_algo\n  policy_loss_fn_args: {mdoe: a}\n")
    outputs = []
    for argv in (["--config", str(good)], [str(good)], [str(good), "--config", str(good)]):
        assert main(["config", "validate", *argv, "--json"]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] == outputs[1] == outputs[2]
    assert outputs[0]["algorithm"]["policy_loss_fn_args"]["mode"] == "b"  # the file was read
    assert main(["config", "validate", "--config", str(bad)]) == 1
    assert "algorithm.policy_loss_fn_args.mdoe: unknown key" in capsys.readouterr().err
    assert main(["config", "validate", str(good), "--config", str(bad)]) == 2
    assert "two config files" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["plugins", "list", "--kind", "nope"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_console_script_subprocess_is_light(installed: PluginSite) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed.root), *sys.path])}
    env.pop("TRINITY_STRICT_PLUGINS", None)
    code = (
        "import sys\n"
        "from trinity_core.cli.main import main\n"
        "rc = main(['plugins', 'list', '--json'])\n"
        "heavy = [m for m in ('datasets', 'transformers', 'accelerate') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stderr
    assert any(c["name"] == "tt_loss" for c in json.loads(proc.stdout)["components"])
