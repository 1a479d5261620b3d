"""The columnar step: experiences travel as one batch when every stage reads columns.

The batch built from the rollout's columns must equal the batch built from the experiences, the lazily
made experiences must equal the constructor's, the buffer must hand the batch through untouched, and a
training run must be the same whether its step takes the columnar path or the per-experience one.
"""

from __future__ import annotations

import asyncio
import copy
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rollout_support import ROLLOUT_CASES, TINY_MODEL, assert_same_experience, random_rollout

from trinity_core import registry
from trinity_core.batch import GROUP_LEVELS, ExperienceBatch, LazyExperiences
from trinity_core.buffer import make_buffer
from trinity_core.experience import Experience
from trinity_core.hooks import get_plugin_manager
from trinity_core.hookspecs import hookimpl
from trinity_core.train import train
from trinity_core.train.explorer.columnar import columnar_levels, pipeline_advantage_on_batch
from trinity_core.train.explorer.experiences import rollout_batch, rollout_experiences

TIMINGS = ("time/", "throughput/", "explorer/idle_fraction", "learner/idle_fraction")
"""Metrics measured in seconds: they differ between two runs of the same steps."""

TINY = {
    "trainer": {"total_steps": 3, "checkpoint_every": 0, "progress": False, "threads": 1, "seed": 3},
    "rollout": {"prompts_per_step": 2},
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none"},
    "tasks": {"eval_size": 4},
    "model": TINY_MODEL,
}


