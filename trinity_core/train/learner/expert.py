"""Expert data mixed into the batches of mode ``both`` (``mix``, ``mix_chord``): ``data.expert_path``.

``data.expert_path`` is a json / jsonl / parquet / csv file of ``prompt`` / ``response`` text pairs
(encoded as the rollout encodes them: ``<bos>`` + prompt, response + ``<eos>``), or a directory of stored
experiences as :func:`trinity_core.train.data.stored.read_experiences` reads ``data.experiences``. It is
loaded and padded once; every learner step appends ``ceil(n · e / u)`` expert rows to its ``n`` rollout
rows, where ``u`` / ``e`` are the loss's ``train_batch_size_usual`` / ``train_batch_size_expert``
arguments (1 / 1 by default: half of each batch is expert data, trinity-rft's ``expert_data_ratio``
0.5). The rows of step ``s`` on rank ``r`` are drawn with replacement from a generator seeded by
``(trainer.seed, s, r)``, so a resumed run draws what the uninterrupted run drew.

Expert rows carry no reward (NaN), zero advantages and log-probs, and the columns the MIX losses read:
``expert_mask`` ``(N,)`` (True on expert rows) and ``step`` ``(N,)`` (the 0-based training step).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from trinity_core.batch import BATCH_RESPONSE_FIELDS, ExperienceBatch
from trinity_core.config import ResolvedConfig
from trinity_core.experience import Experience
from trinity_core.train.data.pairs import read_expert_items

__all__ = [
    "ExpertData",
    "expert_ratio",
    "load_expert_data",
]

_KEY = "data.expert_path"


def expert_ratio(config: ResolvedConfig) -> float:
    """Expert rows per rollout row: the loss's ``train_batch_size_expert / train_batch_size_usual``."""
    args = config.algorithm.policy_loss_fn_args
    usual, expert = args.get("train_batch_size_usual"), args.get("train_batch_size_expert")
    return float(expert) / float(usual) if usual and expert else 1.0


class ExpertData:
    """The expert items, padded once, and the rows each step appends to its rollout batch."""

    def __init__(self, items: list[Experience], *, pad_token_id: int, ratio: float, seed: int, rank: int):
        """Pad ``items`` into one batch; nothing is drawn here."""
        self.items = items
        self.rows = ExperienceBatch.from_experiences(
            items, pad_token_id=pad_token_id, fields=("input_ids", "action_mask"), group_levels=()
        )
        self.ratio, self.seed, self.rank = ratio, seed, rank

    def pick(self, step: int, n_rollout: int) -> Tensor:
        """Indices of the expert items step ``step`` appends to ``n_rollout`` rollout rows."""
        count = max(1, math.ceil(n_rollout * self.ratio))
        gen = torch.Generator().manual_seed((self.seed * 1_000_003 + step) * 1009 + self.rank)
        return torch.randint(len(self.items), (count,), generator=gen)

    def mix(self, batch: ExperienceBatch, step: int) -> ExperienceBatch:
        """``batch`` with the step's expert rows appended and the ``expert_mask`` / ``step`` columns."""
        idx = self.pick(step, len(batch))
        device = batch.input_ids.device
        ex = self.rows
        n, k = len(batch), len(idx)
        P = max(batch.max_prompt_length, ex.max_prompt_length)
        R = max(batch.max_response_length, ex.max_response_length)
        pad = batch.pad_token_id
        ids = torch.cat(
            [
                _repad(batch.input_ids, batch.max_prompt_length, P, R, pad),
                _repad(ex.input_ids[idx], ex.max_prompt_length, P, R, pad).to(device, batch.input_ids.dtype),
            ]
        )
        fields: dict[str, Any] = {}
        for name in BATCH_RESPONSE_FIELDS:
            own = getattr(batch, name)
            if own is None:
                fields[name] = None
                continue
            if name == "action_mask":
                theirs = (ex.action_mask if ex.action_mask is not None else ex.response_mask)[idx]
            else:
                theirs = torch.zeros((k, ex.max_response_length), dtype=own.dtype)
            fields[name] = torch.cat([_pad_right(own, R), _pad_right(theirs.to(device, own.dtype), R)])
        extras = {
            key: torch.cat([v, v.new_zeros((k, *v.shape[1:]))])
            if v.dim() == 1
            else torch.cat([_pad_right(v, R), v.new_zeros((k, R))])
            for key, v in batch.extras.items()
        }
        is_expert = torch.arange(n + k, device=device) >= n
        extras["expert_mask"] = is_expert
        extras["step"] = torch.full((n + k,), step, dtype=torch.int64, device=device)
        chosen = [self.items[i] for i in idx.tolist()]
        levels = batch.group_index
        return dataclasses.replace(
            batch,
            input_ids=ids,
            prompt_lengths=torch.cat([batch.prompt_lengths, ex.prompt_lengths[idx].to(device)]),
            response_lengths=torch.cat([batch.response_lengths, ex.response_lengths[idx].to(device)]),
            max_prompt_length=P,
            max_response_length=R,
            rewards=torch.cat([batch.rewards, batch.rewards.new_full((k,), math.nan)]),
            has_reward=torch.cat([batch.has_reward, batch.has_reward.new_zeros(k)]),
            # Each expert row is a group of its own: group statistics of the rollouts stay as they were.
            group_index={
                lv: torch.cat([g, batch.num_groups[lv] + torch.arange(k, device=g.device)])
                for lv, g in levels.items()
            },
            group_keys={
                lv: [*keys, *(f"expert-{step}-{j}" for j in range(k))]
                for lv, keys in batch.group_keys.items()
            },
            experiences=_Joined(batch.experiences, chosen),
            extras=extras,
            _lengths=[*batch._lengths, *((e.prompt_length, len(e.tokens)) for e in chosen)],
            **fields,
        )


def _repad(ids: Tensor, width: int, P: int, R: int, pad: int) -> Tensor:
    """Rows ``ids`` (prompts ``width`` wide) re-padded: prompts left to ``P``, responses right to ``R``."""
    out = ids.new_full((ids.shape[0], P + R), pad)
    out[:, P - width : P] = ids[:, :width]
    out[:, P : P + ids.shape[1] - width] = ids[:, width:]
    return out


def _pad_right(column: Tensor, width: int) -> Tensor:
    """``(N, R')`` -> ``(N, width)``, zeros (False) appended."""
    out = column.new_zeros((column.shape[0], width))
    out[:, : column.shape[1]] = column
    return out


class _Joined(Sequence[Experience]):
    """Two sequences of experiences read as one, without making a lazily built one."""

    def __init__(self, first: Sequence[Experience], second: Sequence[Experience]) -> None:
        self.first, self.second = first, second

    def __len__(self) -> int:
        return len(self.first) + len(self.second)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = i + len(self) if i < 0 else i
        return self.first[i] if i < len(self.first) else self.second[i - len(self.first)]


def load_expert_data(config: ResolvedConfig, tokenizer: Any, rank: int) -> ExpertData | None:
    """The run's expert data, or None when ``data.expert_path`` is unset or the mode samples no rollouts."""
    path = config.data.expert_path
    if not path or config.mode != "both":
        return None
    return ExpertData(
        read_expert_items(path, tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        ratio=expert_ratio(config),
        seed=config.trainer.seed,
        rank=rank,
    )
