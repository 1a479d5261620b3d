"""docs/training.md, "Your own model and data": its blocks run as written, on what a user has on disk.

The test builds what the section assumes: ``my-qwen2`` (a small Qwen2 written with ``save_pretrained``
from a config, with a byte-level BPE tokenizer trained with ``tokenizers`` on the problems and saved
with a chat template) and ``gsm8k.jsonl`` (word problems with ``#### N`` answers, the row shown in the
docs first). Then it runs the section's ``trinity`` commands and its Python block, in that folder.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from trinity_core.cli.main import main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "training.md"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def section_blocks() -> dict[str, list[str]]:
    """The fenced blocks of the section, by language."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## Your own model and data", 1)[1].split("\n## ", 1)[0]
    blocks: dict[str, list[str]] = {}
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S):
        blocks.setdefault(lang, []).append(body)
    return blocks


def problems(first: dict[str, str], n: int) -> list[dict[str, str]]:
    rows = [first]
    for i in range(n - 1):
        a, b = i % 7 + 1, i % 5 + 2
        rows.append(
            {
                "question": f"Ann has {a} pens and gets {b} more. How many pens does she have?",
                "answer": f"{a} + {b} = {a + b}\n#### {a + b}",
            }
        )
    return rows


def build_model_folder(folder: Path, texts: list[str]) -> None:
    """A Qwen2 of hidden size 32 and a byte-level BPE tokenizer (vocabulary 400) with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    core.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)


def test_the_section_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import datasets

    pytest.importorskip("trinity_plugin_math_reward", reason="the section uses trinity-plugin-math-reward")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    monkeypatch.chdir(tmp_path)
    blocks = section_blocks()

    (row,) = [json.loads(line) for line in blocks["json"][0].splitlines() if line.strip()]
    rows = problems(row, 12)
    Path("gsm8k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    config = yaml.safe_load(blocks["yaml"][0])
    build_model_folder(tmp_path / config["model"]["model_path"], [r["question"] + r["answer"] for r in rows])
    config["trainer"]["threads"] = 1  # the shared CI machine: one thread
    Path("gsm8k.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")

    commands = [shlex.split(line) for line in blocks["bash"][0].splitlines() if line.strip()]
    assert [c[:2] for c in commands] == [
        ["pip", "install"],
        ["trinity", "eval"],
        ["trinity", "train"],
        ["trinity", "eval"],
        ["trinity", "export"],
    ]
    for command in commands[1:]:
        assert main(command[1:]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "trained 2 steps" in out
    assert "exported to exported" in out
    for written in (Path("before.json"), Path("runs/gsm8k/eval.json")):
        figures = json.loads(written.read_text(encoding="utf-8"))["figures"]
        assert figures["eval/prompts"] == 2.0  # the eval_split's two rows
        assert set(figures) >= {"eval/greedy_reward", "eval/pass@1", "eval/pass@2"}
    logged = [json.loads(line) for line in Path("runs/gsm8k/metrics.jsonl").read_text().splitlines()]
    assert all("eval/greedy_reward" in row for row in logged)  # eval_every: 1

    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained("exported").chat_template == CHAT_TEMPLATE
    printed = io.StringIO()
    namespace: dict[str, Any] = {}
    with contextlib.redirect_stdout(printed):
        exec(compile(blocks["python"][0], "docs/training.md", "exec"), namespace)
    assert printed.getvalue().endswith("\n")  # the answer, whatever two steps taught the tiny model
    # The block feeds the exported model what the trainer fed it: the chat-templated prompt.
    from trinity_core.lm.sampling import encode_prompts
    from trinity_core.train.data.prompts import PromptRenderer

    tokenizer, messages = namespace["tokenizer"], namespace["messages"]
    texts = PromptRenderer(tokenizer, templated=True).texts([{"prompt": "", "prompt_messages": messages}])
    trainer_ids = encode_prompts(tokenizer, texts, torch.device("cpu"))[0]
    assert namespace["ids"]["input_ids"].tolist() == trainer_ids.tolist()
    assert texts[0].endswith("<|im_start|>assistant\n")


def test_the_reward_function_blocks_work_in_the_form_the_dataset_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``my_rewards.py`` as written: ``answer_length`` on strings, ``has_final_answer`` on the
    conversations a ``messages_key`` dataset (the section's ``chat.jsonl`` row) gives; the entry points
    name them."""
    import tomllib

    import datasets

    from trinity_core import registry
    from trinity_core.train.data.rewards import combine_rewards, prompt_conversations, required_fields

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    blocks = section_blocks()
    namespace: dict[str, Any] = {}
    exec(compile(blocks["python"][1], "my_rewards.py", "exec"), namespace)
    points = tomllib.loads(blocks["toml"][0])["project"]["entry-points"]["trinity_core.reward_fns"]
    assert points == {name: f"my_rewards:{name}" for name in ("answer_length", "has_final_answer")}
    assert required_fields(namespace["has_final_answer"]) == ["answer"]

    (row,) = [json.loads(line) for line in blocks["json"][1].splitlines() if line.strip()]
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps(row) + "\n", encoding="utf-8")
    task = registry.create("task", "dataset", {"path": str(data), "messages_key": "messages"})
    rows = task.eval_rows(1, 0)
    got = combine_rewards(
        [namespace["has_final_answer"]],
        [1.0],
        ["has_final_answer"],
        [rows[0]["prompt"]] * 2,
        ["3 + 4 = 7\n#### 7", "#### 8"],
        {"answer": [rows[0]["answer"]] * 2},
        conversations=prompt_conversations(task, rows, 2),
    )
    assert got[0] == 1.0
    assert got[1] == 0.0
    assert namespace["answer_length"](completions=["7", "x" * 300]) == [1.0, 0.0]
