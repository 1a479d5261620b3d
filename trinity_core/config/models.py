"""pydantic models of the run configuration (structure only; components are checked in resolution).

Every section forbids unknown keys. Sections other than ``algorithm`` are placeholders the trainer
extends: add fields to the section model (with a default and a description). The top-level ``mode``
says whether a run samples rollouts and trains on them (``both``, paced by the ``synchronizer``
section), only samples them into a disk buffer (``explore``), or trains on stored experiences only
(``train``, reading the ``data`` section).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, Field, field_validator

from trinity_core.components import LossAggMode  # one definition, shared with the loss components
from trinity_core.config.base import Section
from trinity_core.config.buffer_config import BufferConfig, OperatorEntry
from trinity_core.config.ranges import MAX_SEED, MAX_THREADS, MIN_TEMPERATURE, Beta
from trinity_core.config.sections import CriticConfig, DataConfig, LoraSettings, SynchronizerConfig
from trinity_core.config.tasks_section import TasksConfig

__all__ = [
    "COMPONENT_KEYS",
    "RUN_MODES",
    "AlgorithmConfig",
    "BufferConfig",
    "CriticConfig",
    "DataConfig",
    "LoraSettings",
    "LossAggMode",
    "ModelConfig",
    "RolloutConfig",
    "RunConfig",
    "RunMode",
    "Section",
    "SynchronizerConfig",
    "TasksConfig",
    "TrainerConfig",
]

COMPONENT_KEYS: dict[str, str] = {
    "advantage_fn": "advantage_fn",
    "policy_loss_fn": "policy_loss",
    "kl_penalty_fn": "kl_fn",
    "kl_loss_fn": "kl_fn",
    "entropy_loss_fn": "entropy_loss",
    "add_strategy": "add_strategy",
    "value_loss_fn": "value_loss",
}
"""Config key of each algorithm component -> its registry kind; its args live under ``<key>_args``."""

RunMode = Literal["both", "async", "explore", "train"]
"""What a run does: ``both`` samples rollouts and trains on them (reinforcement fine-tuning); ``async``
does the same with the explorer and the learner in two processes; ``explore``
samples rollouts into a disk buffer and trains nothing (a later ``train`` run reads it); ``train``
samples nothing and trains on stored experiences (``data.experiences``), as SFT, CPT and DPO do."""
RUN_MODES: tuple[str, ...] = ("both", "async", "explore", "train")
"""The values of :data:`RunMode`."""


def _name(what: str) -> Any:
    return Field(default=None, description=f"Registered name of the {what}; unset: the preset's choice.")


def _args(what: str) -> Any:
    return Field(
        default=None,
        description=f"Arguments of the {what}, merged per key over the preset's and component's defaults.",
    )


class AlgorithmConfig(Section):
    """The ``algorithm`` section as the user wrote it: ``None`` means "not set, use the preset"."""

    algorithm_type: str = Field(default="grpo", description="Algorithm preset (kind 'algorithm').")
    repeat_times: int | None = Field(
        default=None, ge=1, description="Responses sampled per task (group size)."
    )
    advantage_fn: str | None = _name("advantage function")
    advantage_fn_args: dict[str, Any] | None = _args("advantage function")
    policy_loss_fn: str | None = _name("policy loss")
    policy_loss_fn_args: dict[str, Any] | None = _args("policy loss")
    kl_penalty_fn: str | None = _name("KL penalty (applied to rewards)")
    kl_penalty_fn_args: dict[str, Any] | None = _args("KL penalty")
    kl_loss_fn: str | None = _name("KL loss (added to the loss)")
    kl_loss_fn_args: dict[str, Any] | None = _args("KL loss")
    entropy_loss_fn: str | None = _name("entropy loss")
    entropy_loss_fn_args: dict[str, Any] | None = _args("entropy loss")
    add_strategy: str | None = _name("add strategy")
    add_strategy_args: dict[str, Any] | None = _args("add strategy")
    value_loss_fn: str | None = _name("critic's value loss (presets with use_critic; default clipped)")
    value_loss_fn_args: dict[str, Any] | None = _args("value loss")
    loss_agg_mode: LossAggMode | None = Field(
        default=None,
        description="Loss aggregation for every component that has a loss_agg_mode argument; only when set.",
    )


class ModelConfig(Section):
    """The policy model and its tokenizer (``trinity train``)."""

    model_path: str | None = Field(
        default=None,
        description=(
            "Hugging Face model id or local directory, loaded with AutoModelForCausalLM.from_pretrained; "
            "unset: a tiny Qwen2 built from a config (offline)."
        ),
    )
    tokenizer_path: str | None = Field(
        default=None,
        description="Tokenizer id or directory; unset: model_path's, or a character-level tokenizer.",
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Without model_path: transformers config keys over the tiny default (model_type, hidden_size, "
            "num_hidden_layers, ...). With model_path: keyword arguments of from_pretrained."
        ),
    )
    ref_model_path: str | None = Field(
        default=None,
        description="Reference model for KL; unset: a frozen copy of the initial policy (with model.lora: "
        "the policy with its adapters disabled, no copy).",
    )
    lora: LoraSettings | None = Field(
        default=None, description="Train LoRA adapters instead of the full model; unset: full fine-tuning."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto",
        description="dtype the policy's weights are loaded in (TRL's torch_dtype). auto: with model.lora "
        "and trainer.mixed_precision bf16/fp16, the frozen base in that dtype (adapters and their optimizer "
        "state stay float32); otherwise float32. Low precision needs model.lora; float16 needs CUDA.",
    )
    critic_path: str | None = Field(
        default=None,
        description=(
            "Critic of presets with use_critic: a local HF model loaded with "
            "AutoModelForTokenClassification (num_labels=1); unset: the policy's architecture and initial "
            "weights with a scalar value head."
        ),
    )
    chat_template: bool | str | None = Field(
        default=None,
        description=(
            "Render prompts with a chat template (apply_chat_template, add_generation_prompt): unset: the "
            "tokenizer's own when it has one; a path: a Jinja template file; true: required; false: off."
        ),
    )
    teacher_path: str | None = Field(
        default=None,
        description=(
            "Teacher for distillation (on_policy_distill, jsd): a local Hugging Face model folder with the "
            "policy's vocabulary, e.g. the model/ folder of an SFT run; its log-probs of the sampled tokens "
            "become the batch column teacher_logprobs."
        ),
    )


class RolloutConfig(Section):
    """Sampling of responses (the group size is algorithm.repeat_times)."""

    prompts_per_step: int = Field(
        default=16, ge=1, description="Prompts (tasks) sampled per step, all ranks together."
    )
    temperature: float = Field(
        default=1.0,
        ge=MIN_TEMPERATURE,
        description=f"Sampling temperature, at least {MIN_TEMPERATURE:g}.",
    )
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling threshold (1: off).")
    top_k: int = Field(default=0, ge=0, description="Top-k sampling (0: off).")
    min_new_tokens: int = Field(
        default=1,
        ge=0,
        description="End-of-sequence is never sampled before this many tokens of a response (of each turn); "
        "the learner's log-probs and entropy leave it out there too.",
    )
    max_new_tokens: int | None = Field(
        default=None, ge=1, description="Longest response, in tokens; unset: the task's answer budget."
    )
    workflow: str = Field(
        default="single_turn",
        description="Workflow that turns a task into experiences (kind 'workflow'); see docs/workflows.md.",
    )
    workflow_args: dict[str, Any] = Field(default_factory=dict, description="Arguments of the workflow.")
    workflow_max_calls: int = Field(
        default=64, ge=1, description="Model calls one episode may make; one more fails the episode."
    )
    experience_pipeline: list[OperatorEntry] = Field(
        default_factory=list,
        description="Experience operators run in order on each step's experiences before the advantage "
        "(names or {name, args}); the trinity_process_experiences hooks run first unless 'hooks' is listed.",
    )


class TrainerConfig(Section):
    """The optimisation loop, devices, logging and checkpoints."""

    total_steps: int = Field(
        default=800, ge=1, description="Training steps (an update each; in mode both also a rollout)."
    )
    lr: float = Field(default=3e-4, gt=0, description="Peak learning rate.")
    seed: int = Field(
        default=0,
        ge=0,
        le=MAX_SEED,
        description="Random seed (model init, sampling, tasks), 0 to 2**32 - 1.",
    )
    optimizer: Literal["adamw", "adam", "sgd"] = Field(default="adamw", description="Optimizer.")
    weight_decay: float = Field(default=0.0, ge=0, description="Weight decay.")
    betas: tuple[Beta, Beta] = Field(
        default=(0.9, 0.999), description="Adam betas (decay rates of the moment estimates), each in [0, 1)."
    )
    lr_scheduler: Literal["constant", "linear", "cosine"] = Field(
        default="constant", description="Schedule after warm-up (linear / cosine decay to 0 at total_steps)."
    )
    warmup_steps: int = Field(default=0, ge=0, description="Linear warm-up steps.")
    grad_clip: float | None = Field(
        default=1.0, gt=0, description="Max global gradient norm; None: no clipping."
    )
    minibatches: int = Field(
        default=1,
        ge=1,
        description="Optimizer steps per training step (the step's batch split in this many).",
    )
    epochs: int = Field(default=1, ge=1, description="Passes over the step's batch (PPO epochs).")
    micro_batch_size: int | None = Field(
        default=None,
        ge=1,
        description="Rows per forward/backward (gradient accumulation); unset: whole minibatch.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="auto: CUDA when available, else CPU."
    )
    mixed_precision: Literal["no", "bf16", "fp16"] = Field(
        default="no",
        validation_alias=AliasChoices("mixed_precision", "precision"),
        description="Accelerate's mixed precision (autocast; weights stay float32, log-probs and loss "
        "statistics are float32); fp16 needs CUDA. Also read as the older key trainer.precision.",
    )

    @field_validator("mixed_precision", mode="before")
    @classmethod
    def _bare_no(cls, value: Any) -> Any:
        """YAML 1.1 reads a bare ``no`` (``--set trainer.mixed_precision=no``) as false: it means "no"."""
        return "no" if value is False else value

    gradient_checkpointing: bool = Field(
        default=False,
        description="Recompute activations in the backward pass (transformers', non-reentrant).",
    )
    max_tokens_per_micro_batch: int | None = Field(
        default=None,
        ge=1,
        description="Token budget of a forward/backward: consecutive rows packed while their tokens fit "
        "(a longer row goes alone); combined with micro_batch_size, both limits hold. Unset: off.",
    )
    share_prompts: bool = Field(
        default=True,
        description="Run a prompt that several rows of a micro-batch share through the model once and "
        "their responses on its key-value cache (the same log-probs and gradients up to float rounding, "
        "less work with several responses per prompt); false: every row whole. Off by itself under "
        "FSDP, DeepSpeed and gradient checkpointing.",
    )
    balance_batch: bool = Field(
        default=True,
        description="With several processes and a preset whose can_balance_batch is true, give every "
        "rank about the same number of tokens (whole task groups move between ranks).",
    )
    threads: int | None = Field(
        default=None, ge=1, le=MAX_THREADS, description="torch CPU threads; unset: torch's choice."
    )
    run_dir: str | None = Field(
        default=None, description="Run directory; unset: runs/<task>-<algorithm>-<timestamp>."
    )
    checkpoint_every: int = Field(
        default=200, ge=0, description="Checkpoint every N steps (0: only at the end)."
    )
    keep_checkpoints: int = Field(default=2, ge=1, description="Checkpoints kept (oldest removed).")
    export_every: int = Field(
        default=0, ge=0, description="Write the policy to <run_dir>/model every N steps (0: only at the end)."
    )
    eval_every: int = Field(
        default=0,
        ge=0,
        description="Evaluate on tasks.eval_size held-out prompts every N steps (greedy, pass@k); 0: never.",
    )
    trackers: list[str] | Literal["auto"] = Field(
        default="auto",
        description="Accelerate trackers (tensorboard, wandb, ...); auto: tensorboard if installed.",
    )
    progress: bool = Field(default=True, description="Show a progress bar on stderr.")
    progress_metrics: list[str] = Field(
        default_factory=list,
        description="Metric keys shown on the progress line and in the end summary after the standard "
        "figures (reward, len, entropy, kl, clip, gnorm), e.g. [actor/unmasked_frac]: a policy loss's "
        "metric x is actor/x (docs/training.md, Metrics); default: the standard figures only.",
    )

    @field_validator("progress_metrics")
    @classmethod
    def _metric_keys(cls, keys: list[str]) -> list[str]:
        """Each key once, not blank, as written in metrics.jsonl (``section/name``)."""
        blank = [k for k in keys if not k.strip() or k != k.strip()]
        if blank:
            raise ValueError(f"metric keys {blank!r} are blank or have spaces around them")
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ValueError(f"metric keys {twice} are given more than once")
        return keys

    log_samples_every: int = Field(
        default=100,
        ge=0,
        description="Every N steps a few prompt/completion/reward rows to samples.jsonl and the trackers "
        "(0: never).",
    )


class RunConfig(Section):
    """A whole run as written by the user (YAML or dict), before presets and components are applied."""

    mode: RunMode = Field(
        default="both",
        description=(
            "both: rollouts and training (RL); async: the same, explorer and learner in two processes; "
            "explore: rollouts only, into a disk buffer "
            "(data.experiences); train: training only, on data.experiences."
        ),
    )
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    synchronizer: SynchronizerConfig = Field(default_factory=SynchronizerConfig)
    critic: CriticConfig = Field(default_factory=CriticConfig)
    buffer: BufferConfig = Field(default_factory=BufferConfig)

    @field_validator("tasks", mode="before")
    @classmethod
    def _task_list(cls, value: Any) -> Any:
        """``tasks: [{name: ..., weight: ...}, ...]`` is ``tasks: {mix: [...]}``."""
        return {"mix": value} if isinstance(value, list) else value
