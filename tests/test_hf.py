"""Tests of trinity_core.hf: to_hf_datasets / from_hf_datasets."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import import_reference

from trinity_core.experience import EID, CustomField, Experience
from trinity_core.hf import FORMAT_VERSION, from_hf_datasets, to_hf_datasets

pytestmark = pytest.mark.core_alone  # no plugin changes what this tests: it runs in tox env core only

os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
datasets = pytest.importorskip("datasets")

_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.uint8]


def _same(a: Any, b: Any, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert (a.dtype, a.shape) == (b.dtype, b.shape), where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict), where
        assert list(a) == list(b), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert type(a) is type(b), where
        assert a == b, where


def _assert_same(a: Experience, b: Experience) -> None:
    assert set(vars(a)) == set(vars(b))
    for name, value in vars(a).items():
        _same(value, getattr(b, name), name)


def _tensor(draw: st.DrawFn, n: int, dtype: torch.dtype) -> torch.Tensor:
    values = draw(st.lists(st.integers(0, 200), min_size=n, max_size=n))
    return (torch.tensor(values, dtype=torch.float64) / 8).to(dtype)


@st.composite
def _experience_lists(draw: st.DrawFn) -> list[Experience]:
    n = draw(st.integers(0, 6))
    logprob_dtype = draw(st.sampled_from(_DTYPES))
    token_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    with_returns = draw(st.booleans())
    out = []
    for _ in range(n):
        kind = draw(st.sampled_from(["single", "multi", "dpo"]))
        eid = EID(
            batch=draw(st.sampled_from([0, 7, "7", "a/b"])),
            task=draw(st.sampled_from([1, "1", "x%y"])),
            run=draw(st.integers(0, 3)),
            step=draw(st.integers(0, 3)),
        )
        info = draw(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers() | st.text(max_size=3)))
        if draw(st.booleans()):
            info["t"] = (1, "x")
        common: dict[str, Any] = {
            "eid": eid,
            "info": info,
            "metrics": draw(st.dictionaries(st.sampled_from(["m", "n"]), st.floats(allow_nan=False))),
            "reward": draw(st.none() | st.floats(allow_nan=False)),
            "prompt_text": draw(st.none() | st.text(max_size=5)),
            "custom_fields": draw(
                st.sampled_from(
                    [[], [CustomField("a", "b", torch.float32), CustomField("c", "d", torch.bfloat16)]]
                )
            ),
        }
        if kind == "dpo":
            exp = Experience(
                tokens=torch.arange(3, dtype=token_dtype),
                chosen=torch.tensor([4, 5], dtype=token_dtype),
                rejected=torch.tensor([6], dtype=token_dtype),
                chosen_messages=[{"role": "assistant", "content": "c"}],
                rejected_messages=[{"role": "assistant", "content": "r", "extra": None}],
                **common,
            )
        else:
            p, r = draw(st.integers(1, 4)), draw(st.integers(1, 5))
            exp = Experience(
                tokens=torch.arange(p + r, dtype=token_dtype) * 3,
                prompt_length=p,
                logprobs=_tensor(draw, r, logprob_dtype),
                returns=_tensor(draw, r, torch.float32) if with_returns else None,
                action_mask=torch.tensor(draw(st.lists(st.booleans(), min_size=r, max_size=r)))
                if kind == "multi"
                else None,
                messages=[{"role": "user", "content": "q"}] if draw(st.booleans()) else None,
                truncate_status=draw(st.sampled_from([None, "response_truncated"])),
                multi_modal_inputs={
                    "pix": torch.ones(2, 3, dtype=torch.bfloat16),
                    "thw": torch.tensor([[1, 2, 3]]),
                }
                if draw(st.booleans())
                else None,
                **common,
            )
        out.append(exp)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exps=_experience_lists())
def test_round_trip(exps: list[Experience]) -> None:
    ds = to_hf_datasets(exps)
    assert len(ds) == len(exps)
    back = from_hf_datasets(ds)
    assert len(back) == len(exps)
    for a, b in zip(exps, back, strict=True):
        _assert_same(a, b)


def _sample() -> list[Experience]:
    return [
        Experience(
            eid=EID(batch=3, task="3", run=1),
            tokens=[1, 2, 3],
            prompt_length=1,
            logprobs=torch.tensor([-0.5, -0.25], dtype=torch.bfloat16),
            info={"a": 1},
            reward=0.5,
        ),
        Experience(
            eid=EID(batch="3", task=3),
            tokens=[4, 5, 6, 7],
            prompt_length=2,
            logprobs=torch.tensor([-1.0, -2.0], dtype=torch.bfloat16),
            info={"b": [1, 2]},
            teacher_logprobs=torch.zeros(2),
        ),
    ]


def test_layout_and_metadata() -> None:
    ds = to_hf_datasets(_sample())
    assert ds["eid_batch"] == ["3", "3"]
    assert ds["eid_batch_int"] == [True, False]
    assert ds["tokens"] == [[1, 2, 3], [4, 5, 6, 7]]
    assert "logprobs__bfloat16" in ds.column_names
    assert "logprobs" not in ds.column_names
    assert ds["info"] == ['{"a":1}', '{"b":[1,2]}']  # JSON text: no key unification across rows
    assert ds["teacher_logprobs"] == [None, [0.0, 0.0]]
    meta = json.loads(ds.data.schema.metadata[b"huggingface"])["trinity_core"]
    assert meta["version"] == FORMAT_VERSION
    assert meta["dtypes"]["logprobs"] == "bfloat16"
    assert meta["dtypes"]["tokens"] == "int32"
    assert "advantages" not in meta["dtypes"]


def test_survives_dataset_operations(tmp_path: Path) -> None:
    exps = _sample()
    ds = to_hf_datasets(exps)
    picked = from_hf_datasets(ds.select([1]))
    _assert_same(exps[1], picked[0])
    shuffled = from_hf_datasets(ds.shuffle(seed=1).flatten_indices())
    assert sorted(e.eid.uid for e in shuffled) == sorted(e.eid.uid for e in exps)
    ds.save_to_disk(str(tmp_path / "ds"))
    loaded = datasets.load_from_disk(str(tmp_path / "ds"))
    assert b"trinity_core" not in loaded.data.schema.metadata[b"huggingface"]  # datasets dropped it
    for a, b in zip(exps, from_hf_datasets(loaded), strict=True):
        _assert_same(a, b)


def test_multi_dim_tensors() -> None:
    exp = Experience(tokens=[1, 2, 3], prompt_length=1, logprobs=[0.0, 1.0])
    exp.returns = torch.arange(6, dtype=torch.float32).reshape(2, 1, 3)
    other = Experience(tokens=[1, 2, 3], prompt_length=1, returns=[5.0, 6.0])
    ds = to_hf_datasets([exp, other])
    assert ds["returns__shape"] == [[2, 1, 3], [2]]
    back = from_hf_datasets(ds)
    _assert_same(exp, back[0])
    _assert_same(other, back[1])


def test_write_errors() -> None:
    a = Experience(tokens=[1, 2], prompt_length=1, logprobs=torch.zeros(1, dtype=torch.float32))
    b = Experience(tokens=[1, 2], prompt_length=1, logprobs=torch.zeros(1, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"logprobs mixes dtypes torch.float32 and torch.float64"):
        to_hf_datasets([a, b])
    b.logprobs = torch.zeros(1, dtype=torch.complex64)
    with pytest.raises(TypeError, match="complex64, which cannot be stored"):
        to_hf_datasets([b])
    b.logprobs = None
    b.eid.batch = 1.5  # type: ignore[assignment]
    with pytest.raises(TypeError, match=r"experiences\[0\].eid.batch is 1.5"):
        to_hf_datasets([b])


def _with_metadata(ds: Any, own: dict[str, Any]) -> Any:
    table = ds.data.table.replace_schema_metadata({"huggingface": json.dumps({"trinity_core": own})})
    return datasets.Dataset(table)


def test_read_rejects_bad_metadata() -> None:
    ds = to_hf_datasets(_sample())
    base = {"format": "trinity_core.experiences", "dtypes": {}}
    with pytest.raises(ValueError, match="format version 99"):
        from_hf_datasets(_with_metadata(ds, {**base, "version": 99}))
    with pytest.raises(ValueError, match=r"'os\.system', which is not allowed"):
        from_hf_datasets(_with_metadata(ds, {**base, "version": 1, "dtypes": {"tokens": "os.system"}}))
    with pytest.raises(ValueError, match="says 'tokens' is int64"):
        from_hf_datasets(_with_metadata(ds, {**base, "version": 1, "dtypes": {"tokens": "int64"}}))
    with pytest.raises(ValueError, match=r"lacks the columns \['info', 'metrics'\]"):
        from_hf_datasets(_with_metadata(ds.remove_columns(["info", "metrics"]), {**base, "version": 1}))


def test_read_plain_dataset() -> None:
    ds = datasets.Dataset.from_dict(
        {
            "tokens": [[1, 2, 3], [4, 5]],
            "prompt_length": [1, 1],
            "reward": [1.0, None],
            "logprobs": [[-0.5, -0.5], [-1.0]],
            "question": ["q1", "q2"],
        }
    )
    exps = from_hf_datasets(ds)
    assert [e.reward for e in exps] == [1.0, None]
    assert exps[0].tokens is not None
    assert exps[0].tokens.dtype == torch.int32
    assert exps[1].logprobs is not None
    assert exps[1].logprobs.tolist() == [-1.0]
    assert exps[0].experience_type == "single_turn"


def test_read_plain_dataset_missing_columns() -> None:
    ds = datasets.Dataset.from_dict({"text": ["a"], "tokens": [[1, 2]]})
    with pytest.raises(
        ValueError, match=r"lacks the columns \['prompt_length'\].*it has \['text', 'tokens'\]"
    ):
        from_hf_datasets(ds)


@pytest.mark.reference
def test_reads_reference_datasets() -> None:
    ref = import_reference("trinity.common.experience")
    exps = [
        ref.Experience(
            eid=ref.EID(batch=1, task=2, run=3), tokens=torch.tensor([1, 2, 3]), prompt_length=2, reward=0.5
        )
    ]
    back = from_hf_datasets(ref.to_hf_datasets(exps))
    assert back[0].eid.tid == "1/2"
    assert back[0].eid.suffix == exps[0].eid.suffix
    assert back[0].tokens is not None
    assert back[0].tokens.tolist() == [1, 2, 3]
    assert back[0].reward == 0.5


def test_to_hf_datasets_without_the_hf_extra_names_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from trinity_core.extras import MissingExtraError

    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'trinity-core\[hf\]'"):
        to_hf_datasets([Experience(tokens=torch.tensor([1, 2]), prompt_length=1)])
