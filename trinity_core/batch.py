"""Columnar batches of experiences: :class:`ExperienceBatch`.

:class:`ExperienceBatch` is a list of experiences as columns (rewards ``(N,)``, group indices from the
EIDs, padded response tensors), so group computations run vectorized over the batch; its results go back
to the experiences as views (:meth:`ExperienceBatch.write_back`), never copies. The ``gather_*``
functions (:mod:`trinity_core.gather`) give single columns without a batch; padding sides are described
in :mod:`trinity_core.columns`, grouping in :mod:`trinity_core.grouping`, the lazily made source list of
a batch built from columns in :mod:`trinity_core.lazy`. Their public names are importable from here too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from trinity_core.columns import (
    BATCH_RESPONSE_FIELDS,
    check_fields,
    check_limits,
    gather_field,
    scatter_token_ids,
    token_rows,
)
from trinity_core.experience import Experience, ExperienceError
from trinity_core.gather import (
    all_finite,
    gather_action_masks,
    gather_attention_masks,
    gather_group_codes,
    gather_group_index,
    gather_group_indices,
    gather_multi_modal_inputs,
    gather_response_attrs,
    gather_rewards,
    gather_token_ids,
    reward_columns,
)
from trinity_core.grouping import GROUP_LEVELS, GroupLevel, group_columns
from trinity_core.lazy import LazyExperiences

__all__ = [
    "BATCH_RESPONSE_FIELDS",
    "GROUP_LEVELS",
    "ExperienceBatch",
    "GroupLevel",
    "LazyExperiences",
    "all_finite",
    "gather_action_masks",
    "gather_attention_masks",
    "gather_group_codes",
    "gather_group_index",
    "gather_group_indices",
    "gather_multi_modal_inputs",
    "gather_response_attrs",
    "gather_rewards",
    "gather_token_ids",
]


@dataclass(eq=False)
class ExperienceBatch:
    """A list of experiences as columns: ``N`` experiences, prompts padded to ``P``, responses to ``R``.

    Build it with :meth:`from_experiences`. Columns:

    * ``input_ids`` ``(N, P + R)``: as :func:`gather_token_ids` (prompt left-padded, response
      right-padded with ``pad_token_id``); ``responses`` ``(N, R)`` and ``prompts`` ``(N, P)`` are views.
    * ``prompt_lengths``, ``response_lengths`` ``(N,)`` int64; ``response_mask`` ``(N, R)`` bool is
      ``column < response_length``; ``attention_mask`` ``(N, P + R)`` bool marks the real tokens.
    * ``rewards`` ``(N,)`` float64 with NaN where ``reward is None``, and ``has_reward`` ``(N,)`` bool.
    * ``truncated`` ``(N,)`` bool: the response ran out of tokens (``truncate_status ==
      "response_truncated"``); None for a batch built without it.
    * ``group_index[level]`` ``(N,)`` int64 for ``level`` in ``task`` / ``run`` / ``step`` (grouping by
      ``eid.tid`` / ``eid.rid`` / ``eid.sid``): groups are numbered ``0 .. num_groups[level] - 1`` in
      order of first appearance, the order of :func:`~trinity_core.experience.group_by`;
      ``group_keys[level][g]`` is the id string of group ``g``.
    * Response fields (:data:`BATCH_RESPONSE_FIELDS`: ``action_mask``, ``logprobs``, ``advantages``,
      ``returns``, ``token_level_reward``, ``teacher_logprobs``) as ``(N, R)`` tensors right-padded with
      0 (False for ``action_mask``), in the dtype of the first experience's value. **Presence rule:** a
      field is gathered when every experience has it, is None when none has it, and a mix is a ValueError
      (fill or drop the field first). A gathered field must have exactly ``response_length`` entries
      per experience.

    ``experiences`` keeps the source list: :meth:`write_back` and :meth:`to_experiences` use it. DPO
    pairs are not accepted (split them with ``split_dpo_experience_to_single_turn`` first). A batch
    built straight from columns holds a :class:`LazyExperiences` there instead, whose experiences are
    made on first access.
    """

    input_ids: Tensor
    prompt_lengths: Tensor
    response_lengths: Tensor
    max_prompt_length: int
    max_response_length: int
    pad_token_id: int
    rewards: Tensor
    has_reward: Tensor
    group_index: dict[str, Tensor]
    group_keys: dict[str, list[str]]
    experiences: Sequence[Experience]
    action_mask: Tensor | None = None
    logprobs: Tensor | None = None
    advantages: Tensor | None = None
    returns: Tensor | None = None
    token_level_reward: Tensor | None = None
    teacher_logprobs: Tensor | None = None
    extras: dict[str, Tensor] = field(default_factory=dict)
    truncated: Tensor | None = None
    _lengths: list[tuple[int, int]] = field(default_factory=list, repr=False)

    @classmethod
    def from_experiences(
        cls,
        experiences: Sequence[Experience],
        *,
        pad_token_id: int = 0,
        max_response_length: int | None = None,
        max_prompt_length: int | None = None,
        fields: Collection[str] | None = None,
        group_levels: Collection[GroupLevel] = GROUP_LEVELS,
    ) -> ExperienceBatch:
        """Build the columns from ``experiences`` (each tensor is copied once into its padded column).

        ``max_response_length`` / ``max_prompt_length`` default to the longest response / prompt; a
        longer experience is a ValueError naming its index.

        ``fields`` restricts the padded columns to the ones a consumer reads: names from
        ``"input_ids"`` and :data:`BATCH_RESPONSE_FIELDS` (None, the default, builds all). An unlisted
        response field is None, as if no experience had it; without ``"input_ids"`` the token ids are
        not copied and ``input_ids`` is a ``meta`` tensor of the right shape ``(N, P + R)`` that holds
        no data (:meth:`to_experiences` refuses such a batch). Lengths, rewards and masks derived from
        lengths are always built. ``group_levels`` likewise limits ``group_index`` / ``group_keys`` to
        the listed levels (default: all three).
        """
        where = "ExperienceBatch.from_experiences"
        wanted = check_fields(fields, group_levels, where)
        exps = list(experiences)
        dpo = next((i for i, exp in enumerate(exps) if exp.experience_type == "dpo"), None)
        if dpo is not None:
            raise ExperienceError(
                f"{where}: experience {dpo} ({exps[dpo].eid.uid}) is a DPO pair; split it with "
                f"split_dpo_experience_to_single_turn first"
            )
        tokens, prompts, totals = token_rows(exps, where)
        responses = [n - p for p, n in zip(prompts, totals, strict=True)]
        P = max(prompts, default=0) if max_prompt_length is None else max_prompt_length
        R = max(responses, default=0) if max_response_length is None else max_response_length
        check_limits(prompts, responses, P, R, where)
        device = tokens[0].device if tokens else torch.device("cpu")
        if "input_ids" not in wanted:
            dtype = tokens[0].dtype if tokens else torch.int32
            input_ids = torch.empty((len(exps), P + R), dtype=dtype, device="meta")
        elif tokens:
            input_ids = scatter_token_ids(tokens, prompts, totals, P, R, pad_token_id)
        else:
            input_ids = torch.full((0, P + R), pad_token_id, dtype=torch.int32)

        gathered: dict[str, Any] = {}  # response field name -> (N, R) tensor or None
        for name in BATCH_RESPONSE_FIELDS:
            if name in wanted:
                gathered[name] = gather_field(exps, name, responses, R, device, where)

        rewards, has_reward = reward_columns([exp.reward for exp in exps])
        group_index, group_keys = group_columns([exp.eid for exp in exps], group_levels)
        truncated = [exp.truncate_status == "response_truncated" for exp in exps]
        return cls(
            input_ids=input_ids,
            prompt_lengths=torch.tensor(prompts, dtype=torch.int64, device=device),
            response_lengths=torch.tensor(responses, dtype=torch.int64, device=device),
            max_prompt_length=P,
            max_response_length=R,
            pad_token_id=pad_token_id,
            rewards=rewards,
            has_reward=has_reward,
            group_index=group_index,
            group_keys=group_keys,
            experiences=exps,
            truncated=torch.tensor(truncated, dtype=torch.bool),
            _lengths=list(zip(prompts, totals, strict=True)),
            **gathered,
        )

    def __len__(self) -> int:
        return len(self.experiences)

    def source_rewards(self) -> list[float | None]:
        """Each experience's ``reward`` as the experience holds it (a Python value, None when unset).

        Reads the values a :class:`LazyExperiences` was given rather than making its experiences, so
        components can validate rewards on the host without a device sync or per-experience objects.
        """
        source = self.experiences
        if isinstance(source, LazyExperiences) and not source.materialized:
            return list(source.rewards)
        return [exp.reward for exp in source]

    def rewards_are_finite(self) -> bool:
        """True when every experience's reward is a finite number (:func:`all_finite` of
        :meth:`source_rewards`): no host sync, no lazily built experience made."""
        return all_finite(self.source_rewards())

    @property
    def num_groups(self) -> dict[str, int]:
        """Number of groups per level (``task``, ``run``, ``step``)."""
        return {level: len(keys) for level, keys in self.group_keys.items()}

    @property
    def responses(self) -> Tensor:
        """Response token ids ``(N, R)``, right-padded with ``pad_token_id`` (a view of ``input_ids``)."""
        return self.input_ids[:, self.max_prompt_length :]

    @property
    def prompts(self) -> Tensor:
        """Prompt token ids ``(N, P)``, left-padded with ``pad_token_id`` (a view of ``input_ids``)."""
        return self.input_ids[:, : self.max_prompt_length]

    @property
    def response_mask(self) -> Tensor:
        """``(N, R)`` bool: True on the real response tokens (``column < response_length``)."""
        col = torch.arange(self.max_response_length, device=self.response_lengths.device)
        return col < self.response_lengths[:, None]

    @property
    def attention_mask(self) -> Tensor:
        """``(N, P + R)`` bool: True on the real prompt and response tokens of ``input_ids``."""
        col = torch.arange(self.input_ids.shape[1], device=self.prompt_lengths.device)
        start = self.max_prompt_length - self.prompt_lengths
        return (col >= start[:, None]) & (
            col < (start + self.prompt_lengths + self.response_lengths)[:, None]
        )

    def column(self, name: str, *, needed_by: str = "") -> Tensor:
        """A response-aligned column by name: a gathered field or a trainer-side entry of ``extras``.

        ``extras`` holds what the trainer computes after rollout, ``(N, R)`` like the response fields:
        ``old_logprobs``, ``ref_logprobs``, ``values``, ``entropys``, ``reward_baselines`` (``(N,)``) and
        any column a plugin asks for. A missing column is a KeyError that names who needed it and what
        is there.
        """
        value = self.extras.get(name)
        if value is None and name in BATCH_RESPONSE_FIELDS:
            value = getattr(self, name)
        if value is None:
            present = sorted(
                {*self.extras, *(f for f in BATCH_RESPONSE_FIELDS if getattr(self, f) is not None)}
            )
            who = f" (needed by {needed_by})" if needed_by else ""
            raise KeyError(
                f"ExperienceBatch has no column {name!r}{who}; present: {', '.join(present) or 'none'}. "
                f"The trainer adds trainer-side columns to batch.extras before calling the component."
            )
        return value

    def token_level_scores(self) -> Tensor:
        """Rewards per response token ``(N, R)`` in float32.

        In order: ``extras["token_level_rewards"]`` when the trainer has set it (rewards after a KL
        penalty), ``token_level_reward`` when the experiences carry it, otherwise each scalar reward on the
        last real response token and 0 elsewhere (experiences without a reward score 0).
        """
        penalised = self.extras.get("token_level_rewards")
        if penalised is not None:
            return penalised.to(torch.float32)
        if self.token_level_reward is not None:
            return self.token_level_reward.to(torch.float32)
        n, width = len(self), self.max_response_length
        scores = torch.zeros(n, width, dtype=torch.float32, device=self.response_lengths.device)
        if n == 0 or width == 0:
            return scores
        last = (self.response_lengths - 1).clamp_min(0)
        rewards = torch.where(self.has_reward, self.rewards, 0.0).to(torch.float32).to(scores.device)
        has_tokens = (self.response_lengths > 0).to(scores.device)
        scores[torch.arange(n, device=scores.device), last] = torch.where(has_tokens, rewards, 0.0)
        return scores

    def select(self, rows: Tensor | Sequence[int]) -> ExperienceBatch:
        """The rows ``rows`` (a boolean mask or row numbers) as a new batch, its experiences in step
        (see :func:`trinity_core.batch_rows.select_rows`): what a filtering experience operator returns."""
        from trinity_core.batch_rows import select_rows

        return select_rows(self, rows)

    def group_sizes(self, level: GroupLevel = "task") -> Tensor:
        """Experiences per group at ``level``: ``(num_groups[level],)`` int64."""
        return torch.bincount(self.group_index[level], minlength=self.num_groups[level])

    def to(self, device: torch.device | str) -> ExperienceBatch:
        """A batch whose tensors live on ``device`` (group keys and source experiences are shared)."""
        moved: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor) and not value.is_meta:  # meta: a column built without data
                moved[f.name] = value.to(device)
        moved["group_index"] = {k: v.to(device) for k, v in self.group_index.items()}
        moved["extras"] = {k: v.to(device) for k, v in self.extras.items()}
        return dataclasses.replace(self, **moved)

    def write_back(self, field: str, experiences: Sequence[Experience] | None = None) -> None:
        """Set ``field`` of each experience from the batch, as views of the batch's storage (no copy).

        ``field`` is a response field (:data:`BATCH_RESPONSE_FIELDS`): experience ``i`` gets
        ``getattr(batch, field)[i, :response_length_i]``, so later in-place changes of the batch show in
        the experiences; or ``"reward"``: ``exp.reward = float(rewards[i])`` (None where ``has_reward``
        is False). ``experiences`` defaults to the source list and must have ``len(batch)`` entries.
        """
        targets = self.experiences if experiences is None else list(experiences)
        if len(targets) != len(self):
            raise ValueError(
                f"write_back: batch holds {len(self)} experiences, got {len(targets)} to write to"
            )
        if field == "reward":
            values = self.rewards.tolist()
            present = self.has_reward.tolist()
            for exp, value, has in zip(targets, values, present, strict=True):
                exp.reward = value if has else None
            return
        for exp, row in zip(targets, self._field_rows(field), strict=True):
            setattr(exp, field, row)

    def to_experiences(self) -> list[Experience]:
        """New experiences whose tensor fields are views into this batch.

        ``tokens`` views ``input_ids``, gathered response fields view their columns, ``reward`` comes from
        ``rewards``; everything else is taken from the source experience (``info`` and ``metrics`` as
        shallow copies, so editing a new experience's dict leaves the source alone).
        """
        if self.input_ids.is_meta:
            raise ValueError(
                "to_experiences: this batch was built without token ids (fields= left out 'input_ids'); "
                "build it with fields=None or a fields list that includes 'input_ids'"
            )
        P = self.max_prompt_length
        tokens = [
            row[P - p : P - p + n]
            for row, (p, n) in zip(self.input_ids.unbind(0), self._lengths, strict=True)
        ]
        columns = {
            name: self._field_rows(name) for name in BATCH_RESPONSE_FIELDS if getattr(self, name) is not None
        }
        rewards = self.rewards.tolist()
        present = self.has_reward.tolist()
        out: list[Experience] = []
        for i, src in enumerate(self.experiences):
            values = dict(src.__dict__)
            values["tokens"] = tokens[i]
            values["reward"] = rewards[i] if present[i] else None
            values["info"] = dict(src.info)
            values["metrics"] = dict(src.metrics)
            for name, rows in columns.items():
                values[name] = rows[i]
            out.append(Experience._restore(values))
        return out

    def _field_rows(self, name: str) -> list[Tensor]:
        """Per-experience views ``column[i, :response_length_i]`` of the response field ``name``."""
        if name not in BATCH_RESPONSE_FIELDS:
            raise ValueError(
                f"write_back: unknown field {name!r}; choose one of {[*BATCH_RESPONSE_FIELDS, 'reward']}"
            )
        column = getattr(self, name)
        if column is None:
            raise ValueError(
                f"write_back: the batch has no {name!r}; set batch.{name} to an (N, R) tensor first"
            )
        if column.dim() != 2 or column.shape[0] != len(self) or column.shape[1] < self.max_response_length:
            raise ValueError(
                f"write_back: batch.{name} has shape {tuple(column.shape)}, expected "
                f"({len(self)}, {self.max_response_length})"
            )
        return [row[: n - p] for row, (p, n) in zip(column.unbind(0), self._lengths, strict=True)]
