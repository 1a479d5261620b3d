"""Tests of trinity_core.batch: gather_* functions and ExperienceBatch."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import import_reference

from trinity_core.batch import (
    ExperienceBatch,
    all_finite,
    gather_action_masks,
    gather_attention_masks,
    gather_group_codes,
    gather_group_index,
    gather_group_indices,
    gather_multi_modal_inputs,
    gather_response_attrs,
    gather_rewards,
    gather_token_ids,
)
from trinity_core.experience import EID, Experience, ExperienceError, group_by

pytestmark = pytest.mark.core_alone  # no plugin changes what this tests: it runs in tox env core only


def _two() -> list[Experience]:
    return [
        Experience(tokens=[1, 2, 3, 4], prompt_length=2, logprobs=[-0.5, -1.5], reward=1.0),
        Experience(
            tokens=[5, 6, 7], prompt_length=1, logprobs=[-2.0, -3.0], action_mask=[True, False], reward=None
        ),
    ]


# ------------------------------------------------------------------------------------------ gather


def test_gather_token_ids_golden() -> None:
    out = gather_token_ids(_two(), max_prompt_length=3, max_response_length=3, pad_token_id=9)
    # prompt left-padded to 3, response right-padded to 3
    assert out.tolist() == [[9, 1, 2, 3, 4, 9], [9, 9, 5, 6, 7, 9]]
    assert out.dtype == torch.int32


def test_gather_token_ids_uses_first_dtype() -> None:
    exps = _two()
    exps[0].tokens = exps[0].tokens.to(torch.int64)
    out = gather_token_ids(exps, 2, 2, 0)
    assert out.dtype == torch.int64
    assert out.tolist() == [[1, 2, 3, 4], [0, 5, 6, 7]]


def test_gather_action_masks_golden() -> None:
    out = gather_action_masks(_two(), max_response_length=4)
    assert out.dtype == torch.bool
    assert out.tolist() == [[True, True, False, False], [True, False, False, False]]


def test_gather_attention_masks_golden() -> None:
    out = gather_attention_masks(_two(), max_prompt_length=3, max_response_length=3)
    assert out.tolist() == [
        [False, True, True, True, True, False],
        [False, False, True, True, True, False],
    ]


def test_gather_response_attrs_golden() -> None:
    out = gather_response_attrs(_two(), "logprobs", max_response_length=3, pad_value=7)
    assert out.dtype == torch.float32
    assert out.tolist() == [[-0.5, -1.5, 7.0], [-2.0, -3.0, 7.0]]


def test_gather_multi_modal_inputs_concatenates() -> None:
    exps = _two()
    exps[0].multi_modal_inputs = {"pix": torch.ones(2, 3), "n": torch.tensor(1)}
    exps[1].multi_modal_inputs = {"pix": torch.zeros(1, 3), "n": torch.tensor(4)}
    out = gather_multi_modal_inputs(exps)
    assert out["pix"].shape == (3, 3)
    assert out["pix"].sum().item() == 6.0
    assert out["n"].tolist() == [1, 4]


def test_gather_multi_modal_errors() -> None:
    exps = _two()
    with pytest.raises(ExperienceError, match="experience 0"):
        gather_multi_modal_inputs(exps)
    exps[0].multi_modal_inputs = {"pix": torch.ones(2, 3)}
    exps[1].multi_modal_inputs = {"pix": torch.ones(2, 4)}
    with pytest.raises(ExperienceError, match="experience 1"):
        gather_multi_modal_inputs(exps)
    exps[1].multi_modal_inputs = {"other": torch.ones(2, 3)}
    with pytest.raises(ExperienceError, match="lacks multi-modal key 'pix'"):
        gather_multi_modal_inputs(exps)


def test_gather_errors_name_the_index() -> None:
    exps = _two()
    with pytest.raises(ValueError, match="experience 0 has a prompt of 2 tokens"):
        gather_token_ids(exps, 1, 5, 0)
    with pytest.raises(ValueError, match="experience 0 has a response of 2 tokens"):
        gather_attention_masks(exps, 5, 1)
    exps[1].logprobs = torch.zeros(3)
    with pytest.raises(ValueError, match="experience 1 has 3 entries"):
        gather_response_attrs(exps, "logprobs", 2)
    with pytest.raises(ValueError, match="no attribute 'nope'"):
        gather_response_attrs(exps, "nope", 3)
    with pytest.raises(ExperienceError, match=r"experience 0 .* advantages=None"):
        gather_response_attrs(exps, "advantages", 3)
    with pytest.raises(ValueError, match="no experiences"):
        gather_token_ids([], 1, 1, 0)


@st.composite
def _experiences(draw: st.DrawFn, max_n: int = 8) -> list[Experience]:
    n = draw(st.integers(1, max_n))
    out = []
    for i in range(n):
        p = draw(st.integers(1, 5))
        r = draw(st.integers(1, 6))
        tokens = draw(st.lists(st.integers(0, 100), min_size=p + r, max_size=p + r))
        lp = draw(st.lists(st.floats(-5, 0, width=32), min_size=r, max_size=r))
        mask = draw(st.none() | st.lists(st.booleans(), min_size=r, max_size=r))
        reward = draw(st.none() | st.floats(-1, 1))
        eid = EID(
            batch=draw(st.sampled_from([0, 1, "b"])), task=draw(st.integers(0, 3)), run=i % 3, step=i % 2
        )
        out.append(
            Experience(eid=eid, tokens=tokens, prompt_length=p, logprobs=lp, action_mask=mask, reward=reward)
        )
    return out


@pytest.mark.reference
@settings(max_examples=30, deadline=None)
@given(exps=_experiences(), extra_p=st.integers(0, 2), extra_r=st.integers(0, 2), pad=st.integers(0, 9))
def test_gather_agrees_with_reference(exps: list[Experience], extra_p: int, extra_r: int, pad: int) -> None:
    ref = import_reference("trinity.common.experience")
    P = max(e.prompt_length for e in exps) + extra_p
    R = max(e.response_length for e in exps) + extra_r
    assert torch.equal(gather_token_ids(exps, P, R, pad), ref.gather_token_ids(exps, P, R, pad))
    assert torch.equal(gather_action_masks(exps, R), ref.gather_action_masks(exps, R))
    assert torch.equal(gather_attention_masks(exps, P, R), ref.gather_attention_masks(exps, P, R))
    assert torch.equal(
        gather_response_attrs(exps, "logprobs", R, pad), ref.gather_response_attrs(exps, "logprobs", R, pad)
    )


# ------------------------------------------------------------------------------------ ExperienceBatch


def test_batch_golden() -> None:
    exps = _two()
    batch = ExperienceBatch.from_experiences(exps, pad_token_id=9, max_response_length=3)
    assert len(batch) == 2
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 9], [9, 5, 6, 7, 9]]
    assert batch.responses.tolist() == [[3, 4, 9], [6, 7, 9]]
    assert batch.prompts.tolist() == [[1, 2], [9, 5]]
    assert batch.prompt_lengths.tolist() == [2, 1]
    assert batch.response_lengths.tolist() == [2, 2]
    assert batch.response_mask.tolist() == [[True, True, False], [True, True, False]]
    assert torch.equal(batch.attention_mask, gather_attention_masks(exps, 2, 3))
    assert batch.action_mask is not None
    assert batch.action_mask.tolist() == [[True, True, False], [True, False, False]]
    assert batch.logprobs is not None
    assert batch.logprobs.tolist() == [[-0.5, -1.5, 0.0], [-2.0, -3.0, 0.0]]
    assert batch.advantages is None
    assert batch.rewards.dtype == torch.float64
    assert batch.rewards[0].item() == 1.0
    assert math.isnan(batch.rewards[1].item())
    assert batch.has_reward.tolist() == [True, False]


def test_batch_groups_follow_group_by() -> None:
    eids = [
        (1, "a", 0, 0),
        (1, "b", 0, 0),
        (1, "a", 1, 0),
        (1, "a", 0, 1),
        ("1", "b", 2, 0),
        (2, "a%/", 0, 0),
    ]
    exps = [
        Experience(eid=EID(batch=b, task=t, run=r, step=s), tokens=[1, 2], prompt_length=1)
        for b, t, r, s in eids
    ]
    batch = ExperienceBatch.from_experiences(exps)
    # task ids: 1/a, 1/b (batch "1" and 1 render alike), 2/a%25%2F
    assert batch.group_index["task"].tolist() == [0, 1, 0, 0, 1, 2]
    assert batch.group_keys["task"] == ["1/a", "1/b", "2/a%25%2F"]
    index, count = gather_group_codes(exps)
    assert (index.tolist(), count) == ([0, 1, 0, 0, 1, 2], 3)
    assert batch.num_groups == {"task": 3, "run": 5, "step": 4}
    assert batch.group_sizes("task").tolist() == [3, 2, 1]
    for level in ("task", "run", "step"):
        groups = group_by(exps, level)
        assert list(groups) == batch.group_keys[level]
        for g, (key, members) in enumerate(groups.items()):
            idx = (batch.group_index[level] == g).nonzero().flatten().tolist()
            assert [exps[i] for i in idx] == members, key


_TASKS = st.one_of(
    st.integers(-3, 5),
    st.integers(2**63, 2**64),  # beyond int64: the dict path
    st.sampled_from(["3", "a", "a/b", "%"]),
)


@settings(max_examples=150, deadline=None)
@given(
    runs=st.lists(st.tuples(_TASKS, st.integers(1, 4)), min_size=1, max_size=8),
    batch=st.sampled_from([0, 7, "7", "x/y"]),
    shuffle=st.randoms(use_true_random=False),
    contiguous=st.booleans(),
    blocks=st.booleans(),
)
def test_group_index_numbers_tids_by_first_appearance(
    runs: list[tuple[int | str, int]], batch: int | str, shuffle: Any, contiguous: bool, blocks: bool
) -> None:
    # Tasks in runs (rollout order, the contiguous fast path) or shuffled (the dict path); equal
    # values of int and str ("3" and 3) are one task, as EID.tid says. Run and step numbers cycle, or
    # come in blocks (each run's steps next to each other: the contiguous path for rid too).
    tasks = [task for task, size in runs for _ in range(size)]
    if not contiguous:
        shuffle.shuffle(tasks)
    exps = [
        Experience(
            eid=EID(batch=batch, task=t, run=i // 2 - 3 if blocks else i % 3, step=i % 2),
            tokens=[1, 2],
            prompt_length=1,
            reward=float(i) if i % 3 else None,
        )
        for i, t in enumerate(tasks)
    ]
    for level, id_of in (("task", "tid"), ("run", "rid"), ("step", "sid")):
        expected: dict[str, int] = {}
        codes = [expected.setdefault(getattr(e.eid, id_of), len(expected)) for e in exps]
        index, keys = gather_group_index(exps, level)
        assert index.dtype == torch.int64
        assert index.tolist() == codes
        assert keys == list(expected)
        index, count = gather_group_codes(exps, level)
        assert index.dtype == torch.int64
        assert (index.tolist(), count) == (codes, len(expected))
    batch_all = ExperienceBatch.from_experiences(exps)
    for level in ("task", "run", "step"):
        assert torch.equal(batch_all.group_index[level], gather_group_index(exps, level)[0])
    index, keys = gather_group_indices(exps, ("run", "task"))
    assert keys == {level: batch_all.group_keys[level] for level in ("run", "task")}
    assert all(torch.equal(index[level], batch_all.group_index[level]) for level in ("run", "task"))
    rewards, has_reward = gather_rewards(exps)
    assert rewards.dtype == torch.float64
    assert has_reward.tolist() == [i % 3 != 0 for i in range(len(exps))]
    assert [r for r, h in zip(rewards.tolist(), has_reward.tolist(), strict=True) if h] == [
        float(i) for i in range(len(exps)) if i % 3
    ]
    assert rewards[~has_reward].isnan().all()


def _assert_same_experience(a: Experience, b: Experience) -> None:
    for name, va in vars(a).items():
        vb = getattr(b, name)
        if isinstance(va, torch.Tensor):
            assert isinstance(vb, torch.Tensor), name
            assert va.dtype == vb.dtype, name
            assert torch.equal(va, vb), name
        else:
            assert va == vb, name


@settings(max_examples=40, deadline=None)
@given(exps=_experiences(max_n=12))
def test_batch_round_trip(exps: list[Experience]) -> None:
    batch = ExperienceBatch.from_experiences(exps)
    back = batch.to_experiences()
    assert len(back) == len(exps)
    for a, b in zip(exps, back, strict=True):
        _assert_same_experience(a, b)
    for level in ("task", "run", "step"):
        assert list(group_by(exps, level)) == batch.group_keys[level]


def _storage_range(t: torch.Tensor) -> tuple[int, int]:
    start = t.untyped_storage().data_ptr()
    return start, start + t.untyped_storage().nbytes()


def test_write_back_gives_views() -> None:
    exps = _two()
    batch = ExperienceBatch.from_experiences(exps, max_response_length=4)
    batch.advantages = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    batch.write_back("advantages")
    lo, hi = _storage_range(batch.advantages)
    for exp in exps:
        assert exp.advantages is not None
        assert lo <= exp.advantages.data_ptr() < hi
    assert [e.advantages.tolist() for e in exps if e.advantages is not None] == [[0.0, 1.0], [4.0, 5.0]]
    batch.advantages.mul_(10)
    assert exps[1].advantages is not None
    assert exps[1].advantages.tolist() == [40.0, 50.0]


def test_to_experiences_views_and_independent_dicts() -> None:
    exps = _two()
    exps[0].info["k"] = 1
    batch = ExperienceBatch.from_experiences(exps)
    back = batch.to_experiences()
    lo, hi = _storage_range(batch.input_ids)
    assert back[0].tokens is not None
    assert lo <= back[0].tokens.data_ptr() < hi
    assert batch.logprobs is not None
    batch.logprobs[1, 0] = 42.0
    assert back[1].logprobs is not None
    assert back[1].logprobs[0].item() == 42.0
    back[0].info["k"] = 2
    assert exps[0].info["k"] == 1


def test_write_back_reward() -> None:
    exps = _two()
    batch = ExperienceBatch.from_experiences(exps)
    batch.rewards[0] = 0.25
    batch.has_reward[1] = True
    batch.rewards[1] = -1.0
    batch.write_back("reward")
    assert [e.reward for e in exps] == [0.25, -1.0]


def test_batch_errors() -> None:
    exps = _two()
    exps[0].advantages = torch.zeros(2)
    with pytest.raises(
        ExperienceError, match=r"advantages is set on 1 experiences but None on 1 \(first: index 1\)"
    ):
        ExperienceBatch.from_experiences(exps)
    exps[1].advantages = torch.zeros(3)
    with pytest.raises(ExperienceError, match="experience 1 has advantages of shape"):
        ExperienceBatch.from_experiences(exps)
    with pytest.raises(ValueError, match="experience 0 has a response of 2 tokens"):
        ExperienceBatch.from_experiences(_two(), max_response_length=1)
    dpo = Experience(tokens=[1, 2], chosen=[3], rejected=[4])
    with pytest.raises(ExperienceError, match="DPO pair"):
        ExperienceBatch.from_experiences([dpo])
    batch = ExperienceBatch.from_experiences(_two())
    with pytest.raises(ValueError, match="has no 'advantages'"):
        batch.write_back("advantages")
    with pytest.raises(ValueError, match="unknown field 'tokens'"):
        batch.write_back("tokens")
    with pytest.raises(ValueError, match="holds 2 experiences, got 1"):
        batch.write_back("logprobs", _two()[:1])


def test_batch_to_and_empty() -> None:
    batch = ExperienceBatch.from_experiences(_two()).to("cpu")
    assert batch.input_ids.device.type == "cpu"
    assert batch.group_index["task"].tolist() == [0, 0]
    empty = ExperienceBatch.from_experiences([])
    assert len(empty) == 0
    assert empty.rewards.shape == (0,)
    assert empty.num_groups == {"task": 0, "run": 0, "step": 0}
    assert empty.to_experiences() == []


def test_token_level_scores_put_the_reward_on_the_last_response_token() -> None:
    exps = [
        Experience(tokens=[1, 2, 3, 4], prompt_length=1, reward=2.0),
        Experience(tokens=[1, 2], prompt_length=1, reward=None),
        Experience(tokens=[1, 2, 3], prompt_length=1, reward=-1.5),
    ]
    scores = ExperienceBatch.from_experiences(exps).token_level_scores()
    assert scores.tolist() == [[0.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, -1.5, 0.0]]


def test_token_level_scores_prefer_token_level_rewards() -> None:
    exps = [Experience(tokens=[1, 2, 3], prompt_length=1, reward=9.0, token_level_reward=[0.5, 0.25])]
    batch = ExperienceBatch.from_experiences(exps)
    assert batch.token_level_scores().tolist() == [[0.5, 0.25]]
    batch.extras["token_level_rewards"] = torch.tensor([[0.25, -1.0]])  # after a KL penalty
    assert batch.token_level_scores().tolist() == [[0.25, -1.0]]


def test_columns_come_from_fields_or_extras_and_missing_ones_say_who_needs_them() -> None:
    exps = [Experience(tokens=[1, 2, 3], prompt_length=1, logprobs=[-0.5, -0.25])]
    batch = ExperienceBatch.from_experiences(exps)
    assert batch.column("logprobs").tolist() == [[-0.5, -0.25]]
    batch.extras["values"] = torch.ones(1, 2)
    assert batch.column("values").tolist() == [[1.0, 1.0]]
    assert batch.to("cpu").extras["values"].tolist() == [[1.0, 1.0]]
    with pytest.raises(
        KeyError, match=r"'ref_logprobs' \(needed by kl\).*present: action_mask, logprobs, values"
    ):
        batch.column("ref_logprobs", needed_by="kl")


def test_fields_limit_the_padded_columns_a_consumer_reads() -> None:
    exps = [
        Experience(
            eid=EID(batch=0, task=t, run=r), tokens=[1, 2, 3, 4], prompt_length=2, logprobs=[-0.5, -0.25]
        )
        for t in range(2)
        for r in range(2)
    ]
    batch = ExperienceBatch.from_experiences(exps, fields=("logprobs",), group_levels=("task",))
    assert batch.logprobs is not None
    assert batch.action_mask is None
    assert batch.input_ids.device.type == "meta"
    assert tuple(batch.input_ids.shape) == (4, 4)
    assert batch.response_lengths.tolist() == [2, 2, 2, 2]
    assert batch.group_index["task"].tolist() == [0, 0, 1, 1]
    assert set(batch.group_index) == {"task"}
    with pytest.raises(ValueError, match="input_ids"):
        batch.to_experiences()
    with pytest.raises(ValueError, match="unknown"):
        ExperienceBatch.from_experiences(exps, fields=("logprob",))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.none() | st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**60), 2**60),
        max_size=20,
    )
)
def test_all_finite_agrees_with_the_check_of_each_value(values: list[float | int | None]) -> None:
    expected = all(v is not None and math.isfinite(v) for v in values)
    assert all_finite(values) is expected
    assert all_finite([*values, 1e308, 1e308]) is expected  # a finite sum that overflows


def test_rewards_are_finite_reads_the_source_rewards() -> None:
    exps = [
        Experience(eid=EID(task=0, run=i), tokens=torch.tensor([1, 2]), prompt_length=1, reward=1.0)
        for i in range(3)
    ]
    assert ExperienceBatch.from_experiences(exps).rewards_are_finite()
    exps[1].reward = None
    assert not ExperienceBatch.from_experiences(exps).rewards_are_finite()


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 6), min_size=1, max_size=12),
    extra=st.integers(0, 3),
    equal=st.booleans(),
    side=st.sampled_from(["left", "right"]),
)
def test_pad_rows_pads_each_row_on_its_side(lengths: list[int], extra: int, equal: bool, side: str) -> None:
    # Rows that fill the width take the concatenate-only path; any other rows the masked scatter.
    from trinity_core.columns import pad_rows

    if equal:
        lengths = [lengths[0]] * len(lengths)
    rows = [torch.arange(1, n + 1, dtype=torch.float32) * (i + 1) for i, n in enumerate(lengths)]
    width = max(lengths) + extra
    got = pad_rows(rows, width, -1.0, torch.float32, torch.device("cpu"), side=side)  # type: ignore[arg-type]
    fills = [torch.full((width - len(r),), -1.0) for r in rows]
    pieces = zip(rows, fills, strict=True) if side == "right" else zip(fills, rows, strict=True)
    expected = torch.stack([torch.cat(pair) for pair in pieces])
    assert torch.equal(got, expected)


def test_experience_content_errors_are_experience_errors_and_limits_are_value_errors() -> None:
    # What is wrong with an experience itself raises ExperienceError (also an AssertionError, as the
    # reference's asserts); a length over a configured limit or a bad argument stays a plain ValueError.
    bad_tokens = _two()
    bad_tokens[0].tokens = torch.zeros(2, 2, dtype=torch.int32)
    with pytest.raises(ExperienceError, match=r"experience 0 .* needs 1-D tokens"):
        gather_token_ids(bad_tokens, 5, 5, 0)
    bad_prompt = _two()
    bad_prompt[1].prompt_length = 9
    with pytest.raises(AssertionError, match="experience 1 has prompt_length=9"):
        ExperienceBatch.from_experiences(bad_prompt)
    with pytest.raises(ValueError, match="has a prompt of 2 tokens") as limit:
        gather_token_ids(_two(), 1, 5, 0)
    assert not isinstance(limit.value, AssertionError)
    with pytest.raises(ValueError, match="no attribute 'nope'") as argument:
        gather_response_attrs(_two(), "nope", 3)
    assert not isinstance(argument.value, AssertionError)
