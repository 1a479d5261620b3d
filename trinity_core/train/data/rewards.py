"""Reward functions for ``trinity train`` (kind ``reward_fn``, namespace ``trinity_core.reward_fns``).

A reward function follows TRL's calling convention, so TRL reward functions work unchanged: it is
called with keywords only, ``fn(prompts=..., completions=..., completion_ids=..., **columns)``, and
returns ``list[float | None]``. ``prompts`` and ``completions`` hold one entry per response: strings,
or, when the task's prompts are conversations (:attr:`~trinity_core.train.data.tasks.Task.conversational`:
the ``dataset`` task with ``messages_key``), as TRL passes conversational data, each prompt its list of
messages and each completion ``[{"role": "assistant", "content": text}]`` (:func:`completion_text`
reads either form). ``completion_ids`` are the response token ids up to EOS (when the trainer passes
them),
``columns`` every other field of the task rows as lists aligned with them (a dataset's columns, by
name), plus ``truncated`` (no EOS within the budget). Accept ``**kwargs`` so new fields do not break
the function. ``None`` means "not applicable": with several functions the reward is the weighted sum of
the applicable ones, and a response none applies to gets no reward and is excluded from the group
statistics and the loss. Named parameters without a default (other than ``prompts``, ``completions``
and ``completion_ids``) are the fields the function needs; a task lacking one is an error before
training.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig

if TYPE_CHECKING:
    from trinity_core.train.data.tasks import Task

__all__ = [
    "TRAINER_ARGUMENTS",
    "Completion",
    "RewardError",
    "RewardFn",
    "build_rewards",
    "combine_rewards",
    "completion_text",
    "exact_match",
    "load_reward_fns",
    "prompt_conversations",
    "required_fields",
]

RewardFn = Callable[..., Sequence[float | None]]

Message = Mapping[str, Any]
Completion = str | Sequence[Message]
"""A completion as a reward function receives it: its text, or TRL's conversational form (a list with
the assistant's message)."""

TRAINER_ARGUMENTS = ("prompts", "completions", "completion_ids")
"""Keywords the trainer passes to every reward function itself (the rest are the task's fields)."""


class RewardError(ValueError):
    """A reward function failed or returned something other than one finite float (or None) per
    completion."""


def completion_text(completion: Completion) -> str:
    """The text of a completion in either form: a string as it is, a conversational completion's last
    message's content (TRL's form has one message, the assistant's)."""
    if isinstance(completion, str):
        return completion
    return str(completion[-1]["content"]) if completion else ""


def exact_match(
    prompts: Sequence[Any], completions: Sequence[Completion], answer: Sequence[Any], **kwargs: Any
) -> list[float]:
    """1.0 when the completion (a string or a conversational completion) equals the answer exactly (and
    ended with EOS), else 0.0."""
    truncated = kwargs.get("truncated") or [False] * len(completions)
    return [
        1.0 if (not cut and completion_text(c) == str(a)) else 0.0
        for c, a, cut in zip(completions, answer, truncated, strict=True)
    ]


def prompt_conversations(
    task: Any, rows: Sequence[Mapping[str, Any]], repeat: int
) -> list[list[Message]] | None:
    """Each response's prompt messages (``rows`` repeated ``repeat`` times, row-major) when ``task``'s
    prompts are conversations, for :func:`combine_rewards`; None when reward functions get strings."""
    if not getattr(task, "conversational", False):
        return None
    return [list(row["prompt_messages"]) for row in rows for _ in range(repeat)]


