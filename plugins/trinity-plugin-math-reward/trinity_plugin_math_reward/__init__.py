"""Verifiable math rewards for trinity-core (namespace ``trinity_core.reward_fns``).

``gsm8k`` (the number after ``####``, or the last number, compared as numbers), ``math_verify`` (answer
equivalence with the ``math-verify`` library, LaTeX and ``\\boxed{}`` included) and ``format`` (a
configurable regular expression over the whole completion). Each follows TRL's calling convention:
``fn(prompts=..., completions=..., completion_ids=..., **columns) -> list[float | None]``.
"""

from __future__ import annotations

from trinity_plugin_math_reward.format_reward import FormatReward
from trinity_plugin_math_reward.gsm8k import gsm8k
from trinity_plugin_math_reward.numbers import final_number, parse_number
from trinity_plugin_math_reward.verify import math_verify

__all__ = ["FormatReward", "final_number", "gsm8k", "math_verify", "parse_number"]
