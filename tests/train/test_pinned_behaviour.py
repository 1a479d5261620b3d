"""Behaviour pinned from its definition where a mutation audit found single-point bugs that no test
caught: the critic's value alignment, the staleness boundary, workflow EIDs, each epoch's order, the
order checkpoints are tried on resume, the expert-data capability, and the codec's index bound.

Each expected value is derived by hand from the definition in the docstring it cites.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from rollout_support import TINY_MODEL

from trinity_core.batch import ExperienceBatch
from trinity_core.codec import MAGIC, VERSION, ExperienceDecodeError, deserialize_many, serialize_many
from trinity_core.config import ConfigError, check_capabilities, resolve_config
from trinity_core.experience import EID, Experience
from trinity_core.train.checkpoints.commit import intact_checkpoints, write_manifest
from trinity_core.train.data.tasks import build_task
from trinity_core.train.learner.critic import response_values
from trinity_core.train.learner.staleness import keep_fresh, row_versions
from trinity_core.workflows import SingleTurnWorkflow, make_tasks

# ------------------------------------------------------------------------------------- critic alignment


class _PositionModel:
    """A value model whose output at position ``i`` is ``i`` (its value head reads the position)."""

    def __call__(self, input_ids: torch.Tensor, **kwargs: Any) -> Any:
        B, T = input_ids.shape
        logits = torch.arange(T, dtype=torch.float32).expand(B, T)[..., None]
        return SimpleNamespace(logits=logits)


def test_the_value_of_response_token_t_is_the_output_at_position_p_minus_1_plus_t() -> None:
    ids = torch.zeros(2, 7, dtype=torch.long)  # P = 4 prompt positions, R = 3 response tokens
    values = response_values(_PositionModel(), ids, None, prompt_width=4)
    assert values.tolist() == [[3.0, 4.0, 5.0], [3.0, 4.0, 5.0]]


# ------------------------------------------------------------------------------------- staleness


def _batch(versions: list[int]) -> ExperienceBatch:
    exps = [
        Experience(eid=EID(batch=0, task=i, run=0), tokens=[1, 2, 3], prompt_length=1, reward=1.0,
                   info={"model_version": v})
        for i, v in enumerate(versions)
    ]  # fmt: skip
    return ExperienceBatch.from_experiences(exps, pad_token_id=0)


def test_staleness_keeps_rows_exactly_max_staleness_old_and_drops_older() -> None:
    # Learner at version 5: rows of versions 5, 4, 3, 2 are 0, 1, 2, 3 updates old.
    kept, metrics = keep_fresh(_batch([5, 4, 3, 2]), 5, max_staleness=2)
    assert kept is not None
    assert [e.info["model_version"] for e in kept.experiences] == [5, 4, 3]
    assert metrics["staleness/dropped"].item() == 1.0
    assert metrics["staleness/dropped"].dtype == torch.float64
    assert metrics["staleness/max"].item() == 3.0
    assert metrics["staleness/mean"].item() == pytest.approx(1.5)
    whole = _batch([5, 4, 3, 2])
    everything, _ = keep_fresh(whole, 5, max_staleness=3)
    assert everything is whole  # every row within the bound (3 included): the batch as it is
    none, metrics = keep_fresh(_batch([2, 2]), 5, max_staleness=2)
    assert none is None
    assert metrics["staleness/dropped"].item() == 2.0


def test_staleness_metrics_are_float64_and_a_batch_within_bounds_is_kept_whole() -> None:
    batch = _batch([5, 4])
    kept, metrics = keep_fresh(batch, 5, max_staleness=None)
    assert kept is batch
    assert {k: (v.dtype, v.item()) for k, v in metrics.items()} == {
        "staleness/mean": (torch.float64, 0.5),
        "staleness/max": (torch.float64, 1.0),
        "staleness/dropped": (torch.float64, 0.0),
    }


def test_a_row_without_a_recorded_version_counts_as_current() -> None:
    unversioned = Experience(eid=EID(batch=0, task=9, run=0), tokens=[1, 2], prompt_length=1, reward=0.0)
    exps = [*_batch([3]).experiences, unversioned]
    batch = ExperienceBatch.from_experiences(exps, pad_token_id=0)
    assert row_versions(batch, 7).tolist() == [3, 7]
    assert row_versions(batch, 7).dtype == torch.int64
    kept, metrics = keep_fresh(batch, 3, max_staleness=0)  # the unversioned row is as fresh as can be
    assert kept is batch
    assert metrics["staleness/max"].item() == 0.0


def test_the_kept_rows_keep_the_batch_padding_and_group_levels() -> None:
    exps = [
        Experience(eid=EID(batch=0, task=i // 2, run=i % 2), tokens=[1, 2, 3], prompt_length=1,
                   reward=float(i), info={"model_version": v})
        for i, v in enumerate([5, 1, 5, 5])
    ]  # fmt: skip
    batch = ExperienceBatch.from_experiences(exps, pad_token_id=7, group_levels=("task",))
    kept, _ = keep_fresh(batch, 5, max_staleness=0)
    assert kept is not None
    assert kept.pad_token_id == 7
    assert set(kept.group_index) == {"task"}
    assert kept.rewards.tolist() == [0.0, 2.0, 3.0]


def test_a_columnar_batch_gives_its_one_version_without_making_experiences() -> None:
    from rollout_support import random_rollout

    from trinity_core.train.explorer.experiences import rollout_batch

    batch = rollout_batch(
        random_rollout([2, 2], [2, 2], 0), [1.0, 0.0], step=0, group_size=2, model_version=4
    )
    assert row_versions(batch, 9).tolist() == [4, 4]
    assert row_versions(batch, 9).dtype == torch.int64
    assert not batch.experiences.materialized  # type: ignore[attr-defined]
    unversioned = rollout_batch(random_rollout([2, 2], [2, 2], 0), [1.0, 0.0], step=0, group_size=2)
    assert row_versions(unversioned, 9).tolist() == [9, 9]


# ------------------------------------------------------------------------------------- workflow EIDs


def test_workflow_tasks_take_the_global_task_index_and_their_run_ids() -> None:
    rows = [{"prompt": "a"}, {"prompt": "b"}]
    repeating = make_tasks(SingleTurnWorkflow, rows, step=3, task_offset=10, repeat_times=4)
    assert [(t.index, t.batch, t.repeat_times, t.run_id_base) for t in repeating] == [
        (10, 3, 4, 0),
        (11, 3, 4, 0),
    ]

    class OneRun(SingleTurnWorkflow):
        can_repeat = False

    single = make_tasks(OneRun, rows, step=3, task_offset=10, repeat_times=2)
    assert [(t.index, t.repeat_times, t.run_id_base) for t in single] == [
        (10, 1, 0),
        (10, 1, 1),
        (11, 1, 0),
        (11, 1, 1),
    ]


# ------------------------------------------------------------------------------------- epoch order


def test_each_epoch_of_a_dataset_is_a_new_permutation_and_a_seed_repeats_it(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i}=", "answer": str(i)}) + "\n" for i in range(8)))
    config = resolve_config({"tasks": {"name": "dataset", "args": {"path": str(path)}}, "model": TINY_MODEL})

    def epochs(seed: int) -> list[list[str]]:
        task, gen = build_task(config), torch.Generator().manual_seed(seed)
        drawn = [row["answer"] for _ in range(3) for row in task.sample(8, gen)]
        return [drawn[:8], drawn[8:16], drawn[16:]]

    first = epochs(0)
    assert all(sorted(e) == [str(i) for i in range(8)] for e in first)  # each epoch sees every row once
    assert first[0] != first[1]
    assert first[1] != first[2]
    assert epochs(0) == first  # the seed decides it


# ------------------------------------------------------------------------------------- resume order


def _checkpoint(root: Path, step: int) -> None:
    folder = root / f"step-{step:06d}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "state.json").write_text(json.dumps({"step": step}))
    write_manifest(folder)


def test_resume_tries_the_latest_pointer_first_then_steps_newest_first(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        _checkpoint(root, step)
    names = [p.name for p in intact_checkpoints(tmp_path)]
    assert names == ["step-000003", "step-000002", "step-000001"]
    # A kill between the rename of step 3 and the pointer's update: the pointer names step 2.
    (root / "latest").write_text("step-000002")
    names = [p.name for p in intact_checkpoints(tmp_path)]
    assert names == ["step-000002", "step-000003", "step-000001"]


# ------------------------------------------------------------------------------------- capabilities


@pytest.mark.parametrize(
    ("mode", "expert_path", "refused"),
    [("both", None, True), ("both", "data.jsonl", False), ("train", "data.jsonl", True)],
    ids=["no-expert-data", "expert-data", "mode-train"],
)
def test_expert_data_presets_need_expert_rows_in_mode_both(
    mode: str, expert_path: str | None, refused: bool
) -> None:
    config = {"algorithm": {"algorithm_type": "mix"}, "mode": mode, "data": {"expert_path": expert_path}}
    if mode == "train":
        config["data"]["experiences"] = "stored"
    resolved = resolve_config(config)
    if not refused:
        check_capabilities(resolved)
        return
    with pytest.raises(ConfigError) as caught:
        check_capabilities(resolved)
    assert any(p.path == "data.expert_path" or "expert" in p.message for p in caught.value.problems)


# ------------------------------------------------------------------------------------- codec index bound


def _with_present(payload: bytes, field: str, present: list[int]) -> bytes:
    """``payload`` with the ``present`` index list of tensor field ``field`` replaced."""
    head = len(MAGIC) + struct.calcsize("<BQQ")
    _, header_len, blob_len = struct.unpack("<BQQ", payload[len(MAGIC) : head])
    header = json.loads(payload[head : head + header_len])
    header["tensors"][field]["present"] = present
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(len(MAGIC) + struct.calcsize("<BQQ") + len(text)) % 8)
    return MAGIC + struct.pack("<BQQ", VERSION, len(text), blob_len) + text + payload[head + header_len :]


def test_a_tensor_index_must_name_an_item_of_the_payload() -> None:
    exps = [Experience(tokens=[1, 2, 3], prompt_length=1) for _ in range(3)]
    exps[0].logprobs = torch.zeros(2)
    exps[1].logprobs = torch.ones(2)
    payload = serialize_many(exps)
    last_item = _with_present(payload, "logprobs", [0, 2])  # items 0..2 exist: index 2 is the last
    assert [e.logprobs is not None for e in deserialize_many(last_item)] == [True, False, True]
    with pytest.raises(ExperienceDecodeError, match=r"out of range 0\.\.2"):
        deserialize_many(_with_present(payload, "logprobs", [0, 3]))
    with pytest.raises(ExperienceDecodeError, match=r"out of range 0\.\.2"):
        deserialize_many(_with_present(payload, "logprobs", [-1, 1]))
