"""How an update's rows are cut (learner/micro_batches.py), with the expected cuts worked out by hand."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from trinity_core.train.learner.micro_batches import micro_batches, row_ranges, row_tokens


def test_row_ranges_cut_as_tensor_split_does() -> None:
    # 10 rows in 3 parts: 10 = 3 * 3 + 1, so the first range is one row longer.
    assert row_ranges(10, 3) == [slice(0, 4), slice(4, 7), slice(7, 10)]
    assert row_ranges(6, 3) == [slice(0, 2), slice(2, 4), slice(4, 6)]
    assert row_ranges(2, 3) == [slice(0, 1), slice(1, 2), slice(2, 2)]


@given(n=st.integers(0, 40), parts=st.integers(1, 9))
def test_row_ranges_are_the_pieces_of_tensor_split(n: int, parts: int) -> None:
    pieces = torch.tensor_split(torch.arange(n), parts)
    assert [list(range(n))[r] for r in row_ranges(n, parts)] == [p.tolist() for p in pieces]


def test_row_tokens_count_the_prompt_and_the_response_up_to_its_last_selected_token() -> None:
    action = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    # No attention mask: prompt width 3, plus the response up to the last selected token (none: 0).
    assert row_tokens(None, action, 3).tolist() == [5, 6, 3, 7]
    attention = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    assert row_tokens(attention, action, 3).tolist() == [4, 4, 5, 3]


def test_row_tokens_read_the_response_width_not_the_row_count() -> None:
    # 2 rows of 5 response positions (a non-square mask: the width is the last axis, not the rows).
    action = torch.tensor([[1, 0, 0, 1, 0], [0, 1, 0, 0, 0]])
    assert row_tokens(None, action, 2).tolist() == [2 + 4, 2 + 2]


def test_micro_batches_by_rows() -> None:
    assert micro_batches(slice(2, 9), 3) == [slice(2, 5), slice(5, 8), slice(8, 9)]
    assert micro_batches(slice(2, 5), 3) == [slice(2, 5)]
    assert micro_batches(slice(0, 4), None) == [slice(0, 4)]
    rows = torch.tensor([5, 1, 4, 2, 0])
    assert [p.tolist() for p in micro_batches(rows, 2)] == [[5, 1], [4, 2], [0]]  # type: ignore[union-attr]
    assert [p.tolist() for p in micro_batches(rows, 5)] == [[5, 1, 4, 2, 0]]  # type: ignore[union-attr]
    assert [p.tolist() for p in micro_batches(rows, None)] == [[5, 1, 4, 2, 0]]  # type: ignore[union-attr]
    # Token counts without a token budget cut by rows only.
    tokens = torch.tensor([9, 9, 9, 9, 9, 9, 9, 9, 9])
    assert micro_batches(slice(2, 9), 3, tokens=tokens, max_tokens=None) == [
        slice(2, 5),
        slice(5, 8),
        slice(8, 9),
    ]


def test_micro_batches_by_tokens_pack_in_order_and_a_long_row_is_alone() -> None:
    tokens = torch.tensor([3, 4, 2, 9, 1, 1, 5])
    # Budget 7: [3, 4] = 7, [2] (+9 would be 11), [9] alone (over the budget), [1, 1, 5] = 7.
    pieces = micro_batches(slice(0, 7), None, tokens=tokens, max_tokens=7)
    assert pieces == [slice(0, 2), slice(2, 3), slice(3, 4), slice(4, 7)]
    # At most 2 rows as well: [1, 1, 5] becomes [1, 1], [5].
    pieces = micro_batches(slice(0, 7), 2, tokens=tokens, max_tokens=7)
    assert pieces == [slice(0, 2), slice(2, 3), slice(3, 4), slice(4, 6), slice(6, 7)]
    # A range starting later keeps its offset; index rows keep their order.
    assert micro_batches(slice(4, 7), None, tokens=tokens, max_tokens=2) == [slice(4, 6), slice(6, 7)]
    rows = torch.tensor([6, 0, 1])
    assert [p.tolist() for p in micro_batches(rows, None, tokens=tokens, max_tokens=8)] == [[6, 0], [1]]  # type: ignore[union-attr]


@given(
    tokens=st.lists(st.integers(1, 12), min_size=1, max_size=30),
    budget=st.integers(1, 20),
    size=st.none() | st.integers(1, 6),
)
def test_token_pieces_cover_the_rows_in_order_within_their_limits(
    tokens: list[int], budget: int, size: int | None
) -> None:
    counts = torch.tensor(tokens)
    pieces = micro_batches(slice(0, len(tokens)), size, tokens=counts, max_tokens=budget)
    assert [i for p in pieces for i in range(p.start, p.stop)] == list(range(len(tokens)))  # type: ignore[union-attr]
    for p in pieces:
        rows = tokens[p]  # type: ignore[index]
        assert rows, "no empty piece"
        assert len(rows) == 1 or sum(rows) <= budget
        assert size is None or len(rows) <= size
