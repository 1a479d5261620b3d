"""The policy: any transformers causal LM, or the tiny embedded default built from a config.

The embedded default is fully offline: a character-level tokenizer built with ``tokenizers`` (one id per
character of the task's alphabet, plus ``<pad>``, ``<bos>``, ``<eos>``) wrapped in
``PreTrainedTokenizerFast``, and a randomly initialised Qwen2 of about 332K parameters (hidden 128,
intermediate 256, 2 layers, 4 heads, tied embeddings).
"""

from __future__ import annotations

import contextlib
import copy
import io
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from trinity_core.config import ResolvedConfig

__all__ = [
    "TINY_QWEN2",
    "ModelLoadError",
    "build_char_tokenizer",
    "frozen_copy",
    "load_policy",
    "needs_train_mode",
    "prepare_policy",
    "reference_policy",
    "tiny_model",
]

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"

TINY_QWEN2: dict[str, Any] = {
    "model_type": "qwen2",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 64,
    "tie_word_embeddings": True,
    "rope_theta": 10000.0,
}
"""Transformers config of the embedded default policy (vocabulary size comes from the tokenizer)."""


class ModelLoadError(ValueError):
    """The model or tokenizer named in the configuration cannot be loaded."""


def build_char_tokenizer(alphabet: Iterable[str]) -> Any:
    """A ``PreTrainedTokenizerFast`` with one token per character of ``alphabet``.

    Ids: ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, then the characters in sorted order. Unknown characters
    are an error at encode time (no ``<unk>``), so a task that emits a character outside its alphabet
    fails loudly.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set("".join(alphabet)))
    vocab = {PAD: 0, BOS: 1, EOS: 2}
    for ch in chars:
        vocab.setdefault(ch, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=None))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core, pad_token=PAD, bos_token=BOS, eos_token=EOS
    )
    tok.padding_side = "left"
    return tok


def tiny_model(
    vocab_size: int,
    overrides: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    dtype: torch.dtype | None = None,
) -> Any:
    """A randomly initialised causal LM from :data:`TINY_QWEN2` updated with ``overrides``.

    ``model_type`` in ``overrides`` picks another architecture (any that ``AutoConfig.for_model``
    knows). Initialisation uses ``seed`` and leaves the global RNG state as it was; the weights are
    made in ``dtype`` (unset: float32) directly, with no float32 copy on the way.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    settings = {**TINY_QWEN2, **dict(overrides or {})}
    model_type = settings.pop("model_type")
    settings.setdefault("vocab_size", vocab_size)
    settings.setdefault("pad_token_id", 0)
    settings.setdefault("bos_token_id", 1)
    settings.setdefault("eos_token_id", 2)
    try:
        config = AutoConfig.for_model(model_type, **settings)
    except (ValueError, TypeError) as exc:
        raise ModelLoadError(f"model.config: cannot build a {model_type!r} config: {exc}") from None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        kwargs = {} if dtype is None else {"dtype": dtype}
        model = AutoModelForCausalLM.from_config(config, **kwargs)  # type: ignore[no-untyped-call]
    return model


def load_policy(
    model_path: str | None,
    tokenizer_path: str | None,
    config_overrides: Mapping[str, Any] | None,
    alphabet: Iterable[str],
    *,
    seed: int,
    dtype: torch.dtype | None = None,
) -> tuple[Any, Any]:
    """``(model, tokenizer)``: from ``model_path`` via ``from_pretrained``, else the tiny default.

    ``dtype`` (see :func:`~trinity_core.train.models.dtype.weights_dtype`) is the weights' dtype; a
    ``dtype`` or ``torch_dtype`` in ``config_overrides`` (``from_pretrained``'s keywords) wins. Unset:
    the tiny default is float32 and ``from_pretrained`` keeps its own default.

    Raises:
        ModelLoadError: naming the path and what to do when loading fails.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if model_path is None:
        tok = (
            build_char_tokenizer(alphabet)
            if tokenizer_path is None
            else _load_tokenizer(AutoTokenizer, tokenizer_path)
        )
        return tiny_model(len(tok), config_overrides, seed=seed, dtype=dtype), tok
    tok = _load_tokenizer(AutoTokenizer, tokenizer_path or model_path)
    kwargs = dict(config_overrides or {})
    if dtype is not None and not {"dtype", "torch_dtype"} & kwargs.keys():
        kwargs["dtype"] = dtype  # loaded straight into it: an 8B base never exists in float32 here
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            model = AutoModelForCausalLM.from_pretrained(model_path, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(
            f"model.model_path: cannot load {model_path!r} as a causal LM ({exc}); give a local directory "
            "with config.json and weights, a cached hub id, or unset model_path for the tiny default"
        ) from None
    return model, tok


def prepare_policy(model: Any, config: ResolvedConfig) -> Any:
    """``model`` set up for memory as the config asks: gradient checkpointing, then LoRA adapters.

    Gradient checkpointing is transformers' (``use_reentrant=False``, which needs no input gradients and
    works under DDP, FSDP and with frozen base weights); the KV cache is off for the training forward
    (generation asks for it explicitly). Returns ``model`` or its PEFT wrapper.
    """
    if config.trainer.gradient_checkpointing:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x's name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        model.config.use_cache = False
    if config.model.lora is not None:
        from trinity_core.train.models.lora import add_lora

        model = add_lora(model, config.model.lora)
    return model


def frozen_copy(model: Any) -> Any:
    """A frozen deep copy of ``model`` in eval mode (the default reference model)."""
    ref = copy.deepcopy(model)
    ref.eval()
    ref.requires_grad_(False)
    return ref


def reference_policy(model: Any) -> Any:
    """The reference policy made from the initial ``model``: a LoRA model with its adapters disabled (no
    copy), otherwise a frozen copy."""
    from trinity_core.train.models.lora import AdapterDisabled, is_lora

    return AdapterDisabled(model) if is_lora(model) else frozen_copy(model)


def needs_train_mode(config: ResolvedConfig) -> bool:
    """Whether the update must run the policy in training mode: transformers checkpoints activations and
    PEFT applies LoRA dropout only there (otherwise the policy keeps the mode it has)."""
    lora = config.model.lora
    return config.trainer.gradient_checkpointing or (lora is not None and lora.dropout > 0)


def _load_tokenizer(auto: Any, path: str) -> Any:
    try:
        tok = auto.from_pretrained(path)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(
            f"model.tokenizer_path: cannot load a tokenizer from {path!r} ({exc}); give a local directory "
            "or a cached hub id"
        ) from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok
