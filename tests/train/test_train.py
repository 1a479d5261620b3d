"""``trinity train`` building blocks: tasks, rewards, overrides, config checks, run directory, checkpoints.

Fast tests (no training beyond a couple of steps of a tiny model).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rollout_support import TINY_MODEL

from trinity_core import registry
from trinity_core.config import ConfigError, resolve_config
from trinity_core.lm.sampling import generate
from trinity_core.registry import create
from trinity_core.train import DEFAULT_CONFIG, apply_overrides, exact_match, train
from trinity_core.train.checkpoints import commit as ckpt
from trinity_core.train.data.rewards import combine_rewards, required_fields
from trinity_core.train.models.policy import ModelLoadError, build_char_tokenizer, tiny_model
from trinity_core.train.report.result import LaunchError
from trinity_core.train.run import RunDirError, check_launch

TINY = {
    "trainer": {"total_steps": 2, "checkpoint_every": 1, "progress": False, "threads": 1},
    "rollout": {"prompts_per_step": 2},
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none"},
    "tasks": {"eval_size": 4},
    "model": TINY_MODEL,
}


# ---------------------------------------------------------------------------------------------- tasks


@pytest.mark.parametrize(
    ("name", "args", "check"),
    [
        ("last_digit", {}, lambda r: str(sum(map(int, r["prompt"][:-1].split("+"))) % 10) == r["answer"]),
        ("addmod", {"modulus": 5}, lambda r: r["prompt"].endswith("%5=") and int(r["answer"]) < 5),
        ("copy", {"length": 4}, lambda r: r["prompt"] == r["answer"] + "="),
        ("reverse", {}, lambda r: r["prompt"][:-1][::-1] == r["answer"]),
    ],
)
def test_builtin_tasks_produce_consistent_rows(name: str, args: dict[str, Any], check: Any) -> None:
    task = registry.create("task", name, args)
    rows = task.sample(50, torch.Generator().manual_seed(0))
    assert len(rows) == 50
    assert all(check(r) for r in rows)
    assert all(set(task.fields) <= set(r) for r in rows)
    assert all(c in task.alphabet() for r in rows for c in r["prompt"] + r["answer"])
    assert max(len(r["answer"]) for r in rows) + 1 <= task.max_response_tokens()
    # Same generator seed, same rows; eval rows come from a different stream.
    assert task.sample(50, torch.Generator().manual_seed(0)) == rows
    assert task.eval_rows(50, seed=0) != rows


def test_dataset_task_reads_save_to_disk_and_reports_missing_fields(tmp_path: Path) -> None:
    import datasets

    datasets.Dataset.from_dict({"question": ["ab=", "ba="], "answer": ["ab", "ba"]}).save_to_disk(
        tmp_path / "d"
    )
    task = registry.create("task", "dataset", {"path": str(tmp_path / "d"), "prompt_key": "question"})
    assert task.fields == ("prompt", "question", "answer", "prompt_messages")
    assert task.sample(3, torch.Generator().manual_seed(1))[0]["prompt"] in {"ab=", "ba="}
    with pytest.raises(ValueError, match="no column 'text'"):
        registry.create("task", "dataset", {"path": str(tmp_path / "d"), "prompt_key": "text"})
    with pytest.raises(ValueError, match="does not exist"):
        registry.create("task", "dataset", {"path": str(tmp_path / "missing")})
    # A reward function that needs a field the dataset lacks fails before training.
    datasets.Dataset.from_dict({"prompt": ["a="]}).save_to_disk(tmp_path / "noanswer")
    config = {**TINY, "tasks": {"name": "dataset", "args": {"path": str(tmp_path / "noanswer")}}}
    with pytest.raises(ConfigError, match=r"reward function 'exact_match' needs field\(s\) \['answer'\]"):
        train(config, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing written


# ---------------------------------------------------------------------------------------------- rewards


def test_exact_match_requires_answer_and_eos() -> None:
    assert required_fields(exact_match) == ["answer"]
    got = exact_match(["1+1="] * 3, ["2", "2", "3"], ["2", "2", "2"], truncated=[False, True, False])
    assert got == [1.0, 0.0, 0.0]


@settings(max_examples=30, deadline=None)
@given(
    a=st.lists(st.one_of(st.none(), st.floats(-5, 5)), min_size=1, max_size=6),
    w=st.floats(-2, 2),
)
def test_combine_rewards_sums_applicable_values_and_keeps_none(a: list[float | None], w: float) -> None:
    b = [None if x is None else 1.0 for x in a]
    got = combine_rewards(
        [lambda **k: a, lambda **k: b], [1.0, w], ["a", "b"], [""] * len(a), [""] * len(a), {}
    )
    for x, y in zip(a, got, strict=True):
        assert (y is None) if x is None else y == pytest.approx(x + w)


def test_combine_rewards_rejects_nan_and_wrong_length() -> None:
    with pytest.raises(ValueError, match="returned nan"):
        combine_rewards([lambda **k: [float("nan")]], [1.0], ["bad"], ["p"], ["c"], {})
    with pytest.raises(ValueError, match="returned 2 values for 1"):
        combine_rewards([lambda **k: [1.0, 2.0]], [1.0], ["bad"], ["p"], ["c"], {})


# ---------------------------------------------------------------------------------------------- model


def test_char_tokenizer_round_trips_and_tiny_default_has_332k_parameters() -> None:
    tok = build_char_tokenizer("0123456789+=")
    ids = tok.encode("7+8=", add_special_tokens=False)
    assert len(ids) == 4
    assert tok.decode(ids) == "7+8="
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    model = tiny_model(21)
    assert 325_000 < sum(p.numel() for p in model.parameters()) < 340_000


def test_generate_cuts_responses_at_eos() -> None:
    tok = build_char_tokenizer("ab=")
    model = tiny_model(
        len(tok),
        {
            "hidden_size": 16,
            "intermediate_size": 16,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "num_hidden_layers": 1,
        },
    )
    torch.manual_seed(0)
    out = generate(model, tok, ["ab=", "b="], repeat=3, max_new_tokens=5, temperature=1.0)
    assert out.response_ids.shape == (6, 5)
    assert out.prompt_ids.shape == (6, 4)  # <bos> + 3 chars, the shorter prompt left-padded
    for row, n, cut in zip(out.response_ids, out.response_lengths, out.truncated, strict=True):
        eos = (row == tok.eos_token_id).nonzero()
        assert bool(cut) == (len(eos) == 0)
        if not cut:
            assert int(eos[0]) == int(n) - 1
        assert (row[int(n) :] == tok.pad_token_id).all()


# ---------------------------------------------------------------------------------------------- config


def test_set_overrides_parse_yaml_values_and_create_sections() -> None:
    out = apply_overrides(
        DEFAULT_CONFIG,
        [
            "trainer.lr=1e-4",
            "algorithm.policy_loss_fn_args.clip_range=0.3",
            "tasks.reward_fns=[exact_match]",
            "model.model_path=null",
        ],
    )
    assert out["trainer"]["lr"] == 1e-4
    assert out["algorithm"]["policy_loss_fn_args"] == {"clip_range": 0.3}
    assert out["tasks"]["reward_fns"] == ["exact_match"]
    assert DEFAULT_CONFIG["trainer"]["lr"] == 3e-4  # not mutated
    with pytest.raises(ConfigError, match=r"not key\.path=value"):
        apply_overrides({}, ["trainer.lr"])
    with pytest.raises(ConfigError, match="is a value, not a section"):
        apply_overrides({"trainer": {"lr": 1}}, ["trainer.lr.x=2"])


def test_embedded_default_resolves_to_the_documented_run() -> None:
    cfg = resolve_config(DEFAULT_CONFIG)
    alg = cfg.algorithm
    assert (alg.algorithm_type, alg.repeat_times, alg.advantage_fn, alg.policy_loss_fn) == (
        "grpo",
        16,
        "grpo",
        "ppo",
    )
    assert alg.kl_loss_fn == "none"
    assert alg.policy_loss_fn_args["loss_agg_mode"] == "token-mean"
    loss = create("policy_loss", alg.policy_loss_fn, alg.policy_loss_fn_args)
    assert (loss.clip_range_low, loss.clip_range_high) == (0.2, 0.2)  # the grpo preset's ppo default
    assert (cfg.rollout.prompts_per_step, cfg.trainer.lr, cfg.trainer.total_steps) == (16, 3e-4, 800)
    assert cfg.trainer.grad_clip == 1.0
    assert cfg.tasks.name == "last_digit"


def test_switching_the_task_of_the_default_takes_the_tasks_reward_functions() -> None:
    """The default names no reward function: last_digit brings exact_match, and an environment scored by
    its workflow (no ``answer`` field) resolves with no reward function instead of being refused."""
    from trinity_core.train.data.rewards import build_rewards
    from trinity_core.train.data.tasks import build_task

    cfg = resolve_config(DEFAULT_CONFIG)
    assert build_rewards(cfg, build_task(cfg))[0] == ["exact_match"]
    pytest.importorskip("trinity_plugin_gym")
    lake = resolve_config(
        None, overrides=["tasks.name=frozen_lake", "rollout.workflow=gym"], embedded=DEFAULT_CONFIG
    )
    assert build_rewards(lake, build_task(lake))[0] == []


def test_switching_the_preset_of_the_default_takes_the_new_presets_components() -> None:
    def switched(name: str) -> Any:
        return resolve_config(None, overrides=[f"algorithm.algorithm_type={name}"], embedded=DEFAULT_CONFIG)

    cfg = switched("dapo")
    assert (cfg.algorithm.policy_loss_fn, cfg.algorithm.advantage_fn) == ("ppo", "grpo")
    cfg = switched("ppo")
    assert cfg.algorithm.advantage_fn == "ppo"  # the ppo preset's GAE, not the default's grpo
    # The preset's own repeat_times and k2 KL loss win over the embedded default's 16 and none.
    assert (cfg.algorithm.repeat_times, cfg.algorithm.kl_loss_fn) == (1, "k2")
    assert cfg.sources["algorithm.kl_loss_fn"] == "preset 'ppo'"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algorithm.algorithm_type=nope", "nope"),
        ("algorithm.policy_loss_fn=nope", "nope"),
        ("algorithm.policy_loss_fn_args.clip_range=-1", "clip_range"),
        ("tasks.name=nope", "nope"),
        ("tasks.args.digits=0", "digits"),
        ("tasks.reward_fns=[nope]", "nope"),
        ("trainer.optimizer=lion", "optimizer"),
        ("rollout.prompts_per_step=0", "prompts_per_step"),
    ],
)
def test_bad_input_fails_before_training(tmp_path: Path, override: str, message: str) -> None:
    with pytest.raises((ConfigError, registry.PluginError), match=message):
        train(TINY, overrides=[override], run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing written


def test_unloadable_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="cannot load"):
        train(TINY, overrides=[f"model.model_path={tmp_path / 'no-such-model'}"], run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_launch_check_catches_a_process_that_trains_alone() -> None:
    check_launch(1, {})
    check_launch(2, {"WORLD_SIZE": "2"})
    with pytest.raises(LaunchError, match=r"WORLD_SIZE=2.*sees 1"):
        check_launch(1, {"WORLD_SIZE": "2"})


# ---------------------------------------------------------------------------------------------- run dir


def test_tiny_run_writes_run_directory_and_refuses_to_clobber_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = train(TINY, run_dir=run)
    assert (run / "config.yaml").exists()
    assert (run / "summary.json").exists()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1.0, 2.0]
    assert {"reward/mean", "actor/loss", "actor/pg_loss", "actor/grad_norm", "lr"} <= set(rows[0])
    assert any(k.startswith("advantage/") for k in rows[0])
    assert (run / "plot.png").stat().st_size > 1000
    assert ckpt.latest_checkpoint(run) == run / "checkpoints" / "step-000002"
    assert [p.name for p in sorted((run / "checkpoints").iterdir())] == [
        "latest",
        "step-000001",
        "step-000002",
    ]
    assert result.eval_accuracy is not None
    assert 0.0 <= result.eval_accuracy <= 1.0
    with pytest.raises(RunDirError, match="already holds a run"):
        train(TINY, run_dir=run)
    train(TINY, run_dir=run, overwrite=True)  # explicit replacement works
    with pytest.raises(RunDirError, match=r"no config\.yaml"):
        train(resume=tmp_path / "elsewhere")


def test_checkpoint_commit_is_atomic_and_partial_writes_are_ignored(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    tmp = ckpt.begin(root, 1)
    (tmp / "state.json").write_text("{}")
    ckpt.commit(root, tmp, 1, keep=2)
    # A kill while writing step 2: the temporary directory exists, `latest` still names step 1.
    partial = ckpt.begin(root, 2)
    (partial / "model.safetensors").write_bytes(b"\x00" * 10)
    assert ckpt.latest_checkpoint(tmp_path) == root / "step-000001"
    # Without the pointer, the highest *complete* checkpoint wins.
    (root / "latest").unlink()
    assert ckpt.latest_checkpoint(tmp_path) == root / "step-000001"
    for step in (2, 3, 4):
        t = ckpt.begin(root, step)
        (t / "state.json").write_text("{}")
        ckpt.commit(root, t, step, keep=2)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-000003", "step-000004"]


def test_optimizer_state_round_trips_through_safetensors_layout() -> None:
    p = torch.nn.Parameter(torch.randn(3))
    opt = torch.optim.AdamW([p], lr=0.1, betas=(0.8, 0.9))
    p.grad = torch.randn(3)
    opt.step()
    tensors, structure = ckpt.optimizer_state_tensors(opt.state_dict())
    back = ckpt.load_optimizer_state(tensors, json.loads(json.dumps(structure)))
    fresh = torch.optim.AdamW([torch.nn.Parameter(p.detach().clone())], lr=0.1)
    fresh.load_state_dict(back)
    assert torch.equal(fresh.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    assert fresh.param_groups[0]["betas"] == (0.8, 0.9)
