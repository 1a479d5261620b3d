"""Chat templates: rendering, ``model.chat_template``, ``Experience.messages``, bad templates."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from rollout_support import TINY_MODEL, random_rollout

from trinity_core.buffer.disk import DiskReader
from trinity_core.cli.main import main
from trinity_core.train import train
from trinity_core.train.data.prompts import (
    PromptRenderer,
    PromptRenderError,
    build_prompter,
    use_chat_template,
)
from trinity_core.train.explorer.experiences import rollout_batch, rollout_experiences
from trinity_core.train.models.policy import build_char_tokenizer

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
ROW = {
    "prompt": "2+3=",
    "prompt_messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3="}],
}


@pytest.fixture
def tokenizer() -> Any:
    tok = build_char_tokenizer("0123456789+=")
    tok.chat_template = CHATML
    return tok


def test_a_templated_prompt_is_the_conversation_with_the_generation_prompt(tokenizer: Any) -> None:
    renderer = PromptRenderer(tokenizer, templated=True)
    want = (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+3=<|im_end|>\n<|im_start|>assistant\n"
    )
    # A row without prompt_messages (a synthetic task) is the prompt as one user message.
    plain = "<|im_start|>user\n7+8=<|im_end|>\n<|im_start|>assistant\n"
    assert renderer.texts([ROW, {"prompt": "7+8="}]) == [want, plain]
    assert PromptRenderer(tokenizer, templated=False).texts([ROW]) == ["2+3="]


def test_messages_append_each_sampled_answer_to_its_rows_conversation(tokenizer: Any) -> None:
    renderer = PromptRenderer(tokenizer, templated=True)
    got = renderer.messages([ROW, {"prompt": "1+1="}], ["5", "4", "2", "3"], repeat=2)
    assert got is not None
    assert len(got) == 4
    assert got[1] == [*ROW["prompt_messages"], {"role": "assistant", "content": "4"}]
    assert got[2] == [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"}]
    assert PromptRenderer(tokenizer, templated=False).messages([ROW], ["5"], repeat=1) is None


def test_model_chat_template_setting(tokenizer: Any, tmp_path: Path) -> None:
    assert use_chat_template(tokenizer, None) is True  # the tokenizer's own
    assert use_chat_template(tokenizer, False) is False
    bare = build_char_tokenizer("0123456789+=")
    assert use_chat_template(bare, None) is False
    with pytest.raises(PromptRenderError, match=r"model.chat_template: true, but the tokenizer has no chat"):
        use_chat_template(bare, True)
    template = tmp_path / "template.jinja"
    template.write_text("{% for m in messages %}[{{ m['content'] }}]{% endfor %}", encoding="utf-8")
    assert use_chat_template(bare, str(template)) is True
    assert PromptRenderer(bare, templated=True).texts([ROW]) == ["[Be brief.][2+3=]"]
    with pytest.raises(PromptRenderError, match=r"cannot read the template file .*missing.jinja"):
        use_chat_template(bare, str(tmp_path / "missing.jinja"))


def test_a_template_that_fails_names_the_prompt(tokenizer: Any) -> None:
    tokenizer.chat_template = (
        "{% if messages[-1]['content'] == '7+8=' %}{{ raise_exception('no sums') }}{% endif %}x"
    )
    renderer = PromptRenderer(tokenizer, templated=True)
    assert renderer.texts([ROW]) == ["x"]
    with pytest.raises(PromptRenderError, match=r"fails on the prompt '7\+8=' \(.*no sums\)"):
        renderer.texts([ROW, {"prompt": "7+8="}])

    class OneRow:
        def eval_rows(self, n: int, seed: int) -> list[dict[str, str]]:
            return [{"prompt": "7+8="}]

    with pytest.raises(PromptRenderError):
        build_prompter(tokenizer, None, OneRow())  # checked before training


def test_rollout_experiences_keep_the_messages_of_the_responses_they_keep() -> None:
    rollout = random_rollout([2, 2, 3, 3], [1, 2, 1, 2], seed=0)
    messages = [[{"role": "assistant", "content": str(i)}] for i in range(4)]
    rewards = [1.0, None, 0.0, 1.0]
    exps = rollout_experiences(rollout, rewards, step=0, group_size=2, messages=messages)
    assert [e.messages for e in exps] == [messages[0], messages[2], messages[3]]
    batch = rollout_batch(rollout, rewards, step=0, group_size=2, messages=messages)
    assert [e.messages for e in batch.experiences] == [messages[0], messages[2], messages[3]]
    assert all(e.messages is None for e in rollout_experiences(rollout, rewards, step=0, group_size=2))


def _explore(tmp_path: Path, template: str, **model: Any) -> dict[str, Any]:
    file = tmp_path / "template.jinja"
    file.write_text(template, encoding="utf-8")
    return {
        "mode": "explore",
        "model": {**TINY_MODEL, "chat_template": str(file), **model},
        "tasks": {"eval_size": 0},
        "rollout": {"prompts_per_step": 2},
        "algorithm": {"repeat_times": 2},
        "trainer": {"total_steps": 1, "progress": False, "threads": 1, "trackers": []},
    }


def test_the_trainer_samples_after_the_templated_prompt_and_stores_the_conversation(tmp_path: Path) -> None:
    # "=" before each message: the char tokenizer of last_digit knows only digits, "+", "=" and "%".
    config = _explore(tmp_path, "{% for m in messages %}={{ m['content'] }}{% endfor %}")
    train(config, run_dir=tmp_path / "run")
    exps = asyncio.run(DiskReader(tmp_path / "run" / "experiences").read())
    assert len(exps) == 4
    tok = build_char_tokenizer("0123456789+=%")
    for exp in exps:
        assert exp.messages is not None
        user, answer = exp.messages
        prompt = tok.decode(exp.tokens[: exp.prompt_length].tolist())
        assert prompt == f"<bos>={user['content']}"  # BOS, then the rendered template
        assert answer["role"] == "assistant"
        response = tok.decode(exp.tokens[exp.prompt_length :].tolist())
        assert response.removesuffix("<eos>") == answer["content"]


def test_a_template_that_fails_stops_train_before_the_run_directory_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    config = _explore(tmp_path, "{{ raise_exception('this template is broken') }}")
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    assert main(["train", "--config", str(tmp_path / "run.yaml"), "--run-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "model.chat_template" in err
    assert "this template is broken" in err
    assert not (tmp_path / "run").exists()
