"""A checkpoint out as a Hugging Face model folder: ``from_pretrained`` loads it, greedy outputs match.

:func:`export_checkpoint` rebuilds the run's policy and tokenizer from its saved ``config.yaml`` (as the
trainer does), loads a checkpoint's ``model.safetensors`` into it and writes ``save_pretrained`` of the
model, the tokenizer (with its chat template, when it has one) and a generation config into a new
folder. A LoRA run (``model.lora``) exports its adapter (PEFT's ``adapter_config.json`` and
``adapter_model.safetensors``, for ``PeftModel.from_pretrained`` on the base model), or with ``merge`` the
model with the adapter merged into its weights. The folder is written beside its destination and
renamed into place when complete, so an interrupted export leaves nothing half-written; an existing
folder is never touched unless ``overwrite`` is given.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["ExportError", "export_checkpoint", "find_checkpoint", "load_checkpoint_policy", "save_policy"]


class ExportError(RuntimeError):
    """The export cannot be made: no such run or checkpoint, or the destination exists."""


def find_checkpoint(run_dir: Path, step: int | None) -> Path:
    """The checkpoint of ``step`` in ``run_dir`` (default: the newest intact one).

    Raises:
        ExportError: ``run_dir`` is not a run, it has no intact checkpoint, or ``step`` has none.
    """
    from trinity_core.train.checkpoints import commit as ckpt
    from trinity_core.train.checkpoints.commit import CONFIG_FILE

    if not (run_dir / CONFIG_FILE).is_file():
        raise ExportError(f"{run_dir}: no {CONFIG_FILE} there; give the directory of a trinity train run")
    if step is None:
        try:
            found = ckpt.latest_checkpoint(run_dir, warn=lambda message: None)
        except ckpt.CheckpointError as exc:
            raise ExportError(str(exc)) from None
        if found is None:
            raise ExportError(f"{run_dir}: no checkpoint yet; train at least trainer.checkpoint_every steps")
        return found
    path = run_dir / "checkpoints" / ckpt.step_dir_name(step)
    if not path.is_dir():
        kept = sorted(p.name for p in (run_dir / "checkpoints").glob("step-*") if p.is_dir())
        raise ExportError(f"--step {step}: {run_dir} has no checkpoint of that step; checkpoints: {kept}")
    problem = ckpt.verify_checkpoint(path)
    if problem is not None:
        raise ExportError(f"checkpoint {path} is damaged: {problem}; export another --step")
    return path


def load_checkpoint_policy(run_dir: Path, checkpoint: Path) -> tuple[Any, Any, Any]:
    """``(model, tokenizer, config)``: the run's policy built as the trainer builds it, with the weights
    of ``checkpoint``."""
    from safetensors.torch import load_file

    from trinity_core.config import resolve_config
    from trinity_core.config.loading import read_yaml_mapping
    from trinity_core.train.checkpoints.commit import CONFIG_FILE
    from trinity_core.train.data.tasks import build_task
    from trinity_core.train.models.lora import add_lora
    from trinity_core.train.models.policy import load_policy

    config = resolve_config(read_yaml_mapping(run_dir / CONFIG_FILE))
    mcfg = config.model
    # The task only matters for the embedded default's character tokenizer (its alphabet).
    needs_alphabet = mcfg.model_path is None and mcfg.tokenizer_path is None
    alphabet = build_task(config).alphabet() if needs_alphabet else ""
    model, tokenizer = load_policy(
        mcfg.model_path, mcfg.tokenizer_path, mcfg.config, alphabet, seed=config.trainer.seed
    )
    if mcfg.lora is not None:  # the checkpoint holds the PEFT model's weights
        model = add_lora(model, mcfg.lora)
    missing, unexpected = model.load_state_dict(_policy_weights(checkpoint, load_file), strict=False)
    if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
        raise ExportError(
            f"{checkpoint}: the weights do not fit the model of {run_dir / CONFIG_FILE} (missing {missing}, "
            f"unexpected {unexpected}); was config.yaml edited after training?"
        )
    if missing:  # tied embeddings: the checkpoint leaves out lm_head, the tie restores it
        model.tie_weights()
    model.eval()
    return model, tokenizer, config


def _policy_weights(checkpoint: Path, load_file: Any) -> dict[str, Any]:
    """The policy's state dict in ``checkpoint`` (either layout: both name it ``model.safetensors``).

    Accelerate saves a prepared model without unwrapping it: a wrapper's ``module.`` prefix is taken off.

    Raises:
        ExportError: the checkpoint holds sharded FSDP weights (no ``model.safetensors``).
    """
    path = checkpoint / "model.safetensors"
    if not path.is_file():
        shards = sorted(p.name for p in checkpoint.glob("pytorch_model_fsdp*"))
        hint = (
            f"merge them first: accelerate merge-weights {checkpoint / shards[0]} OUT_DIR"
            if shards
            else "export another --step"
        )
        raise ExportError(f"{checkpoint} holds no model.safetensors ({shards or 'no weights'}); {hint}")
    state = load_file(str(path))
    prefix = "module."
    if state and all(k.startswith(prefix) for k in state):
        state = {k[len(prefix) :]: v for k, v in state.items()}
    return dict(state)


def _bos_first(tokenizer: Any) -> None:
    """Make ``tokenizer(text)`` start with BOS when the trainer's prompts do (see ``encode_prompts``), so
    that a user of the exported folder feeds the model what it was trained on."""
    from tokenizers import processors

    bos = tokenizer.bos_token_id
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if bos is None or backend is None or tokenizer("")["input_ids"][:1] == [bos]:
        return
    backend.post_processor = processors.TemplateProcessing(
        single=f"{tokenizer.bos_token} $A",
        pair=f"{tokenizer.bos_token} $A $B",
        special_tokens=[(tokenizer.bos_token, bos)],
    )


def save_policy(
    model: Any,
    tokenizer: Any,
    out_dir: str | os.PathLike[str],
    *,
    max_new_tokens: int | None,
    overwrite: bool,
) -> Path:
    """``save_pretrained`` of ``model``, ``tokenizer`` and a greedy generation config into ``out_dir``.

    Neither ``model`` nor ``tokenizer`` is changed (the trainer can call this mid-run). The folder is
    written beside ``out_dir`` and renamed into place when complete.

    Raises:
        ExportError: ``out_dir`` exists and ``overwrite`` is false.
    """
    from transformers import GenerationConfig

    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise ExportError(f"{out} exists; choose a new folder, or pass --overwrite to replace it")
    tokenizer = copy.deepcopy(tokenizer)
    _bos_first(tokenizer)
    # Decoder-only models generate after the prompt: left padding, as in the trainer. save_pretrained
    # writes the constructor's arguments, not the attribute the trainer set.
    tokenizer.init_kwargs["padding_side"] = tokenizer.padding_side
    generation = GenerationConfig(  # type: ignore[no-untyped-call]
        do_sample=False,
        max_new_tokens=max_new_tokens,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        with _quiet_progress():  # the trainer's own progress bar and messages are what the user reads
            model.save_pretrained(staging)
        generation.save_pretrained(staging)  # replaces the model's own generation_config.json
        tokenizer.save_pretrained(staging)
        if out.exists():  # overwrite: only now that the new folder is complete
            shutil.rmtree(out)
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


@contextlib.contextmanager
def _quiet_progress() -> Iterator[None]:
    """transformers' progress bars off (``save_pretrained`` shows one per shard), then as they were."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


