"""The sync-free top-k selection and the token covariance shared by ``clip_cov`` and ``kl_cov``."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_peer_losses._covariance import selection_count, token_covariance, top_k_mask

from trinity_core.testing import count_host_syncs


def brute_force_top_k(scores: list[float], candidates: list[bool], k: int) -> set[int]:
    """Indices of the k largest candidate scores, ties to the earliest index (the documented rule)."""
    ranked = sorted((i for i, c in enumerate(candidates) if c), key=lambda i: (-scores[i], i))
    return set(ranked[:k])


@settings(max_examples=80, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(-3, 3), st.booleans()), min_size=1, max_size=40),
    k=st.integers(0, 45),
)
def test_top_k_matches_brute_force_with_ties(data: list[tuple[int, bool]], k: int) -> None:
    # Small integer scores make ties frequent; the selection must follow the earliest-index rule exactly.
    scores = [float(s) for s, _ in data]
    candidates = [c for _, c in data]
    got = top_k_mask(
        torch.tensor(scores, dtype=torch.float64),
        torch.tensor(candidates),
        torch.tensor(k, dtype=torch.int64),
    )
    assert set(torch.nonzero(got).flatten().tolist()) == brute_force_top_k(scores, candidates, k)


def test_top_k_on_a_matrix_breaks_ties_row_major() -> None:
    scores = torch.tensor([[1.0, 5.0, 5.0], [5.0, 2.0, 9.0]])
    candidates = torch.tensor([[True, True, True], [True, True, False]])
    got = top_k_mask(scores, candidates, torch.tensor(2))
    # 9.0 is not a candidate; the three 5.0 tie: (0, 1) and (0, 2) come first in row-major order.
    assert got.tolist() == [[False, True, True], [False, False, False]]


def test_top_k_is_deterministic_and_sync_free() -> None:
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 3, (64, 33), generator=g).double()
    candidates = torch.rand(64, 33, generator=g) < 0.7
    with count_host_syncs() as log:
        first = top_k_mask(scores, candidates, torch.tensor(100))
    assert len(log) == 0, log.describe()
    for _ in range(3):
        assert torch.equal(top_k_mask(scores, candidates, torch.tensor(100)), first)
    assert int(first.sum()) == 100


@pytest.mark.parametrize(
    ("n", "ratio", "k"), [(0, 0.5, 1), (10, 0.0002, 1), (10, 0.25, 2), (8, 0.25, 2), (7, 1.0, 7)]
)
def test_selection_count(n: int, ratio: float, k: int) -> None:
    # k = max(floor(ratio · n), 1)
    mask = torch.arange(12)[None, :] < n
    assert selection_count(mask, ratio).item() == k


def test_token_covariance_by_hand() -> None:
    # Selected: A = (2, 0, 0, −2), logπ = (−1, −3, −3, −5.5); means 0 and −3.125.
    # c = (2·2.125, 0, 0, (−2)(−2.375)) = (4.25, 0, 0, 4.75); the masked entry (A = 9, logπ = −9) is ignored.
    adv = torch.tensor([[2.0, 0.0, 0.0, -2.0, 9.0]])
    lp = torch.tensor([[-1.0, -3.0, -3.0, -5.5, -9.0]])
    mask = torch.tensor([[True, True, True, True, False]])
    got = token_covariance(adv, lp, mask)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, torch.tensor([[4.25, 0.0, 0.0, 4.75, 0.0]], dtype=torch.float64))


def test_token_covariance_of_an_empty_selection_is_zero() -> None:
    mask = torch.zeros(2, 3, dtype=torch.bool)
    assert torch.equal(
        token_covariance(torch.ones(2, 3), torch.ones(2, 3), mask), torch.zeros(2, 3, dtype=torch.float64)
    )