def required_fields(fn: Callable[..., Any]) -> list[str]:
    """Named parameters of ``fn`` without a default, those in :data:`TRAINER_ARGUMENTS` excluded."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    bound = set(fn.keywords) if isinstance(fn, functools.partial) else set()
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in params
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.default is p.empty
        and p.name not in {"self", *TRAINER_ARGUMENTS, *bound}
    ]


def load_reward_fns(names: Sequence[str], args: Mapping[str, Mapping[str, Any]]) -> list[RewardFn]:
    """Resolve reward functions by name; ``args[name]`` are bound as keywords (a class is instantiated)."""
    from trinity_core import registry

    fns: list[RewardFn] = []
    for name in names:
        obj = registry.resolve("reward_fn", name)
        kwargs = dict(args.get(name, {}))
        if isinstance(obj, type):
            fns.append(registry.create("reward_fn", name, kwargs))
        else:
            fns.append(functools.partial(obj, **kwargs) if kwargs else obj)
    return fns


def _value(name: str, value: Any, index: int, prompt: str, completion: str) -> float | None:
    """``value`` as a float (``None`` kept); anything but a finite real number is a :class:`RewardError`."""
    if value is None:
        return None
    where = f"completion {index} ({completion!r} for prompt {prompt!r})"
    if not isinstance(value, numbers.Real):
        raise RewardError(
            f"reward function {name!r} returned {value!r} ({type(value).__name__}) for {where}; return a "
            "float, or None for 'not applicable'"
        )
    number = float(value)
    if not math.isfinite(number):
        raise RewardError(
            f"reward function {name!r} returned {number} for {where}; return a finite float, or None for "
            "'not applicable'"
        )
    return number


def _form_hint(exc: Exception, conversational: bool) -> str:
    """For a TypeError or AttributeError (maybe a function written for the other form of completions),
    the form it was given."""
    if not isinstance(exc, TypeError | AttributeError):
        return ""
    if conversational:
        return (
            '; it was given conversations (prompts as message lists, completions as [{"role": '
            '"assistant", "content": ...}]) because tasks.args.messages_key is set'
        )
    return "; it was given strings (conversations come only from tasks.args.messages_key)"


def combine_rewards(
    fns: Sequence[RewardFn],
    weights: Sequence[float],
    names: Sequence[str],
    prompts: list[str],
    completions: list[str],
    fields: Mapping[str, list[Any]],
    completion_ids: Sequence[Sequence[int]] | None = None,
    conversations: Sequence[Sequence[Message]] | None = None,
) -> list[float | None]:
    """Weighted sum of the applicable rewards per response (``None`` when no function applies).

    Each function is called as ``fn(prompts=prompts, completions=completions,
    completion_ids=completion_ids, **fields)`` (``completion_ids`` left out when not given). With
    ``conversations`` (each response's prompt messages) the call is conversational, as TRL's: ``prompts``
    are those conversations and each completion is ``[{"role": "assistant", "content": text}]``; errors
    still quote the texts.

    Raises:
        RewardError: a function raised, returned the wrong number of values, or a value that is not a
            finite real number or ``None`` (a string, NaN, infinity).
    """
    total: list[float | None] = [None] * len(completions)
    given: dict[str, Any] = {"prompts": prompts, "completions": completions, **fields}
    if conversations is not None:
        given["prompts"] = [list(c) for c in conversations]
        given["completions"] = [[{"role": "assistant", "content": c}] for c in completions]
    if completion_ids is not None:
        given["completion_ids"] = [list(ids) for ids in completion_ids]
    for fn, weight, name in zip(fns, weights, names, strict=True):
        try:
            returned = fn(**given)
        except Exception as exc:
            # A user's function failed: name it; the traceback stays on the chain for --debug.
            raise RewardError(
                f"reward function {name!r} raised {type(exc).__name__}: {exc}; fix the function "
                f"(trinity train --debug shows the traceback){_form_hint(exc, conversations is not None)}"
            ) from exc
        if isinstance(returned, str | bytes) or not isinstance(returned, Iterable):
            raise RewardError(
                f"reward function {name!r} returned {type(returned).__name__} {returned!r:.40}; return a "
                "list with one float (or None) per completion"
            )
        values = list(returned)
        if len(values) != len(completions):
            raise RewardError(
                f"reward function {name!r} returned {len(values)} values for {len(completions)} completions; "
                "return one value per completion"
            )
        for i, raw in enumerate(values):
            v = _value(name, raw, i, prompts[i], completions[i])
            if v is None:
                continue
            prev = total[i]
            total[i] = weight * v if prev is None else prev + weight * v
    return total


def build_rewards(config: ResolvedConfig, task: Task) -> tuple[list[str], list[RewardFn], list[float]]:
    """Reward functions, names and weights; checks that the task provides every field they need."""
    from trinity_core import registry

    names = list(config.tasks.reward_fns or task.default_reward_fns)
    weights = list(config.tasks.reward_weights or [1.0] * len(names))
    problems: list[ConfigProblem] = []
    if len(weights) != len(names):
        problems.append(
            ConfigProblem(
                "tasks.reward_weights", f"{len(weights)} weights for {len(names)} reward functions {names}"
            )
        )
    unknown = sorted(set(config.tasks.reward_fn_args) - set(names))
    if unknown:
        problems.append(
            ConfigProblem("tasks.reward_fn_args", f"arguments for reward functions not in use: {unknown}")
        )
    try:
        fns = load_reward_fns(names, config.tasks.reward_fn_args)
    except registry.PluginError as exc:
        problems.append(ConfigProblem("tasks.reward_fns", str(exc)))
        raise ConfigError(problems) from None
    available = {*task.fields, "truncated"}
    for name, fn in zip(names, fns, strict=True):
        missing = [f for f in required_fields(fn) if f not in available]
        if missing:
            problems.append(
                ConfigProblem(
                    "tasks",
                    f"reward function {name!r} needs field(s) {missing} but task "
                    f"{config.tasks.label!r} provides {sorted(task.fields)}",
                    hint="add the column to the dataset or choose another reward function",
                )
            )
    if problems:
        raise ConfigError(problems)
    return names, fns, weights
