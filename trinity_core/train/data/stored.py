"""Stored experiences for mode ``train``: reading ``data.experiences`` and cutting it into steps.

``data.experiences`` is a directory holding either

* a **disk buffer**: the numbered ``.trxp`` files written by :class:`trinity_core.buffer.DiskWriter`
  (``make_buffer("disk", path)``), read in order; or
* a **dataset**: a Hugging Face ``Dataset`` (or ``DatasetDict``, split ``data.split``) saved with
  ``save_to_disk``, typically of :func:`trinity_core.hf.to_hf_datasets` output, read with
  :func:`trinity_core.hf.from_hf_datasets`.

``data.format: auto`` picks the buffer when the directory holds ``.trxp`` files, else the dataset.

An *item* is one stored experience, or one DPO pair. Pairs are split once, on load, with
:func:`~trinity_core.experience.split_dpo_experience_to_single_turn` into adjacent rows ``(2k, 2k + 1)`` =
(chosen, rejected), the layout the ``dpo`` loss pairs by; the columns ``pair_id`` and ``chosen_mask``
say the same for losses that pair by id. Step ``s`` of a run reads items
``perm_e[b·j : b·(j + 1)]`` with ``e = s // steps_per_epoch``, ``j = s mod steps_per_epoch``,
``b = data.batch_size``, where ``perm_e`` is a permutation seeded by ``(trainer.seed, e)``; rank ``r`` of
``W`` takes the ``r``-th of ``W`` equal slices. The order depends only on the step, so a resumed run
reads what the uninterrupted run would have read.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig
from trinity_core.experience import Experience, split_dpo_experience_to_single_turn

__all__ = [
    "StoredExperiences",
    "check_offline_trainer",
    "check_schema",
    "check_vocabulary",
    "detect_format",
    "load_stored_experiences",
    "read_experiences",
]

_BUFFER_FILE = re.compile(r"^\d{12}\.trxp$")
_DATASET_MARKERS = ("dataset_info.json", "dataset_dict.json", "state.json")


def _problem(message: str, path: str = "data.experiences", hint: str | None = None) -> ConfigError:
    return ConfigError([ConfigProblem(path, message, hint=hint)])


def detect_format(directory: Path) -> Literal["buffer", "dataset"]:
    """``"buffer"`` when ``directory`` holds ``.trxp`` buffer files, ``"dataset"`` for a saved dataset.

    Raises:
        ConfigError: the path is not a directory, or holds neither.
    """
    if not directory.is_dir():
        what = "does not exist" if not directory.exists() else "is not a directory"
        raise _problem(
            f"{directory} {what}",
            hint="name a disk buffer directory (make_buffer('disk', path)) or a save_to_disk dataset",
        )
    names = [entry.name for entry in directory.iterdir()]
    if any(_BUFFER_FILE.match(name) for name in names):
        return "buffer"
    if any(name in _DATASET_MARKERS for name in names):
        return "dataset"
    raise _problem(
        f"{directory} holds neither disk-buffer files (000000000000.trxp, ...) nor a saved dataset "
        "(dataset_info.json / dataset_dict.json)",
        hint="write experiences with make_buffer('disk', path) or to_hf_datasets(...).save_to_disk(path)",
    )


def read_experiences(
    directory: Path, fmt: Literal["auto", "buffer", "dataset"] = "auto", split: str = "train"
) -> list[Experience]:
    """Every experience stored in ``directory`` (in stored order).

    Raises:
        ConfigError: unreadable or empty data, a missing split.
    """
    if fmt == "auto":
        fmt = detect_format(directory)
    if fmt == "buffer":
        from trinity_core.buffer import DiskReader
        from trinity_core.codec import ExperienceDecodeError

        try:
            items = asyncio.run(DiskReader(directory).read())
        except ExperienceDecodeError as exc:
            raise _problem(f"{directory}: a buffer file cannot be decoded ({exc})") from None
    else:
        from datasets import DatasetDict, load_from_disk

        from trinity_core.hf import from_hf_datasets

        try:
            dataset = load_from_disk(str(directory))
        except IndexError:  # what `datasets` raises for a dataset saved with no rows (no shards)
            raise _problem(f"{directory} holds no experiences") from None
        except (FileNotFoundError, ValueError) as exc:
            raise _problem(f"{directory}: not a dataset saved with save_to_disk ({exc})") from None
        if isinstance(dataset, DatasetDict):
            if split not in dataset:
                raise _problem(
                    f"{directory} is a DatasetDict without split {split!r} (splits: {sorted(dataset)})",
                    path="data.split",
                )
            dataset = dataset[split]
        items = from_hf_datasets(dataset)
    if not items:
        raise _problem(f"{directory} holds no experiences")
    return items


class StoredExperiences:
    """The items of ``data.experiences`` as training rows, cut into shuffled passes of fixed-size steps.

    Attributes:
        rows: training rows; item ``i`` is rows ``[i·k, (i + 1)·k)`` with ``k = rows_per_item`` (1, or 2
            for DPO pairs: chosen, then rejected).
        paired: the items are DPO pairs.
        steps_per_epoch: ``len(items) // batch_size``.
        has_rewards / has_advantages / has_logprobs: every row carries the field.
    """

    def __init__(
        self,
        items: Sequence[Experience],
        *,
        batch_size: int,
        world_size: int,
        seed: int,
        shuffle: bool,
    ) -> None:
        """Split DPO pairs and check the sizes.

        Raises:
            ConfigError: pairs mixed with single experiences, fewer items than one batch, or a batch
                that does not split evenly over the processes.
        """
        types = {exp.experience_type for exp in items}
        self.paired = "dpo" in types
        if self.paired and types != {"dpo"}:
            raise _problem(
                f"mixes DPO pairs with other experiences ({sorted(types)}); store one kind per data set"
            )
        self.rows = split_dpo_experience_to_single_turn(items) if self.paired else list(items)
        self.rows_per_item = 2 if self.paired else 1
        self.num_items = len(items)
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        if batch_size % world_size:
            raise _problem(
                f"{batch_size} items per step cannot be split over {world_size} processes",
                path="data.batch_size",
                hint=f"use a multiple of {world_size}",
            )
        self.per_rank = batch_size // world_size
        self.steps_per_epoch = self.num_items // batch_size
        if self.steps_per_epoch == 0:
            unit = "pairs" if self.paired else "experiences"
            raise _problem(
                f"{batch_size} items per step, but data.experiences holds only {self.num_items} {unit}",
                path="data.batch_size",
                hint=f"set data.batch_size to at most {self.num_items}",
            )
        self.has_rewards = all(row.reward is not None for row in self.rows)
        self.has_advantages = all(row.advantages is not None for row in self.rows)
        self.has_logprobs = all(row.logprobs is not None for row in self.rows)
        self._epoch = -1
        self._order = torch.arange(self.num_items)

    def total_steps(self, max_steps: int, epochs: int | None) -> int:
        """Steps of the run: ``max_steps``, or fewer when ``epochs`` passes end first."""
        return max_steps if epochs is None else min(max_steps, epochs * self.steps_per_epoch)

    def epoch_order(self, epoch: int) -> Tensor:
        """The item order of pass ``epoch`` (a permutation seeded by ``(seed, epoch)``, or identity)."""
        if epoch != self._epoch:
            self._epoch = epoch
            if self.shuffle:
                generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
                self._order = torch.randperm(self.num_items, generator=generator)
            else:
                self._order = torch.arange(self.num_items)
        return self._order

    def step_rows(self, step: int, rank: int) -> list[Experience]:
        """Rank ``rank``'s rows of step ``step`` (0-based), pairs adjacent, chosen first."""
        epoch, j = divmod(step, self.steps_per_epoch)
        start = j * self.batch_size + rank * self.per_rank
        items = self.epoch_order(epoch)[start : start + self.per_rank].tolist()
        k = self.rows_per_item
        return [self.rows[i * k + r] for i in items for r in range(k)]

    def pair_columns(self, rows: int, device: torch.device) -> dict[str, Tensor]:
        """``pair_id`` and ``chosen_mask`` ``(B,)`` of ``rows`` adjacent pair rows; ``{}`` when unpaired."""
        if not self.paired:
            return {}
        index = torch.arange(rows, device=device)
        return {"pair_id": index // 2, "chosen_mask": index % 2 == 0}


def load_stored_experiences(config: ResolvedConfig, world_size: int, *, schema: str) -> StoredExperiences:
    """Read and check ``data.experiences`` for a run in mode ``train``.

    Args:
        config: the run configuration (``data``, ``trainer.seed``, ``algorithm.algorithm_type``).
        world_size: processes sharing each step's items.
        schema: the preset's experience schema (``dpo`` needs pairs, anything else single rows).

    Raises:
        ConfigError: ``data.experiences`` unset or unreadable, a preset whose schema does not match the
            data, or bad sizes.
    """
    data = config.data
    if not data.experiences:
        raise _problem(
            "mode 'train' trains on stored experiences, but none are named",
            hint="set data.experiences to a disk buffer directory or a save_to_disk dataset",
        )
    items = read_experiences(Path(data.experiences), data.format, data.split)
    stored = StoredExperiences(
        items,
        batch_size=data.batch_size,
        world_size=world_size,
        seed=config.trainer.seed,
        shuffle=data.shuffle,
    )
    check_schema(stored, config.algorithm.algorithm_type, schema)
    return stored


def check_schema(stored: StoredExperiences, preset_name: str, schema: str) -> None:
    """DPO pairs exactly when the preset's schema is ``dpo``.

    Raises:
        ConfigError: pairs for a preset that trains on single rows, or single rows for a pair preset.
    """
    if stored.paired and schema != "dpo":
        raise _problem(
            f"holds DPO pairs, but algorithm {preset_name!r} (schema {schema!r}) trains on single "
            "experiences",
            hint="use algorithm_type dpo for preference pairs, or store single experiences",
        )
    if schema == "dpo" and not stored.paired:
        raise _problem(
            f"algorithm {preset_name!r} trains on DPO pairs, but the experiences are not pairs",
            hint="store Experience(tokens=prompt, chosen=..., rejected=...) items",
        )


def check_offline_trainer(config: ResolvedConfig) -> None:
    """Mode ``train`` makes one optimizer update per step: passes over the data are ``data.epochs``."""
    problems = [
        ConfigProblem(
            f"trainer.{key}",
            f"mode 'train' makes one optimizer update per step on data.batch_size items, got {key} = {value}",
            hint=f"remove trainer.{key}; use data.epochs for passes over the data",
        )
        for key in ("epochs", "minibatches")
        if (value := getattr(config.trainer, key)) != 1
    ]
    if problems:
        raise ConfigError(problems)


def check_vocabulary(data: StoredExperiences, model: object) -> None:
    """Every stored token id must be an id of the model's vocabulary (else the embedding fails mid-run)."""
    vocab = int(model.get_input_embeddings().num_embeddings)  # type: ignore[attr-defined]
    highest = int(torch.cat([row.tokens for row in data.rows if row.tokens is not None]).max())
    if highest >= vocab:
        raise _problem(
            f"token id {highest} is outside the model's vocabulary of {vocab} ids",
            hint="tokenize the experiences with the run's tokenizer (model.tokenizer_path)",
        )
