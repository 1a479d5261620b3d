"""The ``dataset`` task on files a user has on disk: jsonl, parquet, folders, save_to_disk, bad rows.

Each test writes its data with the libraries a user would use (``json``, ``pyarrow.parquet``,
``datasets``) and reads it through the real loading code (``datasets.load_dataset``).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rollout_support import TINY_MODEL

from trinity_core import registry
from trinity_core.cli.main import main
from trinity_core.train.data.dataset_task import DatasetTask, TaskDataError

ROWS = [{"question": f"What is {i} plus {i}?", "answer": f"#### {2 * i}", "level": i % 3} for i in range(10)]


@pytest.fixture(autouse=True)
def _datasets_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_dataset`` converts files into an Arrow cache: keep it inside the test's folder."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def task(path: Path, **args: Any) -> DatasetTask:
    return registry.create("task", "dataset", {"path": str(path), **args})  # type: ignore[no-any-return]


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet], ids=["jsonl", "parquet"])
def test_rows_keep_every_column_and_render_the_template(tmp_path: Path, writer: Any) -> None:
    suffix = ".jsonl" if writer is write_jsonl else ".parquet"
    path = writer(tmp_path / f"gsm{suffix}", ROWS)
    t = task(path, prompt_template="{question}\nPut the final answer after ####.", system_prompt="Be brief.")
    assert t.fields == ("prompt", "question", "answer", "level", "prompt_messages")
    rows = t.sample(4, torch.Generator().manual_seed(0))
    for row in rows:
        source = next(r for r in ROWS if r["question"] == row["question"])
        assert row["answer"] == source["answer"]
        assert row["level"] == source["level"]
        user = f"{source['question']}\nPut the final answer after ####."
        assert row["prompt"] == f"Be brief.\n{user}"
        assert row["prompt_messages"] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": user},
        ]
    assert t.max_response_tokens() == max(len(r["answer"]) for r in ROWS) + 1
    assert set("Put the final answer") <= set(t.alphabet())


def test_prompt_key_answer_key_and_a_folder_of_files(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    rows = [{"q": f"{i}=", "solution": str(i)} for i in range(6)]
    write_jsonl(folder / "part-0.jsonl", rows[:3])
    write_jsonl(folder / "part-1.jsonl", rows[3:])
    t = task(folder, prompt_key="q", answer_key="solution")
    got = t.sample(6, torch.Generator().manual_seed(0))
    assert sorted((r["prompt"], r["answer"]) for r in got) == [(f"{i}=", str(i)) for i in range(6)]
    assert all(r["solution"] == r["answer"] for r in got)


def test_messages_key_uses_the_conversation(tmp_path: Path) -> None:
    rows = [
        {"messages": [{"role": "user", "content": "say 0"}], "answer": "0"},
        {
            "messages": [{"role": "system", "content": "Own."}, {"role": "user", "content": "hi"}],
            "answer": "",
        },
    ]
    t = task(write_jsonl(tmp_path / "chat.jsonl", rows), messages_key="messages", system_prompt="Sys.")
    first, second = t.eval_rows(2, seed=0)
    assert first["prompt_messages"] == [
        {"role": "system", "content": "Sys."},
        {"role": "user", "content": "say 0"},
    ]
    assert first["prompt"] == "Sys.\nsay 0"
    assert second["prompt_messages"][0] == {"role": "system", "content": "Own."}  # kept, not doubled


def test_save_to_disk_dict_with_an_eval_split(tmp_path: Path) -> None:
    import datasets

    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(ROWS[:8]),
            "test": datasets.Dataset.from_list(ROWS[8:]),
        }
    ).save_to_disk(tmp_path / "d")
    t = task(tmp_path / "d", prompt_key="question", eval_split="test")
    assert [r["question"] for r in t.eval_rows(5, seed=0)] == [r["question"] for r in ROWS[8:]]
    with pytest.raises(
        TaskDataError, match=r"tasks.args.split: .* has no split 'dev'; splits: \['test', 'train'\]"
    ):
        task(tmp_path / "d", prompt_key="question", split="dev")


def test_without_an_eval_split_the_last_rows_are_held_out(tmp_path: Path) -> None:
    t = task(write_jsonl(tmp_path / "d.jsonl", ROWS), prompt_key="question")
    assert [r["question"] for r in t.eval_rows(3, seed=0)] == [r["question"] for r in ROWS[-3:]]
    assert len(t.eval_rows(100, seed=0)) == len(ROWS)


@settings(max_examples=6, deadline=None)
@given(size=st.integers(1, 12), n=st.integers(1, 7), steps=st.integers(1, 8), seed=st.integers(0, 2**31))
def test_each_epoch_reads_every_row_once_and_resume_continues_the_order(
    tmp_path_factory: pytest.TempPathFactory, size: int, n: int, steps: int, seed: int
) -> None:
    path = write_jsonl(tmp_path_factory.mktemp("d") / "d.jsonl", [{"prompt": f"p{i}"} for i in range(size)])
    t = task(path)
    gen = torch.Generator().manual_seed(seed)
    drawn = [r["prompt"] for _ in range(steps) for r in t.sample(n, gen)]
    for epoch in range(len(drawn) // size):
        assert Counter(drawn[epoch * size : (epoch + 1) * size]) == Counter(f"p{i}" for i in range(size))
    # A fresh task given the state continues exactly as the original does.
    state = json.loads(json.dumps(t.state_dict()))
    resumed = task(path)
    resumed.load_state_dict(state)
    assert resumed.sample(n, torch.Generator()) == t.sample(n, gen)


def test_shuffling_is_seeded_and_can_be_turned_off(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": f"p{i}"} for i in range(20)])
    a = [r["prompt"] for r in task(path).sample(20, torch.Generator().manual_seed(1))]
    b = [r["prompt"] for r in task(path).sample(20, torch.Generator().manual_seed(1))]
    c = [r["prompt"] for r in task(path).sample(20, torch.Generator().manual_seed(2))]
    assert a == b != c
    plain = task(path, shuffle=False).sample(25, torch.Generator())
    assert [r["prompt"] for r in plain] == [f"p{i}" for i in range(20)] + [f"p{i}" for i in range(5)]


def test_resuming_on_changed_data_is_refused(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": f"p{i}"} for i in range(5)])
    state = task(path).state_dict()
    write_jsonl(path, [{"prompt": f"p{i}"} for i in range(6)])
    with pytest.raises(TaskDataError, match="had 5 rows, it now has 6; resume with the same data"):
        task(path).load_state_dict(state)


@pytest.mark.parametrize(
    ("rows", "args", "message"),
    [
        (
            [{"question": "a"}],
            {},
            r"tasks.args.prompt_key: dataset '.*' split 'train' has no column 'prompt'; "
            r"columns: \['question'\]",
        ),
        (
            [{"prompt": "a"}],
            {"answer_key": "solution"},
            r"tasks.args.answer_key: .* has no column 'solution'",
        ),
        (
            [{"prompt": "a"}],
            {"prompt_template": "{question}?"},
            r"tasks.args.prompt_template: .* has no column 'question'",
        ),
        (
            [{"prompt": "a", "q": "x"}, {"prompt": "b", "q": None}],
            {"prompt_template": "{q}?"},
            r"tasks.args.prompt_template: row 1 of .* has q = None; fix or drop the row",
        ),
        (
            [{"prompt": "a"}, {"prompt": None}],
            {},
            r"tasks.args.prompt_key: row 1 of .* has prompt = None \(NoneType\); every prompt must be a "
            r"non-empty string",
        ),
        ([{"prompt": "a"}, {"prompt": ""}], {}, r"row 1 of .* has prompt = '' \(str\)"),
        ([{"prompt": 3}], {}, r"row 0 of .* has prompt = 3 \(int\)"),
        (
            [{"m": [{"role": "user", "content": "a"}]}, {"m": []}],
            {"messages_key": "m"},
            r"tasks.args.messages_key: row 1 of .* has m = \[\]; every row must hold a non-empty list",
        ),
        ([{"prompt": "a", "truncated": True}], {}, r"has column\(s\) \['truncated'\], names the trainer"),
        (
            [{"prompt": "a", "m": [{"role": "user", "content": "a"}]}],
            {"messages_key": "m", "prompt_template": "{prompt}"},
            r"tasks.args.prompt_template: .* set one of them",
        ),
    ],
    ids=[
        "no-prompt-column",
        "no-answer-column",
        "template-column",
        "template-none",
        "none",
        "empty",
        "int",
        "messages",
        "reserved",
        "template-and-messages",
    ],
)
def test_bad_rows_and_columns_are_named(
    tmp_path: Path, rows: list[dict[str, Any]], args: dict[str, Any], message: str
) -> None:
    with pytest.raises(TaskDataError, match=message):
        task(write_jsonl(tmp_path / "d.jsonl", rows), **args)


def test_bad_paths_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(TaskDataError, match=r"tasks.args.path: the dataset task needs path="):
        registry.create("task", "dataset", {})
    with pytest.raises(TaskDataError, match=r"tasks.args.path: '.*missing.jsonl' does not exist"):
        task(tmp_path / "missing.jsonl")
    (tmp_path / "d.txt").write_text("x")
    with pytest.raises(TaskDataError, match=r"unknown file type '.txt'"):
        task(tmp_path / "d.txt")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(TaskDataError, match=r"tasks.args.path: dataset '.*empty.jsonl' is empty"):
        task(tmp_path / "empty.jsonl")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"prompt": pa.array([], pa.string())}), tmp_path / "empty.parquet")
    with pytest.raises(
        TaskDataError, match=r"tasks.args.path: dataset '.*empty.parquet' is empty; give it at least one row"
    ):
        task(tmp_path / "empty.parquet")
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    with pytest.raises(TaskDataError, match=r"tasks.args.path: cannot load '.*broken.jsonl' \("):
        task(tmp_path / "broken.jsonl")
    with pytest.raises(TaskDataError, match=r"tasks.args.split: .* has no split 'test'"):
        task(write_jsonl(tmp_path / "d.jsonl", ROWS), prompt_key="question", split="test")


def test_trinity_train_on_a_jsonl_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    rows = [{"question": f"{a}+{b}", "answer": str((a + b) % 10)} for a in range(5) for b in range(5)]
    data = write_parquet(tmp_path / "sums.parquet", rows)
    config = {
        "trainer": {"total_steps": 2, "checkpoint_every": 1, "progress": False, "threads": 1},
        "rollout": {"prompts_per_step": 2},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "kl_loss_fn": "none"},
        "tasks": {
            "name": "dataset",
            "eval_size": 3,
            "args": {"path": str(data), "prompt_template": "{question}="},
        },
        "model": TINY_MODEL,
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    assert main(["train", "--config", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "run")]) == 0
    assert "trained 2 steps" in capsys.readouterr().out
    # A bad row is one line and exit 1, before anything is written.
    write_jsonl(
        tmp_path / "bad.jsonl", [{"question": "1+1", "answer": "2"}, {"question": None, "answer": "3"}]
    )
    code = main(
        ["train", "--config", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "run2"),
         "--set", f"tasks.args.path={tmp_path / 'bad.jsonl'}"]
    )  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert err == (
        f"trinity: error: tasks: tasks.args.prompt_template: row 1 of dataset '{tmp_path / 'bad.jsonl'}' "
        "split 'train' has question = None; fix or drop the row"
    )
    assert not (tmp_path / "run2").exists()


def test_a_hub_id_missing_from_the_cache_is_one_line_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets
    import huggingface_hub

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(
        TaskDataError, match=r"tasks.args.path: cannot load 'someone/not-cached' \(.*\); give a"
    ):
        registry.create("task", "dataset", {"path": "someone/not-cached"})


def test_resume_continues_the_dataset_order_and_the_run_ends_with_a_loadable_model(tmp_path: Path) -> None:
    """A dataset run resumed from its checkpoint sees the prompts and ends with the weights of a run
    that never stopped; each run leaves ``model/`` that ``from_pretrained`` loads."""
    from transformers import AutoModelForCausalLM

    from trinity_core.train import train

    seen: list[list[str]] = []

    def recording_reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        seen.append(list(prompts))
        return [len(c) / 8 for c in completions]  # varies between responses: every step updates

    registry.register("reward_fn", "recording_reward", recording_reward, replace=True)
    rows = [{"question": f"{a}+{b}", "answer": str((a + b) % 10)} for a in range(4) for b in range(4)]
    data = write_jsonl(tmp_path / "sums.jsonl", rows)
    config = {
        "trainer": {"total_steps": 4, "checkpoint_every": 1, "progress": False, "threads": 1},
        "rollout": {"prompts_per_step": 3},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "kl_loss_fn": "none"},
        "tasks": {
            "name": "dataset",
            "eval_size": 0,
            "reward_fns": ["recording_reward"],
            "args": {"path": str(data), "prompt_template": "{question}="},
        },
        "model": TINY_MODEL,
    }
    train(config, run_dir=tmp_path / "straight")
    straight = seen[:]
    seen.clear()
    train(config, overrides=["trainer.total_steps=2"], run_dir=tmp_path / "resumed")
    train(None, resume=tmp_path / "resumed", overrides=["trainer.total_steps=4"])
    assert seen[2:] == straight[2:]  # the prompts of steps 3 and 4, in order (16 rows: epoch wraps)
    assert (tmp_path / "resumed" / "checkpoints" / "step-000004" / "custom_checkpoint_2.pkl").is_file()
    weights = [
        AutoModelForCausalLM.from_pretrained(tmp_path / run / "model").state_dict()
        for run in ("straight", "resumed")
    ]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
