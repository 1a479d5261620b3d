"""``reward_model``: scores from a sequence-classification model written with ``save_pretrained``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from trinity_core.train.data.reward_model import RewardModel
from trinity_core.train.data.rewards import combine_rewards, load_reward_fns
from trinity_core.train.models.policy import ModelLoadError, build_char_tokenizer

TEMPLATE = "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }};{% endfor %}"


def build_reward_model(folder: Path, *, zero_head: bool = False, template: str | None = None) -> Path:
    """A one-logit Qwen2 sequence classifier over a character tokenizer, saved in ``folder``."""
    from transformers import AutoModelForSequenceClassification, Qwen2Config

    tokenizer = build_char_tokenizer("abcdefghijklmnopqrstuvwxyz0123456789+=:; ")
    tokenizer.padding_side = "right"
    if template is not None:
        tokenizer.chat_template = template
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(config)
    if zero_head:
        torch.nn.init.zeros_(model.score.weight)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_reward_model(tmp_path_factory.mktemp("rm") / "rm")


def _alone(fn: RewardModel, text: str) -> float:
    """The model's logit for ``text`` scored alone (no padding)."""
    ids = fn.tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        return float(fn.model(**ids).logits[0, 0])


def test_each_score_is_the_models_logit_of_prompt_and_completion(folder: Path) -> None:
    fn = RewardModel(path=str(folder), batch_size=2, device="cpu")
    prompts = ["1+1=", "what is two plus two", "3+4="]
    completions = ["2", "four", "a much longer completion than the others"]
    scores = fn(prompts=prompts, completions=completions)
    want = [_alone(fn, p + c) for p, c in zip(prompts, completions, strict=True)]
    assert scores == pytest.approx(want, abs=1e-5)  # padded batches of 2 and 1 give the unpadded logits
    assert RewardModel(path=str(folder), batch_size=16, device="cpu")(
        prompts=prompts, completions=completions
    ) == pytest.approx(scores, abs=1e-5)


def test_a_zero_head_scores_zero_through_the_trainers_reward_path(tmp_path: Path) -> None:
    path = build_reward_model(tmp_path / "zero", zero_head=True)
    (fn,) = load_reward_fns(["reward_model"], {"reward_model": {"path": str(path), "device": "cpu"}})
    got = combine_rewards(
        [fn], [2.0], ["reward_model"], ["1+1=", "2+2="], ["2", "5"], {"truncated": [False] * 2}
    )
    assert got == [0.0, 0.0]


def test_with_a_chat_template_the_conversation_is_scored(tmp_path: Path) -> None:
    fn: Any = RewardModel(path=str(build_reward_model(tmp_path / "chat", template=TEMPLATE)), device="cpu")
    messages = [[{"role": "user", "content": "1+1="}]]
    assert fn.texts(["1+1="], ["2"], messages) == ["u:1+1=;a:2;"]
    assert fn(prompts=["1+1="], completions=["2"], prompt_messages=messages) == pytest.approx(
        [_alone(fn, "u:1+1=;a:2;")], abs=1e-5
    )
    assert fn.texts(["1+1="], ["2"], None) == ["1+1=2"]  # no conversation: prompt and completion
    # TRL's conversational form (a messages_key dataset): the same conversation, the same score.
    conversational = combine_rewards([fn], [1.0], ["rm"], ["1+1="], ["2"], {}, conversations=messages)
    assert conversational == pytest.approx([_alone(fn, "u:1+1=;a:2;")], abs=1e-5)


def test_unusable_reward_models_are_one_clear_error(folder: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"reward_model.path: unset"):
        RewardModel()
    with pytest.raises(ModelLoadError, match=r"reward_model.path: cannot load .*nowhere"):
        RewardModel(path=str(tmp_path / "nowhere"))
    with pytest.raises(ModelLoadError, match=r"reward_model.label: 3, but .* has 1 label\(s\); use 0..0"):
        RewardModel(path=str(folder), label=3)