def _assert_same_batch(got: ExperienceBatch, want: ExperienceBatch) -> None:
    for name in ("input_ids", "prompt_lengths", "response_lengths", "rewards", "has_reward", "action_mask"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype, name
        assert torch.equal(a, b), name
    assert (got.max_prompt_length, got.max_response_length) == (
        want.max_prompt_length,
        want.max_response_length,
    )
    assert got.group_keys == want.group_keys
    assert got.group_index.keys() == want.group_index.keys()
    for level, index in want.group_index.items():
        assert torch.equal(got.group_index[level], index), level
    assert got._lengths == want._lengths


@settings(max_examples=40, deadline=None)
@given(
    ROLLOUT_CASES,
    st.integers(0, 3),
    st.integers(0, 2**16),
)
def test_rollout_batch_equals_the_batch_of_the_experiences(
    case: tuple[int, list[tuple[int, int, float | None]]], step: int, seed: int
) -> None:
    G, rows = case
    ro = random_rollout([p for p, _, _ in rows], [r for _, r, _ in rows], seed)
    rewards = [w for _, _, w in rows]
    got = rollout_batch(ro, rewards, step=step, group_size=G, task_offset=5, pad_token_id=1)
    exps = rollout_experiences(ro, rewards, step=step, group_size=G, task_offset=5)
    assert len(got) == len(exps)
    if not exps:
        return
    want = ExperienceBatch.from_experiences(exps, pad_token_id=1)
    assert isinstance(got.experiences, LazyExperiences)
    assert not got.experiences.materialized
    _assert_same_batch(got, want)
    assert got.source_rewards() == [e.reward for e in exps]
    assert not got.experiences.materialized  # len() and source_rewards() never make the experiences
    made = list(got.experiences)
    assert got.experiences.materialized
    assert list(got.experiences) == made
    for a, b in zip(made, exps, strict=True):
        assert_same_experience(a, b)
    # The made experiences view the batch: an in-place change of the batch shows in them.
    got.input_ids[0, got.max_prompt_length] += 1
    assert int(made[0].tokens[made[0].prompt_length]) == int(got.input_ids[0, got.max_prompt_length])


def test_rollout_batch_builds_only_the_requested_levels_and_rejects_a_wrong_reward_count() -> None:
    ro = random_rollout([2, 2, 3, 3], [1, 2, 2, 1], 0)
    batch = rollout_batch(ro, [1.0, 0.0, 1.0, 0.5], step=0, group_size=2, group_levels=("task",))
    assert list(batch.group_index) == ["task"]
    with pytest.raises(ValueError, match="3 rewards for a rollout of 4 responses"):
        rollout_batch(ro, [1.0, 0.0, 1.0], step=0, group_size=2)


def test_experiences_made_after_the_advantage_carry_it_as_views() -> None:
    ro = random_rollout([2, 3, 2, 3], [3, 1, 2, 2], 1)
    rewards = [1.0, 0.0, 0.0, 1.0]
    advantage = registry.create("advantage_fn", "grpo", {})
    batch = rollout_batch(ro, rewards, step=4, group_size=2, group_levels=("task",))
    out, metrics = pipeline_advantage_on_batch(advantage, batch)
    assert out is batch
    assert not batch.experiences.materialized
    # The list path on the same experiences: same advantages, returns and metrics.
    want, want_metrics = advantage(rollout_experiences(ro, rewards, step=4, group_size=2))
    made = list(batch.experiences)
    for a, b in zip(made, want, strict=True):
        assert torch.equal(a.advantages, b.advantages)
        assert a.advantages.dtype == b.advantages.dtype
        assert torch.equal(a.returns, b.returns)
        assert a.advantages.data_ptr() != a.returns.data_ptr()
    assert metrics.keys() == want_metrics.keys()
    for key, value in want_metrics.items():
        torch.testing.assert_close(torch.as_tensor(metrics[key]), torch.as_tensor(value), rtol=0, atol=0)


def test_a_result_that_drops_experiences_takes_the_list_path() -> None:
    ro = random_rollout([2] * 4, [2] * 4, 2)
    rewards = [1.0, 1.0, 0.0, 1.0]  # the first group has zero variance: std_threshold drops it
    advantage = registry.create("advantage_fn", "grpo", {"std_threshold": 0.0})
    batch = rollout_batch(ro, rewards, step=0, group_size=2, group_levels=("task",))
    out, _ = pipeline_advantage_on_batch(advantage, batch)
    want, _ = advantage(rollout_experiences(ro, rewards, step=0, group_size=2))
    assert isinstance(out, list)
    assert len(out) == len(want) == 2
    for a, b in zip(out, want, strict=True):
        assert (a.eid.task, a.eid.run) == (b.eid.task, b.eid.run)
        assert torch.equal(a.advantages, b.advantages)


def test_memory_buffer_hands_a_written_batch_through_without_making_experiences() -> None:
    ro = random_rollout([2, 3, 2, 3], [3, 1, 2, 2], 1)
    batch = rollout_batch(ro, [1.0, 0.0, 0.0, 1.0], step=0, group_size=2)
    writer, reader = make_buffer("memory")

    async def run() -> tuple[ExperienceBatch, int]:
        await writer.write_batch(batch)
        assert len(reader) == 4
        got = await reader.read_batch(pad_token_id=0, group_levels=GROUP_LEVELS)
        return got, reader.discard_read()

    got, dropped = asyncio.run(run())
    assert got is batch
    assert dropped == 4
    assert len(reader) == 0
    assert not batch.experiences.materialized


def test_memory_buffer_reads_a_lazy_chunk_as_experiences_and_rebuilds_partial_batches() -> None:
    ro = random_rollout([2, 3, 2, 3], [3, 1, 2, 2], 1)
    rewards = [1.0, 0.0, 0.0, 1.0]
    batch = rollout_batch(ro, rewards, step=0, group_size=2)
    plain = rollout_experiences(ro, rewards, step=1, group_size=2)
    writer, reader = make_buffer("memory")

    async def run() -> tuple[ExperienceBatch, list[Experience], ExperienceBatch]:
        await writer.write_batch(batch)
        await writer.write(plain[:1])
        first = await reader.read_batch(3, pad_token_id=0)  # part of the lazy chunk: rebuilt
        middle = await reader.read(2)  # the rest of the chunk, then the plain write
        reader.load_state_dict({"current_index": 0})
        again = await reader.read_batch(pad_token_id=7)  # another padding: rebuilt from everything
        return first, middle, again

    first, middle, again = asyncio.run(run())
    made = list(batch.experiences)
    assert first is not batch
    assert len(first) == 3
    assert torch.equal(first.input_ids, ExperienceBatch.from_experiences(made[:3]).input_ids)
    assert middle == [made[3], plain[0]]
    assert len(again) == 5
    assert again.pad_token_id == 7
    assert len(reader.storage.items) == 5


def test_a_pipeline_hook_or_an_add_strategy_disables_the_columnar_step() -> None:
    pm = get_plugin_manager()
    components = types.SimpleNamespace(
        add_strategy=None, advantage=registry.create("advantage_fn", "grpo", {}), advantage_in_trainer=False
    )
    assert columnar_levels(components, pm) == ("task",)
    plugin = types.SimpleNamespace(trinity_process_experiences=hookimpl(lambda experiences, step: None))
    pm.register(plugin, name="columnar-test-stage")
    try:
        assert columnar_levels(components, pm) is None
    finally:
        pm.unregister(name="columnar-test-stage")
    components.add_strategy = object()
    assert columnar_levels(components, pm) is None
    duplicating = registry.create(
        "advantage_fn", "grpo", {"duplicate_experiences": True, "std_threshold": 0.0}
    )
    assert not duplicating.columnar_equivalent()


def _run(tmp_path: Path, name: str, config: dict[str, Any]) -> tuple[Any, dict[str, torch.Tensor]]:
    result = train(copy.deepcopy(config), run_dir=tmp_path / name)
    from safetensors.torch import load_file

    ckpt_dir = sorted((tmp_path / name / "checkpoints").iterdir())[-1]
    return result, load_file(ckpt_dir / "model.safetensors")


@pytest.mark.parametrize("preset", ["grpo", "reinforceplusplus", "opmd", "rloo"])
def test_training_is_the_same_on_the_columnar_and_the_per_experience_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preset: str
) -> None:
    config = copy.deepcopy(TINY)
    config["algorithm"]["algorithm_type"] = preset
    made = {"steps": 0}
    original = LazyExperiences.materialize

    def counted(self: LazyExperiences[Any]) -> list[Experience]:
        made["steps"] += not self.materialized
        return original(self)

    monkeypatch.setattr(LazyExperiences, "materialize", counted)
    columnar, columnar_params = _run(tmp_path, "columnar", config)
    assert made["steps"] == 0  # no step made its Experience objects: the columns went to the update

    pm = get_plugin_manager()
    stage = types.SimpleNamespace(trinity_process_experiences=hookimpl(lambda experiences, step: None))
    pm.register(stage, name="columnar-test-noop")
    try:
        listed, listed_params = _run(tmp_path, "listed", config)
    finally:
        pm.unregister(name="columnar-test-noop")
    assert made["steps"] == 3  # the hook read the Experience objects: each step made them, once

    assert len(columnar.history) == len(listed.history) == 3
    for a, b in zip(columnar.history, listed.history, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if not key.startswith(TIMINGS):
                assert a[key] == b[key], key
    assert columnar_params.keys() == listed_params.keys()
    for key, value in columnar_params.items():
        assert torch.equal(value, listed_params[key]), key
