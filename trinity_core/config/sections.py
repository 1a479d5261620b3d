"""Config sections of the parts around the policy's update: its data, pacing, critic and adapters.

``data`` (stored experiences of mode ``train`` and expert data), ``synchronizer`` (how the explorer and
the learner are paced and exchange weights), ``critic`` (presets with ``use_critic``) and ``model.lora``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from trinity_core.config.base import Section
from trinity_core.config.ranges import MAX_THREADS

__all__ = ["CriticConfig", "DataConfig", "LoraSettings", "SynchronizerConfig"]


class LoraSettings(Section):
    """LoRA adapters through PEFT (``pip install 'trinity-core[lora]'``): only the adapters train."""

    r: int = Field(default=8, ge=1, description="Rank of the adapter matrices.")
    alpha: int = Field(default=16, ge=1, description="Scaling numerator (the update is alpha / r).")
    dropout: float = Field(default=0.0, ge=0, lt=1, description="Dropout on the adapter's input.")
    target_modules: list[str] | Literal["all-linear"] = Field(
        default="all-linear",
        description="Module names (suffixes) that get adapters, e.g. [q_proj, v_proj]; all-linear: every "
        "linear layer but the output head.",
    )


class CriticConfig(Section):
    """The critic's optimisation (presets with ``use_critic``); the rest follows ``trainer``.

    The critic uses ``trainer``'s optimizer kind, betas, weight decay, epochs, minibatches and
    micro-batch size, and a constant learning rate.
    """

    lr: float | None = Field(default=None, gt=0, description="Critic learning rate; unset: trainer.lr.")
    grad_clip: float | None = Field(
        default=1.0, gt=0, description="Max global gradient norm of the critic; None: no clipping."
    )
    warmup_steps: int = Field(
        default=0, ge=0, description="First steps in which only the critic learns (the policy is frozen)."
    )


class DataConfig(Section):
    """Stored experiences a run in mode ``train`` learns from, and expert data mode ``both`` mixes in.

    One step takes ``batch_size`` items (a DPO pair is one item) from a shuffled pass over the data; an
    epoch is ``len(data) // batch_size`` steps (the incomplete last batch of a pass is left out, and the
    next pass is shuffled anew). The run lasts ``trainer.total_steps`` steps, or fewer when ``epochs``
    passes end first.
    """

    experiences: str | None = Field(
        default=None,
        description=(
            "Directory of stored experiences: a disk buffer (numbered .trxp files of trinity_core.buffer's "
            "disk writer) or a Hugging Face dataset saved with save_to_disk (e.g. of to_hf_datasets). "
            "Required in mode train. Mode explore writes its disk buffer here (unset: "
            "<run_dir>/experiences)."
        ),
    )
    format: Literal["auto", "buffer", "dataset"] = Field(
        default="auto",
        description=(
            "How to read data.experiences; auto: a disk buffer if it holds .trxp files, else a dataset."
        ),
    )
    split: str = Field(default="train", description="Split to read when the dataset is a DatasetDict.")
    batch_size: int = Field(
        default=16, ge=1, description="Items per training step, all ranks together (DPO: pairs)."
    )
    epochs: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Passes over the data; the run stops after them or at trainer.total_steps, whichever is first."
        ),
    )
    shuffle: bool = Field(
        default=True, description="Shuffle the items at every pass (seeded by trainer.seed and the pass)."
    )
    expert_path: str | None = Field(
        default=None,
        description=(
            "Expert data mixed into every batch of mode both (mix, mix_chord): a json/jsonl/parquet file of "
            "prompt/response pairs, or a directory of stored experiences (as data.experiences)."
        ),
    )


class SynchronizerConfig(Section):
    """How the explorer (rollouts) and the learner (updates) of modes ``both`` and ``async`` keep in step.

    The learner's policy version is the number of updates it has made. Explorer step ``e`` generates
    with the weights last synchronised: they reach the explorer after every ``sync_interval`` learner
    steps, and the explorer runs ``sync_offset`` steps ahead of the learner, so generation of step
    ``e + sync_offset`` overlaps the update of step ``e``. ``sync_interval: 1, sync_offset: 0`` is lock
    step: each step's rollouts come from the current policy. In mode ``async`` the explorer is a process
    of its own that runs ahead freely (at most ``max(sync_offset, 1)`` steps waiting in the link) and
    loads the weights published every ``sync_interval`` learner steps (``method``). Mode ``both`` with
    ``sync_offset > 0`` runs its explorer in a thread, or with ``explorer_process`` in a process of its
    own that is kept exactly ``sync_offset`` steps ahead (the same weight versions as the thread). Both
    process modes run ``explorers`` explorer processes beside any number of learner ranks and machines
    (docs/modes.md, "Many processes and machines").
    """

    sync_interval: int = Field(
        default=1, ge=1, description="Learner steps between weight syncs to the explorer (1: every step)."
    )
    sync_offset: int = Field(
        default=0,
        ge=0,
        description=(
            "Steps the explorer runs ahead of the learner (0: lock step; 1: generation of step t+1 "
            "overlaps the update of step t, one-step off-policy)."
        ),
    )
    max_staleness: int | None = Field(
        default=None,
        ge=0,
        description=(
            "The learner drops experiences made by a policy more than this many versions older than its "
            "own (metric staleness/dropped); unset: keeps every experience."
        ),
    )
    method: Literal["memory", "checkpoint"] = Field(
        default="memory",
        description=(
            "Mode async and explorer_process: how weights reach the explorer process (memory: shared "
            "memory; checkpoint: a safetensors file in <run_dir>/sync)."
        ),
    )
    explorer_process: bool = Field(
        default=False,
        description=(
            "Mode both with sync_offset > 0: run the explorer in a process of its own (weights through "
            "method) instead of a thread of the learner's process, still exactly sync_offset steps "
            "ahead. Faster where generation is mostly Python work (small models on CPU), since the two "
            "parts no longer take turns on the interpreter lock; several with synchronizer.explorers."
        ),
    )
    explorer_threads: int | None = Field(
        default=None,
        ge=1,
        le=MAX_THREADS,
        description=(
            "torch CPU threads of the explorer while it runs beside the learner (mode async, or mode both "
            "with sync_offset > 0); unset: trainer.threads, else half of torch's threads."
        ),
    )
    learner_threads: int | None = Field(
        default=None,
        ge=1,
        le=MAX_THREADS,
        description=(
            "torch CPU threads of the learner while the explorer runs beside it (mode async, or mode both "
            "with sync_offset > 0); unset: trainer.threads, else half of torch's threads."
        ),
    )
    timeout: float = Field(
        default=600.0,
        gt=0,
        description=(
            "Mode async and explorer_process: seconds the learner waits for experiences (buffer empty) or "
            "the explorer for room in the buffer (buffer full) before the run stops with an error."
        ),
    )
    explorers: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Mode async and explorer_process: explorer processes, each generating a fixed share of every "
            "step's tasks (rollout.prompts_per_step must divide by it); explorer e runs on machine "
            "e mod machines. Unset: one per machine of the launch (written into config.yaml)."
        ),
    )
    explorer_devices: list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None,
        description=(
            "GPU runs with explorer processes: the CUDA device index of each explorer of a machine, in "
            "the order of the explorers placed there; they must not be the learner ranks' devices "
            "(0 .. processes per machine - 1). Unset: each explorer shares the GPU of a learner rank."
        ),
    )
    explorer_restarts: int = Field(
        default=0,
        ge=0,
        description=(
            "Mode async and explorer_process: times an explorer process that dies is started again "
            "(from the current weights, its unfinished steps issued again) before the run stops."
        ),
    )
