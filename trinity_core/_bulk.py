"""Hot loops of the wire format: reading every field of many experiences and building many of them.

Both loops name every field of :class:`~trinity_core.experience.Experience` and
:class:`~trinity_core.experience.EID` literally. Attribute access written out in the loop body is the
fastest way CPython offers to touch thousands of objects: each load or store is specialised to the class's
layout (``LOAD_ATTR_INSTANCE_VALUE`` / ``STORE_ATTR_INSTANCE_VALUE`` for the experience's shared-key
dict, ``LOAD_ATTR_SLOT`` / ``STORE_ATTR_SLOT`` for the slotted EID), where
``operator.attrgetter``, ``setattr`` or assigning a ready-made ``__dict__`` go through the generic,
hashing attribute machinery (twice the time) and, for ``__dict__``, leave every object with a full dict
that also costs more to free. An import-time check keeps the literal names in step with the dataclasses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from trinity_core.experience import EID, Experience, experience_field_names

__all__ = ["EID_NAMES", "EXPERIENCE_NAMES", "ROW_NAMES", "build_experiences", "experience_rows"]

#: The stored fields of an experience, in declaration order (the order of :data:`ROW_NAMES`).
EXPERIENCE_NAMES: tuple[str, ...] = (
    "eid",
    "tokens",
    "prompt_length",
    "logprobs",
    "reward",
    "token_level_reward",
    "advantages",
    "returns",
    "truncate_status",
    "info",
    "metrics",
    "response_text",
    "prompt_text",
    "action_mask",
    "messages",
    "tools",
    "chosen",
    "rejected",
    "chosen_messages",
    "rejected_messages",
    "multi_modal_inputs",
    "teacher_logprobs",
    "custom_fields",
    "experience_type",
)
#: The fields of an EID.
EID_NAMES: tuple[str, ...] = ("batch", "task", "run", "step", "suffix")
#: What :func:`experience_rows` returns per experience: its fields, then its EID's as ``eid.<name>``.
ROW_NAMES: tuple[str, ...] = (*EXPERIENCE_NAMES, *(f"eid.{name}" for name in EID_NAMES))

_EID_FIELDS = tuple(f.name for f in dataclasses.fields(EID))
if experience_field_names() != EXPERIENCE_NAMES or _EID_FIELDS != EID_NAMES:  # pragma: no cover
    raise ImportError("trinity_core._bulk: the literal field names are out of date with experience.py")


def experience_rows(experiences: list[Experience]) -> list[tuple[Any, ...]]:
    """One tuple per experience holding the values named by :data:`ROW_NAMES`, in that order.

    Raises ``AttributeError`` when an item lacks a field (or its ``eid`` lacks one of the EID's).
    """
    return [
        (
            (eid := e.eid),
            e.tokens,
            e.prompt_length,
            e.logprobs,
            e.reward,
            e.token_level_reward,
            e.advantages,
            e.returns,
            e.truncate_status,
            e.info,
            e.metrics,
            e.response_text,
            e.prompt_text,
            e.action_mask,
            e.messages,
            e.tools,
            e.chosen,
            e.rejected,
            e.chosen_messages,
            e.rejected_messages,
            e.multi_modal_inputs,
            e.teacher_logprobs,
            e.custom_fields,
            e.experience_type,
            eid.batch,
            eid.task,
            eid.run,
            eid.step,
            eid.suffix,
        )
        for e in experiences
    ]


def build_experiences(columns: dict[str, Iterable[Any]]) -> list[Experience]:
    """Experiences (and their EIDs) from one iterable of values per name of :data:`ROW_NAMES` but ``eid``.

    All iterables must have the same length (checked). Objects are made with ``object.__new__`` and their
    attributes stored directly, as :meth:`Experience._restore` does: no constructor logic runs, so every
    value is kept exactly as given. A ``None`` in ``info``, ``metrics`` or ``custom_fields`` stands for
    the field's default and becomes a fresh ``{}`` or ``[]`` for that experience.
    """
    new = object.__new__
    out: list[Experience] = []
    append = out.append
    for (
        tokens,
        prompt_length,
        logprobs,
        reward,
        token_level_reward,
        advantages,
        returns,
        truncate_status,
        info,
        metrics,
        response_text,
        prompt_text,
        action_mask,
        messages,
        tools,
        chosen,
        rejected,
        chosen_messages,
        rejected_messages,
        multi_modal_inputs,
        teacher_logprobs,
        custom_fields,
        experience_type,
        batch,
        task,
        run,
        step,
        suffix,
    ) in zip(*(columns[name] for name in ROW_NAMES[1:]), strict=True):
        eid = new(EID)
        eid.batch = batch
        eid.task = task
        eid.run = run
        eid.step = step
        eid.suffix = suffix
        exp = new(Experience)
        exp.eid = eid
        exp.tokens = tokens
        exp.prompt_length = prompt_length
        exp.logprobs = logprobs
        exp.reward = reward
        exp.token_level_reward = token_level_reward
        exp.advantages = advantages
        exp.returns = returns
        exp.truncate_status = truncate_status
        exp.info = {} if info is None else info
        exp.metrics = {} if metrics is None else metrics
        exp.response_text = response_text
        exp.prompt_text = prompt_text
        exp.action_mask = action_mask
        exp.messages = messages
        exp.tools = tools
        exp.chosen = chosen
        exp.rejected = rejected
        exp.chosen_messages = chosen_messages
        exp.rejected_messages = rejected_messages
        exp.multi_modal_inputs = multi_modal_inputs
        exp.teacher_logprobs = teacher_logprobs
        exp.custom_fields = [] if custom_fields is None else custom_fields
        exp.experience_type = experience_type
        append(exp)
    return out
