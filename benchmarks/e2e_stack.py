"""The stacks of ``bench_e2e.py`` and ``bench_generation.py``: model sizes and the real stack (a BPE
tokenizer, a Qwen2 folder and a jsonl dataset, made once under a cache folder)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

SIZES: dict[str, dict[str, Any]] = {
    "0.33M": {},
    "10M": {"hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8},
    "40M": {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 6, "num_attention_heads": 12},
}
"""Model configs over the default (hidden 128, 2 layers); key-value heads follow the attention heads."""
LR = 3e-4
REAL_VOCAB, REAL_ANSWER_TOKENS = 8192, 64


def model_config(size: str) -> dict[str, Any]:
    """The config overrides of ``size`` (key-value heads as many as attention heads)."""
    cfg = dict(SIZES[size])
    if "num_attention_heads" in cfg:
        cfg["num_key_value_heads"] = cfg["num_attention_heads"]
    return cfg


# ---------------------------------------------------------------------------------------- the real stack


def _words(n: int, rng: random.Random) -> list[str]:
    syll = [a + b for a in "bcdfghjklmnprstvwz" for b in "aeiou"] + ["an", "el", "or", "is", "um"]
    return ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(n)]


def build_real_stack(folder: Path, size: str) -> tuple[Path, Path]:
    """``(model folder, dataset jsonl)`` of the real stack at ``size`` under ``folder`` (made once)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config

    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    tok_dir, data = folder / "tokenizer", folder / "data.jsonl"
    rng = random.Random(0)
    vocab = _words(12000, rng)
    if not data.exists():
        rows = []
        for _ in range(2000):
            prompt = " ".join(rng.choice(vocab) for _ in range(rng.randint(3, 30)))
            answer = " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 30)))
            rows.append({"prompt": prompt + " =>", "answer": answer})
        data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    if not tok_dir.exists():
        corpus = [" ".join(rng.choice(vocab) for _ in range(20)) for _ in range(30000)]
        corpus += [json.loads(line)["prompt"] for line in data.read_text().splitlines()]
        core = Tokenizer(models.BPE())
        core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        core.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=REAL_VOCAB,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        core.train_from_iterator(corpus, trainer)
        tok = PreTrainedTokenizerFast(
            tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
        )
        tok.save_pretrained(tok_dir)
    model_dir = folder / f"model-{size}"
    if not model_dir.exists():
        tok = AutoTokenizer.from_pretrained(tok_dir)
        base = {
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
        }
        cfg = {**base, **model_config(size)}
        cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
        config = Qwen2Config(
            vocab_size=len(tok),
            max_position_embeddings=256,
            tie_word_embeddings=True,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            **cfg,
        )
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config).save_pretrained(model_dir)
        tok.save_pretrained(model_dir)
    return model_dir, data
