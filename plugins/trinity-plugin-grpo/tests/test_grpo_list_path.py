"""The list path without a batch (``process`` without ``rank_penalty``) agrees with the batch path."""

from __future__ import annotations

import pytest
import torch
from grpo_support import interleave, make_group_exps
from torch import Tensor
from trinity_plugin_grpo.advantage import GRPOGroupedAdvantage

import trinity_core.components.advantage as advantage_module
from trinity_core.batch import ExperienceBatch, gather_group_index
from trinity_core.experience import EID, Experience

GROUPS = [[0, 1, 1], [0.7] * 5, [2.0], [3, 1], [1, 0, 0, 1]]
ORDER = [5, 0, 9, 1, 6, 2, 3, 10, 4, 7, 8, 11, 14, 12, 13]


class BatchPath(GRPOGroupedAdvantage):
    """Overrides ``process_batch`` (same result), which sends ``process`` down the batch path."""

    def process_batch(self, batch: ExperienceBatch) -> tuple[Tensor, dict, Tensor]:  # type: ignore[override]
        return super().process_batch(batch)


def _bits(t: Tensor) -> Tensor:
    return t.view(torch.int32)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"std_threshold": 0.1},
        {"std_cal_level": "batch"},
        {"std_threshold": 0.1, "duplicate_experiences": True},
    ],
)
@pytest.mark.parametrize("interleaved", [False, True])
def test_list_path_matches_batch_path(options: dict, interleaved: bool) -> None:
    masks = torch.rand(sum(map(len, GROUPS)), 5, generator=torch.Generator().manual_seed(0)) > 0.3
    runs = []
    for cls in (GRPOGroupedAdvantage, BatchPath):
        exps = make_group_exps(GROUPS, response_length=5)
        for e, mask in zip(exps, masks, strict=True):
            e.action_mask = mask.clone()
        if interleaved:
            exps = interleave(exps, ORDER)
        kept, metrics = cls(**options).process(exps)
        runs.append((exps, kept, metrics))
    (exps_a, kept_a, m_a), (exps_b, kept_b, m_b) = runs
    assert [e.eid.tid for e in kept_a] == [e.eid.tid for e in kept_b]
    for a, b in zip(exps_a, exps_b, strict=True):
        assert torch.equal(_bits(a.advantages), _bits(b.advantages))
        assert torch.equal(_bits(a.returns), _bits(b.returns))
    assert m_a.keys() == m_b.keys()
    for key in m_a:
        assert torch.equal(torch.as_tensor(m_a[key]), torch.as_tensor(m_b[key])), key


def test_returns_are_independent_of_advantages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(advantage_module, "_WRITE_BLOCK", 7)  # several blocks, one ragged
    exps = make_group_exps(GROUPS, response_length=3)
    exps[4].action_mask = torch.tensor([True, False])
    exps[4].tokens = exps[4].tokens[:-1]
    GRPOGroupedAdvantage().process(exps)
    for e in exps:
        assert e.advantages.dtype == torch.float32
        assert e.advantages.shape == e.action_mask.shape
        assert torch.equal(e.advantages[~e.action_mask], torch.zeros_like(e.advantages[~e.action_mask]))
        before = e.returns.clone()
        e.advantages.add_(1.0)
        assert torch.equal(e.returns, before)


def test_gather_group_index_matches_the_batch() -> None:
    eids = [
        EID(batch=b, task=t, run=r) for b, t, r in [(0, 1, 0), (0, 2, 0), (0, 1, 1), (1, 1, 0), ("0", 1, 2)]
    ]
    exps = [
        Experience(eid=e, tokens=torch.zeros(4, dtype=torch.int32), prompt_length=2, reward=1.0) for e in eids
    ]
    batch = ExperienceBatch.from_experiences(exps)
    for level in ("task", "run", "step"):
        index, keys = gather_group_index(exps, level)
        assert torch.equal(index, batch.group_index[level])
        assert keys == batch.group_keys[level]
    assert gather_group_index(exps)[1] == ["0/1", "0/2", "1/1"]  # batch "0" and 0 are one task
