"""The number parsers: hypothesis over numerals, separators and the text around them."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st
from trinity_plugin_math_reward import final_number, parse_number

WORDS = st.lists(
    st.sampled_from(["so", "the", "answer", "is", "apples", "$", "=", "\n", "total:"]), max_size=6
)
INTEGERS = st.integers(-(10**12), 10**12)
DECIMALS = st.decimals(-(10**6), 10**6, places=3, allow_nan=False, allow_infinity=False)


@given(INTEGERS)
def test_thousands_separators_do_not_change_the_value(n: int) -> None:
    assert parse_number(f"{n:,}") == parse_number(str(n)) == n


@given(DECIMALS, st.integers(0, 3))
def test_trailing_zeros_do_not_change_the_value(x: Decimal, zeros: int) -> None:
    text = f"{x:f}" + ("0" * zeros if "." in f"{x:f}" else "." + "0" * zeros if zeros else "")
    assert parse_number(text) == Fraction(x)


@given(INTEGERS, WORDS, WORDS, INTEGERS)
def test_the_number_after_the_marker_wins(n: int, before: list[str], after: list[str], other: int) -> None:
    text = f"{' '.join(before)} {other} #### {n:,} {' '.join(after)}"
    assert final_number(text) == n


@given(st.lists(INTEGERS, min_size=1, max_size=5), WORDS)
def test_without_a_marker_the_last_number_wins(numbers: list[int], words: list[str]) -> None:
    text = " ".join(f"{w} {n}" for w, n in zip(words + ["x"] * len(numbers), numbers, strict=False))
    assert final_number(text + ".") == numbers[-1]


@given(st.text())
def test_any_text_parses_without_raising(text: str) -> None:
    value = final_number(text)
    assert value is None or isinstance(value, Fraction)
    assert parse_number(text) is None or isinstance(parse_number(text), Fraction)


def test_examples() -> None:
    assert final_number("Natalia sold 48/2 = 24 clips.\n48+24 = 72\n#### 72") == 72
    assert final_number("It costs $1,000.") == 1000
    assert final_number("3.0") == final_number("3") == 3
    assert final_number("#### no number") is None
    assert final_number("nothing") is None
    assert parse_number("1 2") is None
    assert parse_number("") is None
