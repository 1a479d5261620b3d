"""correct_bias: the formula of earlier Trinity-RFT releases by hand (corrected reward in the numerator)
and documented policies."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from polaris_support import RecordingWriter, make_exps, numpy_correct_bias, run_add
from trinity_plugin_polaris import CorrectBiasAddStrategy


def scores(exps: list) -> torch.Tensor:
    return torch.tensor([float(e.advantages[0]) for e in exps], dtype=torch.float64)


def test_seed_example() -> None:
    # doc 3.5: rewards 0..3, mean log-probs 0.1 i, penalty 0.2 -> r' = [0, 0.95, 1.80, 2.55]
    writer = RecordingWriter()
    strategy = CorrectBiasAddStrategy(writer, rank_penalty=0.2)
    count, metrics = run_add(strategy, make_exps([[0.0, 1.0, 2.0, 3.0]], [[0.0, 0.1, 0.2, 0.3]]))
    corrected = np.array([0.0, 0.95, 1.80, 2.55])
    expected = (corrected - corrected.mean()) / (corrected.std(ddof=1) + 1e-6)
    assert count == 4
    torch.testing.assert_close(scores(writer.calls[0]), torch.from_numpy(expected), rtol=1e-6, atol=1e-6)
    assert float(metrics["group_advantages/reward_mean/mean"]) == pytest.approx(corrected.mean())
    assert float(metrics["group_advantages/reward_std/mean"]) == pytest.approx(corrected.std(ddof=1))
    assert CorrectBiasAddStrategy.default_args() == {"epsilon": 1e-6, "rank_penalty": 0.25}


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[list[float]], list[list[float]]]:
    groups, lps = [], []
    for n in draw(st.lists(st.integers(2, 6), min_size=1, max_size=4)):
        groups.append(
            draw(st.lists(st.integers(-2, 3), min_size=n, max_size=n).map(lambda r: [float(x) for x in r]))
        )
        lps.append(draw(st.permutations([-0.1 * k for k in range(n)])))  # distinct: no ties
    return groups, lps


@settings(max_examples=40, deadline=None)
@given(data=batches(), penalty=st.sampled_from([0.0, 0.25, 0.7]))
def test_matches_the_seed_formula(data: tuple, penalty: float) -> None:
    groups, lps = data
    writer = RecordingWriter()
    run_add(CorrectBiasAddStrategy(writer, rank_penalty=penalty), make_exps(groups, lps))
    written = writer.calls[0]
    offset = 0
    for rewards, lp in zip(groups, lps, strict=True):
        got = scores(written[offset : offset + len(rewards)])
        corrected = np.asarray(rewards) * (1 - penalty * np.argsort(np.argsort(lp)) / len(rewards))
        if np.ptp(corrected) == 0:  # equal corrected rewards: exactly 0 here, noise / eps in earlier releases
            assert float(got.abs().max()) == 0.0
        else:
            want = torch.from_numpy(numpy_correct_bias(rewards, lp, penalty, 1e-6))
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        offset += len(rewards)


def test_singletons_get_zero_and_both_paths_agree() -> None:
    strategy = CorrectBiasAddStrategy(RecordingWriter())
    groups, lps = [[5.0], [0.0, 1.0, 1.0], [2.0, 2.0]], [[0.0], [0.0, -0.1, -0.2], [0.0, -0.1]]
    per_group, m1 = strategy.process_per_group(make_exps(groups, lps))
    vectorized, m2 = strategy.process_vectorized(make_exps(groups, lps))
    torch.testing.assert_close(scores(per_group), scores(vectorized))
    assert float(scores(vectorized)[0]) == 0.0  # the seed: 5 / (1 + eps)
    assert m1.keys() == m2.keys()
    for key in m1:
        torch.testing.assert_close(torch.as_tensor(m1[key], dtype=torch.float64), m2[key])
    assert float(m2["group_advantages/singleton_count/sum"]) == 1.0


def test_masked_mean_logprob_and_stable_ties() -> None:
    exps = make_exps([[1.0, 1.0, 1.0]], [[0.0, 0.0, 0.0]])
    # a masked-out token with a high log-prob must not change the rank (earlier releases averaged all tokens)
    exps[0].logprobs = torch.tensor([-1.0, -1.0, 50.0])
    exps[0].action_mask = torch.tensor([True, True, False])
    strategy = CorrectBiasAddStrategy(RecordingWriter(), rank_penalty=0.3)
    out, _ = strategy.process_vectorized(exps)
    # ranks by masked mean: exp0 = -1 -> 0; ties at 0.0 by batch order: exp1 -> 1, exp2 -> 2
    corrected = np.array([1.0, 1.0 - 0.3 / 3, 1.0 - 0.6 / 3])
    expected = (corrected - corrected.mean()) / (corrected.std(ddof=1) + 1e-6)
    torch.testing.assert_close(scores(out), torch.from_numpy(expected), rtol=1e-6, atol=1e-6)


def test_missing_logprobs_is_a_clear_error() -> None:
    exps = make_exps([[0.0, 1.0]])
    for exp in exps:
        exp.logprobs = None
    with pytest.raises(ValueError, match="has no logprobs"):
        run_add(CorrectBiasAddStrategy(RecordingWriter()), exps)
