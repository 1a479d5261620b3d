"""What a user has on disk, built offline: a GSM8K-style dataset, a chat tokenizer, a small chat model.

* :func:`word_problems`: "Tom has 3 apples. ..." problems whose answer is the number in the question
  (1 to 3), with GSM8K solutions (``... #### 3``); written as jsonl and parquet by :func:`write_dataset`.
* :func:`build_chat_model`: a byte-level BPE tokenizer trained with ``tokenizers`` on the problems,
  saved with a ChatML template (``<|im_end|>`` ends the assistant's turn and is the EOS), and a Qwen2 of
  hidden size 64 written with ``save_pretrained``. The model is first taught the answer *format* (a
  short supervised pass on ``#### d`` with a random digit ``d`` from 1 to 9), as a pretrained chat model
  knows how to answer but not what: its held-out reward starts near chance (1/9). Within 20 GRPO steps
  (a minute on one CPU thread) it learns which answers occur (held-out reward about 1/3); reading the
  number from the question takes a few hundred steps, more than a CI test affords.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PROMPT_TEMPLATE = "{question}\nPut the final answer after ####."
NAMES = ("Tom", "Ann", "Lea", "Sam", "Max", "Eva")
THINGS = ("apples", "pens", "cards", "books", "coins", "shells")


def word_problems(n: int, seed: int, top: int = 3) -> list[dict[str, str]]:
    """``n`` problems ``{"question", "answer"}``; the answer is the question's number, 1 to ``top``."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        name, thing, count = rng.choice(NAMES), rng.choice(THINGS), rng.randint(1, top)
        rows.append(
            {
                "question": f"{name} has {count} {thing}. How many {thing} does {name} have?",
                "answer": f"{name} has {count} {thing}.\n#### {count}",
            }
        )
    return rows


def write_dataset(folder: Path, rows: list[dict[str, str]]) -> tuple[Path, Path]:
    """``rows`` as ``problems.jsonl`` and ``problems.parquet`` in ``folder``."""
    import datasets

    jsonl, parquet = folder / "problems.jsonl", folder / "problems.parquet"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    datasets.Dataset.from_list(rows).to_parquet(str(parquet))
    return jsonl, parquet


def _tokenizer(texts: list[str]) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    core.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _teach_format(model: Any, tokenizer: Any, rows: list[dict[str, str]], steps: int, seed: int) -> None:
    """Supervised steps on "#### d<|im_end|>" after each templated prompt, ``d`` a random digit 1-9."""
    rng = random.Random(seed)
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": PROMPT_TEMPLATE.format(**r)}],
            tokenize=False,
            add_generation_prompt=True,
        )
        for r in rows
    ]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        batch = rng.sample(prompts, 16)
        answers = [f"#### {rng.randint(1, 9)}<|im_end|>" for _ in batch]
        prompt_ids = tokenizer(batch, add_special_tokens=False)["input_ids"]
        full = tokenizer([p + a for p, a in zip(batch, answers, strict=True)], add_special_tokens=False)
        enc = tokenizer.pad(full, padding=True, padding_side="right", return_tensors="pt")
        labels = enc["input_ids"].clone()
        labels[enc["attention_mask"] == 0] = -100
        for i, ids in enumerate(prompt_ids):
            labels[i, : len(ids)] = -100  # learn the answer only
        loss = model(**enc, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


def build_chat_model(folder: Path, rows: list[dict[str, str]], *, format_steps: int = 40) -> Path:
    """A tokenizer and a Qwen2 chat model, taught the answer format, saved in ``folder``."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    tokenizer = _tokenizer([PROMPT_TEMPLATE.format(**r) + r["answer"] for r in rows])
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config)
        _teach_format(model, tokenizer, rows, format_steps, seed=0)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run_config(model: Path, data: Path, **trainer: Any) -> dict[str, Any]:
    """The ``trinity train`` configuration of the real stack (GRPO, the ``gsm8k`` reward)."""
    return {
        "model": {"model_path": str(model)},
        "tasks": {
            "name": "dataset",
            "args": {
                "path": str(data),
                "split": "train[:240]",
                "eval_split": "train[240:]",
                "prompt_template": PROMPT_TEMPLATE,
                "answer_key": "answer",
            },
            "reward_fns": ["gsm8k"],
            "eval_size": 60,
            "eval_k": 4,
        },
        "rollout": {"prompts_per_step": 8, "max_new_tokens": 6},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 8},
        "trainer": {
            "total_steps": 20,
            "lr": 3e-3,
            "eval_every": 10,
            "checkpoint_every": 0,
            "progress": False,
            "threads": 1,
            "trackers": [],
            **trainer,
        },
    }
