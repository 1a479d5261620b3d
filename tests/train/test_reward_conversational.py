"""Conversational reward inputs, as TRL's ``GRPOTrainer`` passes them.

A ``messages_key`` dataset's prompts are conversations: reward functions get each prompt as its list of
messages and each completion as ``[{"role": "assistant", "content": text}]``. A ``prompt_key`` or
``prompt_template`` prompt stays a string, chat template or not (TRL keeps a string prompt a string).
The reward functions below are written as TRL's documentation writes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from rollout_support import TINY_MODEL

from trinity_core import registry
from trinity_core.cli.main import main
from trinity_core.train import exact_match
from trinity_core.train.data.rewards import (
    RewardError,
    combine_rewards,
    completion_text,
    prompt_conversations,
)

CONVERSATION = [{"role": "system", "content": "Add."}, {"role": "user", "content": "1+2="}]
SEEN: dict[str, list[Any]] = {}


def docs_length_reward(completions: list[list[dict[str, str]]], **kwargs: Any) -> list[float]:
    """TRL's documentation's conversational example: the content of the first (assistant) message."""
    contents = [completion[0]["content"] for completion in completions]
    SEEN.setdefault("prompts", []).extend(kwargs["prompts"])
    SEEN.setdefault("completions", []).extend(completions)
    return [float(len(content)) for content in contents]


@pytest.fixture(autouse=True)
def _datasets_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    SEEN.clear()


def test_conversations_turn_prompts_and_completions_into_trls_form() -> None:
    got = combine_rewards(
        [docs_length_reward, exact_match],
        [1.0, 10.0],
        ["docs", "exact"],
        ["Add.\n1+2=", "Add.\n1+2="],
        ["3", "33"],
        {"answer": ["3", "3"], "truncated": [False, False]},
        conversations=[CONVERSATION, CONVERSATION],
    )
    assert got == [1.0 + 10.0, 2.0 + 0.0]  # len("3") + 10 * match, len("33") + 10 * no match
    assert SEEN["prompts"] == [CONVERSATION, CONVERSATION]
    assert SEEN["completions"] == [
        [{"role": "assistant", "content": "3"}],
        [{"role": "assistant", "content": "33"}],
    ]


def test_without_conversations_the_same_functions_get_strings() -> None:
    def plain(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        assert prompts == ["1+2="]
        assert completions == ["3"]
        return [1.0]

    assert combine_rewards(
        [plain, exact_match], [1.0, 1.0], ["p", "e"], ["1+2="], ["3"], {"answer": ["3"]}
    ) == [2.0]


def test_exact_match_and_completion_text_read_both_forms() -> None:
    conversational = [[{"role": "assistant", "content": "7"}], [{"role": "assistant", "content": "8"}]]
    assert exact_match(prompts=[], completions=["7", "8"], answer=["7", 7]) == [1.0, 0.0]
    assert exact_match(prompts=[], completions=conversational, answer=["7", 7]) == [1.0, 0.0]
    assert completion_text([]) == ""


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_which_dataset_prompts_count_as_conversations(tmp_path: Path) -> None:
    rows = [
        {"m": [{"role": "user", "content": f"{i}+1="}], "q": f"{i}+1=", "answer": str(i + 1)}
        for i in range(3)
    ]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    chat = registry.create(
        "task", "dataset", {"path": str(data), "messages_key": "m", "system_prompt": "Add."}
    )
    plain = registry.create(
        "task", "dataset", {"path": str(data), "prompt_key": "q", "system_prompt": "Add."}
    )
    assert chat.conversational
    assert not plain.conversational
    picked = chat.eval_rows(2, 0)
    assert prompt_conversations(chat, picked, 2) == [
        [{"role": "system", "content": "Add."}, {"role": "user", "content": "1+1="}],
        [{"role": "system", "content": "Add."}, {"role": "user", "content": "1+1="}],
        [{"role": "system", "content": "Add."}, {"role": "user", "content": "2+1="}],
        [{"role": "system", "content": "Add."}, {"role": "user", "content": "2+1="}],
    ]
    assert prompt_conversations(plain, plain.eval_rows(2, 0), 2) is None


def test_trinity_train_and_eval_pass_conversations_to_a_trl_style_function(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    registry.register("reward_fn", "docs_length_reward", docs_length_reward)
    rows = [
        {"messages": [{"role": "user", "content": f"{a}+{b}="}], "answer": str(a + b)}
        for a in range(4)
        for b in range(3)
    ]
    data = write_jsonl(tmp_path / "sums.jsonl", rows)
    config = {
        "trainer": {"total_steps": 1, "checkpoint_every": 1, "progress": False, "threads": 1},
        "rollout": {"prompts_per_step": 2},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "kl_loss_fn": "none"},
        "tasks": {
            "name": "dataset",
            "eval_size": 2,
            "eval_k": 1,
            "reward_fns": ["docs_length_reward", "exact_match"],
            "args": {"path": str(data), "messages_key": "messages"},
        },
        "model": TINY_MODEL,
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    run = tmp_path / "run"
    assert main(["train", "--config", str(tmp_path / "c.yaml"), "--run-dir", str(run)]) == 0, (
        capsys.readouterr().err
    )
    conversations = [r["messages"] for r in rows]
    assert len(SEEN["prompts"]) >= 4  # 2 prompts x 2 responses, then the end-of-run evaluation
    assert all(p in conversations for p in SEEN["prompts"])
    assert all(
        isinstance(c, list)
        and len(c) == 1
        and c[0]["role"] == "assistant"
        and isinstance(c[0]["content"], str)
        for c in SEEN["completions"]
    )
    SEEN.clear()
    assert main(["eval", str(run)]) == 0, capsys.readouterr().err
    assert SEEN["prompts"]
    assert all(p in conversations for p in SEEN["prompts"])
    assert all(c[0]["role"] == "assistant" for c in SEEN["completions"])
    assert json.loads((run / "eval.json").read_text())["figures"]["eval/greedy_reward"] is not None


def test_a_function_written_for_the_other_form_is_told_which_form_it_got() -> None:
    with pytest.raises(
        RewardError, match=r"raised TypeError: .*; it was given strings \(conversations come only"
    ):
        combine_rewards([docs_length_reward], [1.0], ["docs"], ["1+2="], ["3"], {})

    def strings_only(completions: list[str], **kwargs: Any) -> list[float]:
        return [float(c.startswith("3")) for c in completions]

    with pytest.raises(
        RewardError, match=r"it was given conversations .* because tasks.args.messages_key is set"
    ):
        combine_rewards([strings_only], [1.0], ["s"], ["1+2="], ["3"], {}, conversations=[CONVERSATION])
