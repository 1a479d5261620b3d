"""Numbers in model output: ``1,000`` and ``1000`` are one number, so are ``3.0`` and ``3``.

Values are exact :class:`fractions.Fraction` objects, so equality is exact (no float rounding).
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["NUMBER", "final_number", "parse_number"]

NUMBER = re.compile(r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)")
"""A decimal numeral, thousands separators allowed: ``-1,234.5``, ``.5``, ``42``."""

MARKER = "####"
"""What precedes the final answer in GSM8K solutions (``... #### 72``)."""


def parse_number(text: str) -> Fraction | None:
    """The value of the numeral ``text`` (``"1,000"`` -> 1000, ``"3.0"`` -> 3); None if it is not one."""
    cleaned = text.strip().replace(",", "")
    if not cleaned or NUMBER.fullmatch(cleaned) is None:
        return None
    return Fraction(cleaned)


def final_number(text: str) -> Fraction | None:
    """The answer of a GSM8K-style text: the first number after the last ``####``, else the last number.

    A ``####`` with no number after it gives None: the marker says where the answer is, and it is not
    there.
    """
    if MARKER in text:
        found = NUMBER.search(text.rsplit(MARKER, 1)[1])
        return parse_number(found.group().rstrip(",")) if found else None
    numbers = NUMBER.findall(text)
    return parse_number(numbers[-1].rstrip(",")) if numbers else None
