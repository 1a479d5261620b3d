"""gdpo: golden values worked out by hand from the formula (GRPO per component, weighted sum, whitening)."""

from __future__ import annotations

import math

import pytest
import torch
from trinity_plugin_grpo.gdpo import GDPOAdvantage

from trinity_core.batch import ExperienceBatch
from trinity_core.experience import EID, Experience

EPS = 1e-6


def _batch(lengths: list[int], fmt: list[float], acc: list[float]) -> ExperienceBatch:
    exps = [
        Experience(
            eid=EID(batch=0, task=i // 2, run=i % 2),
            tokens=list(range(2 + n)),
            prompt_length=2,
            reward=f + a,
            info={"fmt": f, "acc": a},
        )
        for i, (n, f, a) in enumerate(zip(lengths, fmt, acc, strict=True))
    ]
    return ExperienceBatch.from_experiences(exps)


def test_gdpo_golden() -> None:
    # Groups {0, 1}, {2, 3}. fmt = (1, 0 | 1, 1), acc = (1, 1 | 0, 1); unbiased std of (1, 0) = sqrt(.5).
    # A_fmt = (u, -u | 0, 0), A_acc = (0, 0 | -u, u) with u = 0.5 / (sqrt(0.5) + eps).
    # Weights (1, 2): S = (u, -u, -2u, 2u). Lengths (2, 1, 1, 1): token mean = (2u - u - 2u + 2u)/5 = u/5,
    # unbiased token variance = (2(u - u/5)^2 + (-u - u/5)^2 + (-2u - u/5)^2 + (2u - u/5)^2) / 4.
    u = 0.5 / (math.sqrt(0.5) + EPS)
    s = [u, -u, -2 * u, 2 * u]
    tokens = [s[0], s[0], s[1], s[2], s[3]]
    mean = sum(tokens) / 5
    var = sum((x - mean) ** 2 for x in tokens) / 4
    a = [(x - mean) / math.sqrt(var + 1e-8) for x in s]
    batch = _batch([2, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 1])
    GDPOAdvantage(gdpo_reward_keys=["fmt", "acc"], gdpo_reward_weights=[1.0, 2.0])(batch)
    expected = torch.tensor([[a[0], a[0]], [a[1], 0.0], [a[2], 0.0], [a[3], 0.0]])
    torch.testing.assert_close(batch.advantages, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(batch.returns, expected, rtol=1e-5, atol=1e-6)


def test_gdpo_without_keys_is_grpo_then_whitening() -> None:
    # Rewards fmt + acc = (2, 1 | 1, 2) -> GRPO (v, -v | -v, v), v = 0.5 / (sqrt(0.5) + eps); equal
    # lengths: mean 0, unbiased variance 4v^2/3 -> A = +-v / sqrt(4v^2/3 + 1e-8).
    v = 0.5 / (math.sqrt(0.5) + EPS)
    a = v / math.sqrt(4 * v * v / 3 + 1e-8)
    batch = _batch([1, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 1])
    GDPOAdvantage()(batch)
    torch.testing.assert_close(batch.advantages[:, 0], torch.tensor([a, -a, -a, a]), rtol=1e-5, atol=1e-6)


def test_gdpo_reads_extras_first_and_names_missing_components() -> None:
    batch = _batch([1, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 1])
    batch.extras["fmt"] = torch.tensor([0.0, 1.0, 1.0, 1.0])  # overrides info: sign of group 0 flips
    GDPOAdvantage(gdpo_reward_keys=["fmt"])(batch)
    assert float(batch.advantages[0, 0]) < 0 < float(batch.advantages[1, 0])
    with pytest.raises(KeyError, match="'speed'"):
        GDPOAdvantage(gdpo_reward_keys=["speed"])(_batch([1, 1], [1, 0], [0, 0]))


def test_gdpo_weights_must_match_keys() -> None:
    with pytest.raises(ValueError, match="2 weights for 1 reward components"):
        GDPOAdvantage(gdpo_reward_keys=["fmt"], gdpo_reward_weights=[1.0, 2.0])
