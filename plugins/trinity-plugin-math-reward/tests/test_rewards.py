"""The reward functions, called the way the trainer calls them (TRL's keyword convention)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trinity_core import registry
from trinity_core.registry import PluginError
from trinity_core.train.data.rewards import combine_rewards, load_reward_fns, required_fields


def score(name: str, completions: list[str], args: dict[str, Any] | None = None, **columns: Any) -> list[Any]:
    (fn,) = load_reward_fns([name], {name: args} if args else {})
    return combine_rewards([fn], [1.0], [name], ["q"] * len(completions), completions, columns)


def test_gsm8k_compares_final_numbers() -> None:
    completions = ["48/2 = 24, 48+24 = 72\n#### 72", "so it is 1,000", "#### 71", "3.0", "no idea"]
    answers = ["... #### 72", "#### 1000", "#### 72", 3, "#### 5"]
    assert score("gsm8k", completions, answer=answers) == [1.0, 1.0, 0.0, 1.0, 0.0]
    # A reference without a number is not applicable; a truncated completion scores 0.
    assert score("gsm8k", ["1", "#### 72"], answer=["none", "#### 72"], truncated=[False, True]) == [
        None,
        0.0,
    ]
    assert required_fields(registry.resolve("reward_fn", "gsm8k")) == ["answer"]


def test_format_takes_its_pattern_from_the_reward_args() -> None:
    good = "<think>\n2+2 is 4\n</think>\n<answer>4</answer>\n"
    assert score("format", [good, "<answer>4</answer>", "4"]) == [1.0, 0.0, 0.0]
    assert score("format", ["\\boxed{4}", good], {"pattern": r".*\\boxed\{.+\}"}) == [1.0, 0.0]
    with pytest.raises(PluginError, match=r"pattern.*is not a regular expression"):
        load_reward_fns(["format"], {"format": {"pattern": "(unclosed"}})


@given(st.text(alphabet="abc 12\n+=", max_size=20), st.text(alphabet="abc 12\n+=", max_size=20))
def test_format_accepts_any_text_inside_the_tags(thought: str, answer: str) -> None:
    (fn,) = load_reward_fns(["format"], {})
    assert fn(completions=[f"<think>{thought}</think> <answer>{answer}</answer>"]) == [1.0]
    assert fn(completions=[f"{thought}<answer>{answer}</answer>"]) == [0.0]


def test_math_verify_accepts_equivalent_latex() -> None:
    completions = [
        "The answer is $\\boxed{\\frac{1}{2}}$",
        "so we get 0.5",
        "$\\frac{\\sqrt{2}}{2}$",
        "\\boxed{3}",
        "#### 72",
    ]
    answers = ["$\\frac{1}{2}$", "\\frac{1}{2}", "\\boxed{\\sqrt{2}/2}", "$4$", "Step by step... #### 72"]
    assert score("math_verify", completions, answer=answers) == [1.0, 1.0, 1.0, 0.0, 1.0]
    assert score("math_verify", ["1"], answer=["no math here"]) == [None]


@pytest.mark.parametrize(
    ("name", "completions", "columns"),
    [
        ("gsm8k", ["#### 72", "so 1,000", "71"], {"answer": ["#### 72", "#### 1000", "#### 72"]}),
        ("math_verify", ["\\boxed{\\frac{1}{2}}", "0.5", "$3$"], {"answer": ["0.5", "\\frac{1}{2}", "4"]}),
        ("format", ["<think>a</think><answer>1</answer>", "<answer>1</answer>", ""], {}),
    ],
)
def test_conversational_completions_score_as_their_text(
    name: str, completions: list[str], columns: dict[str, Any]
) -> None:
    """A messages_key dataset's rewards get TRL's conversational form: same scores as the strings."""
    if name == "math_verify":
        pytest.importorskip("math_verify")
    (fn,) = load_reward_fns([name], {})
    conversation = [[{"role": "user", "content": "q"}]] * len(completions)
    prompts = ["q"] * len(completions)
    as_text = combine_rewards([fn], [1.0], [name], prompts, completions, columns)
    as_chat = combine_rewards([fn], [1.0], [name], prompts, completions, columns, conversations=conversation)
    assert as_chat == as_text
    assert as_text[0] == 1.0
    assert as_text[2] == 0.0
