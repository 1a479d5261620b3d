"""``trinity train`` in mode ``train``: SFT and DPO on stored experiences, the presets' config rules.

The data sets are built with the trainer's own tokenizer (the character tokenizer of the copy task):
SFT rows are ``<bos> prompt answer <eos>`` with the answer as response; DPO pairs share the prompt and
prefer the copied answer over a wrong one.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

from trinity_core import registry
from trinity_core.buffer import make_buffer
from trinity_core.cli.main import main
from trinity_core.config import ConfigError, resolve_config
from trinity_core.experience import EID, Experience
from trinity_core.hf import to_hf_datasets
from trinity_core.hooks import HookCallError, get_plugin_manager
from trinity_core.lm.sampling import generate
from trinity_core.testing.crash import Crash, CrashAfter
from trinity_core.train import train
from trinity_core.train.data.stored import StoredExperiences, detect_format, read_experiences
from trinity_core.train.models.policy import build_char_tokenizer, load_policy

TASK: dict[str, Any] = {"name": "copy", "args": {"length": 3, "letters": "abcd"}, "eval_size": 50}
MODEL: dict[str, Any] = {
    "config": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
    }
}


def copy_rows(n: int, seed: int) -> tuple[Any, list[dict[str, str]]]:
    task = registry.create("task", TASK["name"], TASK["args"])
    return build_char_tokenizer(task.alphabet()), task.sample(n, torch.Generator().manual_seed(seed))


def encode(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def sft_experiences(n: int = 256, seed: int = 1) -> list[Experience]:
    tok, rows = copy_rows(n, seed)
    return [
        Experience(
            eid=EID(task=i),
            tokens=[tok.bos_token_id, *encode(tok, r["prompt"]), *encode(tok, r["answer"]), tok.eos_token_id],
            prompt_length=1 + len(r["prompt"]),
        )
        for i, r in enumerate(rows)
    ]


def dpo_pairs(n: int = 4, seed: int = 2) -> list[Experience]:
    tok, rows = copy_rows(n, seed)
    eos = tok.eos_token_id
    return [
        Experience(
            eid=EID(task=i),
            tokens=[tok.bos_token_id, *encode(tok, r["prompt"])],
            chosen=[*encode(tok, r["answer"]), eos],
            rejected=[*encode(tok, r["answer"][::-1] + "a"), eos],
        )
        for i, r in enumerate(rows)
    ]


def write_buffer(path: Path, exps: list[Experience], writes: int = 2) -> Path:
    writer, _ = make_buffer("disk", path)
    step = math.ceil(len(exps) / writes)
    for i in range(0, len(exps), step):
        asyncio.run(writer.write(exps[i : i + step]))
    return path


def offline_config(algorithm: str, data: Path, **trainer: Any) -> dict[str, Any]:
    return {
        "mode": "train",
        "algorithm": {"algorithm_type": algorithm},
        "tasks": TASK,
        "model": MODEL,
        "data": {"experiences": str(data), "batch_size": 32},
        "trainer": {"lr": 3e-3, "checkpoint_every": 0, "progress": False, "threads": 1, **trainer},
    }


def greedy_accuracy(model: Any, tok: Any, rows: list[dict[str, str]]) -> float:
    rollout = generate(
        model, tok, [r["prompt"] for r in rows], repeat=1, max_new_tokens=4, temperature=1.0, greedy=True
    )
    texts = tok.batch_decode(rollout.response_ids.tolist(), skip_special_tokens=True)
    return sum(t == r["answer"] for t, r in zip(texts, rows, strict=True)) / len(rows)


# ------------------------------------------------------------------------------------------ learning


def test_sft_on_a_disk_buffer_learns_to_copy(tmp_path: Path) -> None:
    data = write_buffer(tmp_path / "buffer", sft_experiences())
    config = offline_config("sft", data, total_steps=80)
    task = registry.create("task", "copy", TASK["args"])
    eval_rows = task.eval_rows(TASK["eval_size"], seed=0)
    model, tok = load_policy(None, None, MODEL["config"], task.alphabet(), seed=0)  # the run's initial policy
    before = greedy_accuracy(model, tok, eval_rows)

    result = train(config, run_dir=tmp_path / "run")

    nll = [row["actor/sft_loss"] for row in result.history]
    assert len(nll) == 80
    # From about ln(vocabulary) per token to a small fraction of it.
    assert nll[0] > 1.8
    assert sum(nll[-10:]) / 10 < 0.3, f"NLL curve {result.loss_curve}"
    assert before <= 0.1
    assert result.eval_accuracy is not None
    assert result.eval_accuracy >= 0.8
    assert result.reward_curve == []  # stored experiences without rewards
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["data/epoch"] == pytest.approx(80 / 8)  # 256 items / 32 per step = 8 steps per pass
    assert "reward/mean" not in rows[0]
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["mode"] == "train"
    assert (tmp_path / "run" / "checkpoints" / "step-000080" / "model.safetensors").exists()


@pytest.mark.parametrize("use_pair_ids", [False, True])  # pairs by adjacency, or by pair_id / chosen_mask
def test_dpo_on_a_saved_dataset_lowers_the_dpo_loss(tmp_path: Path, use_pair_ids: bool) -> None:
    to_hf_datasets(dpo_pairs(4)).save_to_disk(str(tmp_path / "pairs"))
    config = offline_config("dpo", tmp_path / "pairs", total_steps=6)
    config["algorithm"]["policy_loss_fn_args"] = {"use_pair_ids": use_pair_ids}
    config["data"]["batch_size"] = 4
    config["tasks"] = {**TASK, "eval_size": 0}

    result = train(config, run_dir=tmp_path / "run")

    loss = [row["actor/dpo_loss"] for row in result.history]
    # Step 1: the policy is the reference, every implicit reward is 0 and the loss is log 2.
    assert loss[0] == pytest.approx(math.log(2), abs=1e-6)
    assert result.history[0]["actor/chosen_reward"] == pytest.approx(0.0, abs=1e-6)
    assert loss[-1] < loss[0] - 0.05, loss
    assert result.history[-1]["actor/accuracy_mean"] == 1.0
    assert all(row["actor/malformed_pairs"] == 0 for row in result.history)
    assert "actor/kl_loss" in result.history[-1]  # the preset's k2 KL loss against the same reference


def test_both_formats_read_the_same_experiences_and_train_alike(tmp_path: Path) -> None:
    exps = sft_experiences(64)
    write_buffer(tmp_path / "buffer", exps, writes=3)
    to_hf_datasets(exps).save_to_disk(str(tmp_path / "dataset"))
    assert detect_format(tmp_path / "buffer") == "buffer"
    assert detect_format(tmp_path / "dataset") == "dataset"
    for path in (tmp_path / "buffer", tmp_path / "dataset"):
        back = read_experiences(path)
        assert [e.tokens.tolist() for e in back] == [e.tokens.tolist() for e in exps]
        assert [e.prompt_length for e in back] == [e.prompt_length for e in exps]
    runs = []
    for name in ("buffer", "dataset"):
        config = offline_config("sft", tmp_path / name, total_steps=100)
        config["data"]["epochs"] = 1  # 64 items / 32 per step: one pass is 2 steps, before total_steps
        runs.append(train(config, run_dir=tmp_path / f"run-{name}"))
    assert runs[0].steps == len(runs[0].history) == 2
    assert [r["actor/loss"] for r in runs[0].history] == [r["actor/loss"] for r in runs[1].history]


def test_killed_and_resumed_offline_run_matches_uninterrupted_run(tmp_path: Path) -> None:
    data = write_buffer(tmp_path / "buffer", sft_experiences(48))
    config = offline_config("sft", data, total_steps=6, checkpoint_every=2, lr_scheduler="cosine")
    config["data"]["batch_size"] = 16  # 3 steps per pass: the resumed run crosses into a new shuffle
    train(config, run_dir=tmp_path / "straight")
    pm = get_plugin_manager()
    pm.register(CrashAfter(3), name="offline-crash-after-3")
    try:
        with pytest.raises(HookCallError, match="offline-crash-after-3") as failure:
            train(config, run_dir=tmp_path / "killed")
        assert isinstance(failure.value.__cause__, Crash)
    finally:
        pm.unregister(name="offline-crash-after-3")
    train(resume=tmp_path / "killed")
    a, b = (
        load_file(str(tmp_path / r / "checkpoints/step-000006/model.safetensors"))
        for r in ("straight", "killed")
    )
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=0, msg=name)
    steps = [
        json.loads(line)["step"] for line in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


# ------------------------------------------------------------------------------------------ batching


@settings(max_examples=30, deadline=None)
@given(
    extra=st.integers(0, 20),
    per_rank=st.integers(1, 4),
    world=st.sampled_from([1, 2]),
    paired=st.booleans(),
    step=st.integers(0, 20),
)
def test_every_pass_reads_each_item_once_and_pairs_stay_adjacent(
    extra: int, per_rank: int, world: int, paired: bool, step: int
) -> None:
    batch = per_rank * world
    items = batch + extra
    exps = [
        Experience(eid=EID(task=i), tokens=[1, i + 3], chosen=[4], rejected=[5])
        if paired
        else Experience(eid=EID(task=i), tokens=[1, i + 3, 2], prompt_length=2)
        for i in range(items)
    ]
    data = StoredExperiences(exps, batch_size=batch, world_size=world, seed=0, shuffle=True)
    spe = data.steps_per_epoch
    assert spe == items // batch
    epoch = step // spe
    seen: list[int] = []
    for s in range(epoch * spe, (epoch + 1) * spe):
        for rank in range(world):
            rows = data.step_rows(s, rank)
            assert len(rows) == data.rows_per_item * batch // world
            if paired:  # (chosen, rejected) of the same prompt, chosen first
                assert [r.tokens[-1].item() for r in rows[0::2]] == [4] * (len(rows) // 2)
                assert [r.tokens[-1].item() for r in rows[1::2]] == [5] * (len(rows) // 2)
                assert [r.tokens[1].item() for r in rows[0::2]] == [r.tokens[1].item() for r in rows[1::2]]
            seen += [r.tokens[1].item() - 3 for r in rows[:: data.rows_per_item]]
    assert len(seen) == len(set(seen)) == spe * batch  # no item twice within a pass
    assert data.step_rows(step, 0) == data.step_rows(step, 0)  # the order depends on the step only


# ------------------------------------------------------------------------------------ config rules


@pytest.mark.parametrize("preset", ["sft", "cpt", "dpo"])
def test_offline_presets_need_mode_train_and_experiences(preset: str, tmp_path: Path) -> None:
    algorithm = {"algorithm_type": preset}
    with pytest.raises(
        ConfigError, match=r"does not support mode 'both'.*`mode: train`.*`data\.experiences`"
    ):
        resolve_config({"algorithm": algorithm})
    with pytest.raises(ConfigError, match=r"`data\.experiences`, which is not set"):
        resolve_config({"mode": "train", "algorithm": algorithm})
    resolved = resolve_config(
        {"mode": "train", "algorithm": algorithm, "data": {"experiences": str(tmp_path)}}
    )
    assert resolved.mode == "train"


def test_dpo_forces_pairs_and_a_kl_loss() -> None:
    base = {"mode": "train", "data": {"experiences": "pairs"}}
    with pytest.raises(ConfigError, match="repeat_times = 2"):
        resolve_config({**base, "algorithm": {"algorithm_type": "dpo", "repeat_times": 4}})
    resolved = resolve_config({**base, "algorithm": {"algorithm_type": "dpo", "kl_loss_fn": "none"}})
    assert (resolved.algorithm.kl_loss_fn, resolved.algorithm.repeat_times) == ("k2", 2)


def run_cli(tmp_path: Path, config: dict[str, Any], *overrides: str) -> tuple[int, Path]:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    run = tmp_path / "run"
    args = ["train", "--config", str(path), "--run-dir", str(run)]
    for item in overrides:
        args += ["--set", item]
    return main(args), run


@pytest.fixture(scope="module")
def sft_buffer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_buffer(tmp_path_factory.mktemp("data") / "sft", sft_experiences(32))


@pytest.fixture(scope="module")
def dpo_buffer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_buffer(tmp_path_factory.mktemp("data") / "dpo", dpo_pairs(4), writes=1)


@pytest.mark.parametrize(
    ("algorithm", "data", "overrides", "message"),
    [
        ("sft", "sft", ["mode=both"], r"does not support mode 'both'; set `mode: train`"),
        ("cpt", "sft", ["mode=both"], r"does not support mode 'both'"),
        ("dpo", "dpo", ["mode=both"], r"does not support mode 'both'"),
        ("sft", "sft", ["data.experiences=null"], r"`data\.experiences`, which is not set"),
        ("dpo", "dpo", ["data.experiences=null"], r"`data\.experiences`, which is not set"),
        ("dpo", "dpo", ["algorithm.repeat_times=4"], "repeat_times = 2"),
        ("grpo", "sft", ["data.experiences=null"], r"data\.experiences: mode 'train' trains on stored"),
        ("sft", "sft", ["data.experiences=/no/such/dir"], r"data\.experiences: /no/such/dir does not exist"),
        ("sft", "sft", ["data.batch_size=64"], r"data\.batch_size: 64 items per step.*only 32 experiences"),
        ("sft", "sft", ["trainer.epochs=2"], r"trainer\.epochs: mode 'train' makes one optimizer update"),
        ("sft", "sft", ["algorithm.kl_penalty_fn=k2"], r"kl_penalty_fn: mode 'train' computes no advantages"),
        ("sft", "sft", ["algorithm.policy_loss_fn=ppo"], r"needs \['advantages'\].*store advantages"),
        ("sft", "dpo", [], r"holds DPO pairs, but algorithm 'sft'"),
        ("dpo", "sft", [], r"trains on DPO pairs, but the experiences are not pairs"),
        ("dpo", "dpo", ["trainer.micro_batch_size=3"], r"micro_batch_size: 3 rows would cut a DPO pair"),
        ("sft", "sft", ["model.config.vocab_size=5"], r"token id \d+ is outside the model's vocabulary of 5"),
    ],
)
def test_trinity_train_rejects_bad_offline_configs_before_training(
    tmp_path: Path,
    sft_buffer: Path,
    dpo_buffer: Path,
    capsys: pytest.CaptureFixture[str],
    algorithm: str,
    data: str,
    overrides: list[str],
    message: str,
) -> None:
    path = dpo_buffer if data == "dpo" else sft_buffer
    config = offline_config(algorithm, path, total_steps=1)
    config["data"]["batch_size"] = 2
    status, run = run_cli(tmp_path, config, *overrides)
    err = capsys.readouterr().err
    assert status == 1, err
    assert re.search(message, " ".join(err.split())), err
    assert not run.exists()  # nothing written: the error came before training


def test_raft_rules_in_both_modes(tmp_path: Path) -> None:
    from trinity_core.components import TrainerAdvantage

    class TrainerSide(TrainerAdvantage):
        """A trainer-side advantage function (test double)."""

        def compute(self, batch: Any) -> Any:
            raise NotImplementedError

    registry.register("advantage_fn", "offline_test_trainer_side", TrainerSide)
    try:
        algorithm = {"algorithm_type": "raft", "advantage_fn": "offline_test_trainer_side"}
        with pytest.raises(ConfigError, match=r"mode 'both' runs the experience pipeline"):
            resolve_config({"algorithm": algorithm})
        with pytest.raises(ConfigError, match=r"runs in the trainer, but preset 'raft'"):
            resolve_config({"mode": "train", "algorithm": algorithm, "data": {"experiences": str(tmp_path)}})
        with pytest.raises(ConfigError, match=r"mode 'both' runs the experience pipeline"):
            train({"algorithm": algorithm, "model": MODEL}, run_dir=tmp_path / "run")
        assert not (tmp_path / "run").exists()
    finally:
        registry.unregister("advantage_fn", "offline_test_trainer_side")
    assert (
        resolve_config({"mode": "train", "algorithm": {"algorithm_type": "raft"}}).algorithm.advantage_fn
        is None
    )
