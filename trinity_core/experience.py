"""The Experience record, its EID, and grouping.

An :class:`Experience` is one sampled trajectory (or one DPO pair) with everything an algorithm needs:
token ids, the prompt length, rollout log-probs, rewards, masks and free-form metadata. The :class:`EID`
identifies it and defines the groups that group-relative algorithms (GRPO and friends) compute over.

The class names, constructor keywords, defaults and semantics follow trinity-rft's
``trinity.common.experience``, with the reference implementation's known defects fixed:

* ids stay unambiguous when a component contains ``/`` (components are escaped, see :class:`EID`);
* ``experience_type`` survives serialization and dataset round trips;
* :func:`split_dpo_experience_to_single_turn` gives chosen and rejected their own dicts.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor

from trinity_core.eid import EID, escape_id_component
from trinity_core.eid import SUFFIX_HEX_CHARS as SUFFIX_HEX_CHARS

__all__ = [
    "EID",
    "CustomField",
    "Experience",
    "ExperienceError",
    "ExperienceType",
    "WireFormat",
    "escape_id_component",
    "group_by",
    "register_wire_format",
    "split_dpo_experience_to_single_turn",
]

ExperienceType = Literal["single_turn", "multi_turn", "dpo"]


class ExperienceError(ValueError, AssertionError):
    """An experience is invalid (a single-turn experience without a response, a batch column that does
    not fit an experience's response, ...).

    Both a :class:`ValueError` and an :class:`AssertionError`: trinity-rft 0.6.0 validates experiences
    with ``assert``, so code written for it catches ``AssertionError``; code written for us catches
    ``ValueError`` (or this class).
    """


@dataclass(frozen=True)
class CustomField:
    """An extra per-experience scalar carried from ``Experience.info`` into the trainer batch.

    ``info[source_field]`` of every experience becomes the column ``destination_field`` of the batch,
    with dtype ``data_type``.
    """

    source_field: str
    destination_field: str
    data_type: torch.dtype


#: Tensor fields of an experience that hold one value per response token.
RESPONSE_TENSOR_FIELDS: tuple[str, ...] = (
    "logprobs",
    "token_level_reward",
    "advantages",
    "returns",
    "action_mask",
    "teacher_logprobs",
)
#: Every tensor field (``multi_modal_inputs`` aside, which is a dict of tensors).
TENSOR_FIELDS: tuple[str, ...] = ("tokens", *RESPONSE_TENSOR_FIELDS, "chosen", "rejected")

_INT_TOKEN_FIELDS = ("tokens", "chosen", "rejected")
_FLOAT_FIELDS = ("logprobs", "token_level_reward", "advantages", "returns", "teacher_logprobs")


def _as_tensor(value: Any, dtype: torch.dtype) -> Tensor | None:
    """Convert list-like input to a tensor of ``dtype``; tensors pass through unchanged."""
    if value is None or isinstance(value, Tensor):
        return value
    return torch.as_tensor(value, dtype=dtype)


@dataclass(init=False, eq=False, repr=False)
class Experience:
    """One experience: a sampled trajectory with its tokens, rewards and metadata, or one DPO pair.

    Tensor fields are 1-D. ``tokens`` holds prompt and response (``prompt_length`` prompt tokens first);
    the response-aligned fields (``logprobs``, ``action_mask``, ``advantages``, ...) have one entry per
    response token, ``len(tokens) - prompt_length``. For a DPO pair ``tokens`` is the prompt alone and
    ``chosen`` / ``rejected`` are the two responses.

    ``experience_type`` is derived by the constructor: ``"multi_turn"`` when an ``action_mask`` is given,
    ``"dpo"`` when ``chosen`` and ``rejected`` are, otherwise ``"single_turn"`` (whose ``action_mask`` is
    then all ones over the response, or all zeros when the prompt was truncated). Lists are converted to
    tensors: token ids to int32, log-probs, rewards, advantages and returns to float32, masks to bool.
    """

    eid: EID
    tokens: Tensor | None
    prompt_length: int
    logprobs: Tensor | None
    reward: float | None
    token_level_reward: Tensor | None
    advantages: Tensor | None
    returns: Tensor | None
    truncate_status: str | None
    info: dict[str, Any]
    metrics: dict[str, float]
    response_text: str | None
    prompt_text: str | None
    action_mask: Tensor | None
    messages: list[dict[str, Any]] | None
    tools: list[dict[str, Any]] | None
    chosen: Tensor | None
    rejected: Tensor | None
    chosen_messages: list[dict[str, Any]] | None
    rejected_messages: list[dict[str, Any]] | None
    multi_modal_inputs: dict[str, Tensor] | None
    teacher_logprobs: Tensor | None
    custom_fields: list[CustomField]
    experience_type: ExperienceType

    def __init__(
        self,
        *,
        eid: EID | Mapping[str, Any] | None = None,
        tokens: Tensor | Sequence[int] | None,
        logprobs: Tensor | Sequence[float] | None = None,
        reward: float | None = None,
        token_level_reward: Tensor | Sequence[float] | None = None,
        advantages: Tensor | Sequence[float] | None = None,
        returns: Tensor | Sequence[float] | None = None,
        truncate_status: str | None = None,
        info: dict[str, Any] | None = None,
        metrics: dict[str, float] | None = None,
        prompt_length: int = 1,
        response_text: str | None = None,
        prompt_text: str | None = None,
        action_mask: Tensor | Sequence[bool] | None = None,
        messages: list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
        chosen: Tensor | Sequence[int] | None = None,
        rejected: Tensor | Sequence[int] | None = None,
        chosen_messages: list[dict[str, Any]] | None = None,
        rejected_messages: list[dict[str, Any]] | None = None,
        multi_modal_inputs: Mapping[str, Any] | None = None,
        teacher_logprobs: Tensor | Sequence[float] | None = None,
        custom_fields: Iterable[CustomField] | None = None,
    ) -> None:
        if eid is None:
            eid = EID()
        elif isinstance(eid, Mapping):
            eid = EID(**eid)
        elif not isinstance(eid, EID):
            raise TypeError(f"Experience(eid=...) takes an EID, a dict of its fields or None, not {eid!r}")
        self.eid = eid
        self.tokens = _as_tensor(tokens, torch.int32)
        self.chosen = _as_tensor(chosen, torch.int32)
        self.rejected = _as_tensor(rejected, torch.int32)
        self.logprobs = _as_tensor(logprobs, torch.float32)
        self.token_level_reward = _as_tensor(token_level_reward, torch.float32)
        self.advantages = _as_tensor(advantages, torch.float32)
        self.returns = _as_tensor(returns, torch.float32)
        self.teacher_logprobs = _as_tensor(teacher_logprobs, torch.float32)
        self.action_mask = _as_tensor(action_mask, torch.bool)
        self.reward = reward
        self.truncate_status = truncate_status
        self.info = {} if info is None else info
        self.metrics = {} if metrics is None else metrics
        self.prompt_length = prompt_length
        self.response_text = response_text
        self.prompt_text = prompt_text
        self.messages = messages
        self.tools = tools
        self.chosen_messages = chosen_messages
        self.rejected_messages = rejected_messages
        self.multi_modal_inputs = (
            None
            if multi_modal_inputs is None
            else {
                k: v if isinstance(v, Tensor) else torch.as_tensor(v) for k, v in multi_modal_inputs.items()
            }
        )
        self.custom_fields = [] if custom_fields is None else list(custom_fields)

        if self.action_mask is not None:
            self.experience_type = "multi_turn"
        elif self.chosen is not None and self.rejected is not None:
            self.experience_type = "dpo"
            self.prompt_length = 0 if self.tokens is None else len(self.tokens)
        else:
            self.experience_type = "single_turn"
            self._init_single_turn_mask()

    def _init_single_turn_mask(self) -> None:
        if self.prompt_length <= 0:
            raise ExperienceError(
                f"a single-turn experience needs prompt_length > 0, got {self.prompt_length}"
            )
        if self.truncate_status == "prompt_truncated":
            # A truncated prompt has no usable response: mask every response position out.
            length = 0 if self.logprobs is None else len(self.logprobs)
            self.action_mask = torch.zeros(length, dtype=torch.bool)
            return
        if self.tokens is None:
            raise ExperienceError("a single-turn experience needs tokens")
        # shape[0] is len() without Tensor.__len__'s Python wrapper; len() keeps its error for 0-d tokens.
        length = self.tokens.shape[0] if self.tokens.dim() else len(self.tokens)
        if length <= self.prompt_length:
            raise ExperienceError(
                f"a single-turn experience needs a response: len(tokens)={length} "
                f"<= prompt_length={self.prompt_length}"
            )
        self.action_mask = torch.ones(length - self.prompt_length, dtype=torch.bool)

    @classmethod
    def _restore(cls, fields: dict[str, Any]) -> Experience:
        """Rebuild an experience from already-validated field values, skipping constructor logic.

        Used by decoders so that a round trip returns exactly what was stored (``experience_type``
        included). ``fields`` must hold every dataclass field.
        """
        exp = cls.__new__(cls)
        exp.__dict__.update(fields)
        return exp

    @property
    def response_length(self) -> int:
        """Number of response tokens: ``len(tokens) - prompt_length`` (0 for a DPO pair)."""
        return 0 if self.tokens is None else len(self.tokens) - self.prompt_length

    def to_dict(self) -> dict[str, Any]:
        """Return the non-tensor content as a JSON-friendly dict (what a JSONL writer stores).

        Always present: ``eid``, ``type``, ``prompt_length``, ``response_length``, ``info`` and
        ``metrics``; the optional text, message, reward and truncation fields appear when set.
        """
        out: dict[str, Any] = {
            "eid": self.eid.to_dict(),
            "type": self.experience_type,
            "prompt_length": self.prompt_length,
            "response_length": self.response_length,
            "info": self.info,
            "metrics": self.metrics,
        }
        for name in (
            "prompt_text",
            "response_text",
            "messages",
            "tools",
            "chosen_messages",
            "rejected_messages",
            "truncate_status",
        ):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.reward is not None:
            out["reward"] = float(self.reward)
        return out

    def serialize(self) -> bytes:
        """Encode this experience in the pickle-free wire format (see :mod:`trinity_core.codec`)."""
        return _wire_format().serialize_many([self])

    @classmethod
    def deserialize(cls, data: bytes, *, allow_pickle: bool = False) -> Experience:
        """Decode a payload holding exactly one experience.

        Raises :class:`~trinity_core.codec.ExperienceDecodeError` for anything else. ``allow_pickle``
        is unsafe; see :func:`trinity_core.codec.deserialize_many`.
        """
        return _wire_format().deserialize_one(data, allow_pickle=allow_pickle)

    @classmethod
    def serialize_many(cls, experiences: Sequence[Experience]) -> bytes:
        """Encode a list of experiences in one compact, pickle-free payload."""
        return _wire_format().serialize_many(experiences)

    @classmethod
    def deserialize_many(cls, data: bytes, *, allow_pickle: bool = False) -> list[Experience]:
        """Decode a payload written by :meth:`serialize_many` (or, opt-in and unsafe, a legacy pickle)."""
        return _wire_format().deserialize_many(data, allow_pickle=allow_pickle)

    def __copy__(self) -> Experience:
        # Defined so that copying stays a plain attribute copy: the codec registers pickling of
        # experiences with copyreg, which the copy module would otherwise use too.
        return self._restore(dict(self.__dict__))

    def __deepcopy__(self, memo: dict[int, Any]) -> Experience:
        return self._restore(copy.deepcopy(self.__dict__, memo))

    def __repr__(self) -> str:
        length = None if self.tokens is None else len(self.tokens)
        return (
            f"Experience(eid={self.eid.uid!r}, type={self.experience_type}, tokens={length}, "
            f"prompt_length={self.prompt_length}, reward={self.reward})"
        )


class WireFormat(NamedTuple):
    """The encoder and decoders behind :meth:`Experience.serialize` and friends.

    Registered by :mod:`trinity_core.codec` when it is imported (importing :mod:`trinity_core` does), so
    that this module needs no import of the codec.
    """

    serialize_many: Callable[[Sequence[Experience]], bytes]
    deserialize_many: Callable[..., list[Experience]]
    deserialize_one: Callable[..., Experience]


_WIRE_FORMAT: list[WireFormat] = []


def register_wire_format(wire_format: WireFormat) -> None:
    """Make ``wire_format`` the one :class:`Experience`'s (de)serialization methods use."""
    _WIRE_FORMAT[:] = [wire_format]


def _wire_format() -> WireFormat:
    if not _WIRE_FORMAT:
        raise RuntimeError("no wire format is registered; import trinity_core.codec first")
    return _WIRE_FORMAT[0]


_GROUP_KEYS = {"task": "tid", "run": "rid", "step": "sid"}


def group_by(
    experiences: Sequence[Experience], id_type: Literal["task", "run", "step"]
) -> dict[str, list[Experience]]:
    """Group experiences by ``eid.tid`` (``"task"``), ``eid.rid`` (``"run"``) or ``eid.sid`` (``"step"``).

    Groups and the experiences inside them keep first-appearance order.
    """
    try:
        attr = _GROUP_KEYS[id_type]
    except KeyError:
        raise ValueError(f"group_by: id_type must be one of {sorted(_GROUP_KEYS)}, got {id_type!r}") from None
    groups: dict[str, list[Experience]] = {}
    for exp in experiences:
        groups.setdefault(getattr(exp.eid, attr), []).append(exp)
    return groups


def split_dpo_experience_to_single_turn(experiences: Sequence[Experience]) -> list[Experience]:
    """Turn each DPO pair into two single-turn experiences, chosen first, then rejected.

    Both halves keep the pair's batch, task, run and step (with fresh suffixes), reward, prompt text and
    custom fields; ``tokens`` is the prompt followed by that response and ``messages`` the matching message
    list. Unlike the reference, the two halves get independent copies of ``info`` and ``metrics``, so
    editing one never changes the other.
    """
    out: list[Experience] = []
    for exp in experiences:
        if exp.chosen is None or exp.rejected is None or exp.tokens is None:
            raise ExperienceError(f"split_dpo_experience_to_single_turn: {exp!r} is not a DPO pair")
        prompt = exp.tokens
        for response, messages in ((exp.chosen, exp.chosen_messages), (exp.rejected, exp.rejected_messages)):
            out.append(
                Experience(
                    eid=EID(batch=exp.eid.batch, task=exp.eid.task, run=exp.eid.run, step=exp.eid.step),
                    tokens=torch.cat([prompt, response.to(prompt.dtype)]),
                    prompt_length=len(prompt),
                    reward=exp.reward,
                    info=copy.deepcopy(exp.info),
                    metrics=dict(exp.metrics),
                    prompt_text=exp.prompt_text,
                    messages=copy.deepcopy(messages),
                    custom_fields=list(exp.custom_fields),
                )
            )
    return out


def experience_field_names() -> tuple[str, ...]:
    """Names of every stored field of :class:`Experience`, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(Experience))