def export_checkpoint(
    run_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    step: int | None = None,
    overwrite: bool = False,
    merge: bool = False,
) -> Path:
    """Write the policy of ``run_dir``'s checkpoint (``step``, default the newest) to ``out_dir``.

    The folder holds ``config.json``, the weights, ``generation_config.json`` (greedy, the run's
    response budget, its EOS and pad ids) and the tokenizer files; returns ``out_dir``.

    A LoRA run writes its adapter instead of the weights; with ``merge``, the merged model.

    Raises:
        ExportError: ``out_dir`` exists (without ``overwrite``), ``merge`` of a run without LoRA, or see
            :func:`find_checkpoint`.
    """
    run, out = Path(run_dir), Path(out_dir)
    if out.exists() and not overwrite:  # before the (slow) model load
        raise ExportError(f"{out} exists; choose a new folder, or pass --overwrite to replace it")
    checkpoint = find_checkpoint(run, step)
    model, tokenizer, config = load_checkpoint_policy(run, checkpoint)
    if merge:
        from trinity_core.train.models.lora import is_lora, merged

        if not is_lora(model):
            raise ExportError(
                f"--merge: {run} trained the full model (no model.lora), there is no adapter to merge; drop "
                "--merge"
            )
        model = merged(model)
    budget = config.rollout.max_new_tokens or _response_budget(config)
    return save_policy(model, tokenizer, out, max_new_tokens=budget, overwrite=overwrite)


def _response_budget(config: Any) -> int | None:
    """The trainer's default response budget (the task's), or None when the task cannot be built here."""
    from trinity_core.train.data.tasks import build_task

    try:
        return build_task(config).max_response_tokens()
    except Exception:  # e.g. the run's dataset moved: the budget is a default, not worth failing over
        return None
