"""The ``dataset`` task: prompts and answers from a user's dataset, read through ``datasets.load_dataset``.

Rows are read by index, never all materialised; each epoch is a new seeded order, and the position in it
is part of the checkpoint (:meth:`DatasetTask.state_dict`).
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from typing import Any, ClassVar

import torch
from pydantic import Field

from trinity_core.components.base import ComponentArgs
from trinity_core.train.data.dataset_io import TaskDataError, load_split
from trinity_core.train.data.selectors import EpochOrder
from trinity_core.train.data.tasks import Task

__all__ = ["RESERVED_FIELDS", "DatasetTask", "TaskDataError"]


RESERVED_FIELDS = ("prompts", "completions", "completion_ids", "truncated", "prompt_messages")
"""Names the trainer passes to reward functions itself: a dataset column with one of them is refused."""


class _DatasetArgs(ComponentArgs):
    path: str = Field(
        "",
        description="A json/jsonl/parquet/csv/arrow file or folder, a save_to_disk folder, or a hub id "
        "(read from the local cache when offline).",
    )
    split: str = Field("train", description="Split to train on (datasets' slicing works: 'train[:90%]').")
    eval_split: str | None = Field(
        None, description="Split for the held-out evaluation; None: the last eval rows of the train split."
    )
    prompt_key: str = Field("prompt", description="Column holding the prompt text.")
    answer_key: str | None = Field(
        None,
        description="Column holding the reference answer, given to reward functions as `answer`; None: "
        "`answer` when the dataset has it.",
    )
    messages_key: str | None = Field(
        None, description="Column of chat messages ([{role, content}, ...]) used instead of prompt_key."
    )
    system_prompt: str | None = Field(None, description="A system message put before every prompt.")
    prompt_template: str | None = Field(
        None,
        description="str.format template over the row's columns, e.g. '{question}\\nPut the final answer "
        "after ####.'; replaces prompt_key.",
    )
    shuffle: bool = Field(True, description="Read rows in a seeded random order, a new one each epoch.")


class DatasetTask(Task):
    """Rows of a json/jsonl/parquet/csv/arrow file or folder, save_to_disk folder or hub id.

    The data is read with ``datasets`` (see :func:`trinity_core.train.data.dataset_io.load_split`).
    Each row keeps every column (reward functions receive them by name) and gains ``prompt`` (the text
    to complete: ``prompt_key``'s value, ``prompt_template`` rendered, or the messages' contents one per
    line), ``answer`` (``answer_key``'s value, when the column exists) and ``prompt_messages`` (the
    conversation: ``system_prompt`` and the prompt as a user message, or ``messages_key``'s value), for
    chat templates. Training reads rows by index in a seeded random order that changes each epoch; epochs
    wrap; :meth:`state_dict` holds the position, so a resumed run continues where it stopped. Every
    row's prompt is checked once when the task is built, so a bad row fails before training starts.
    """

    Args: ClassVar[type[ComponentArgs]] = _DatasetArgs
    path: str
    split: str
    eval_split: str | None
    prompt_key: str
    answer_key: str | None
    messages_key: str | None
    system_prompt: str | None
    prompt_template: str | None
    shuffle: bool

    def __init__(self, **args: Any) -> None:
        """Open the splits and check every prompt; bad data is a :class:`TaskDataError`."""
        super().__init__(**args)
        if self.messages_key is not None and self.prompt_template is not None:
            raise TaskDataError(
                "tasks.args.prompt_template: a template renders prompt columns, but messages_key "
                f"{self.messages_key!r} gives whole conversations; set one of them"
            )
        self._answer_column = self.answer_key or "answer"
        self._train = _Split(self, self.split, "tasks.args.split")
        self._eval = _Split(self, self.eval_split, "tasks.args.eval_split") if self.eval_split else None
        self._reading = EpochOrder(len(self._train), self.shuffle)

    @property
    def fields(self) -> tuple[str, ...]:
        """``prompt``, every column of the dataset, ``answer`` (when present) and ``prompt_messages``."""
        columns = [c for c in self._train.columns if c != "prompt"]
        extra = ["answer"] if self._train.has_answer and "answer" not in columns else []
        return ("prompt", *columns, *extra, "prompt_messages")

    @property
    def conversational(self) -> bool:
        """True with ``messages_key``: the dataset's prompts are conversations, so reward functions get
        them as message lists and the completions as ``[{"role": "assistant", ...}]`` (as TRL does for a
        conversational dataset). A ``prompt_key`` or ``prompt_template`` prompt stays a string, chat
        template or not, as TRL keeps a string prompt a string."""
        return self.messages_key is not None

    def sample(self, n: int, generator: torch.Generator) -> list[dict[str, Any]]:
        """The next ``n`` rows of this epoch's order (wrapping into the next epoch).

        The order of epoch ``e`` is a permutation seeded by ``(seed, e)``, ``seed`` being drawn from
        ``generator`` on the first call (so each rank has its own order), or the file order when
        ``shuffle`` is off: the ``shuffle`` / ``sequential`` task selectors' order
        (:class:`~trinity_core.train.data.selectors.EpochOrder`).
        """
        return self._train.rows(self._reading.take(n, generator).tolist())

    def num_rows(self) -> int:
        """Rows of the train split (what a task selector chooses among)."""
        return len(self._train)

    def rows(self, indices: Iterable[int]) -> list[dict[str, Any]]:
        """The rendered train rows at ``indices``."""
        return self._train.rows(indices)

    def column(self, key: str) -> list[Any]:
        """The values of column ``key`` of the train split, in row order (a selector's difficulty score).

        Raises:
            TaskDataError: the split has no such column.
        """
        if key not in self._train.columns:
            raise TaskDataError(f"{self._train.where} has no column {key!r}; columns: {self._train.columns}")
        return list(self._train.data[key])

    def state_dict(self) -> dict[str, Any]:
        """Where training reads next: ``{"rows", "seed", "epoch", "cursor"}`` (JSON-friendly)."""
        return {"rows": len(self._train), **self._reading.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`; a dataset whose length changed is a :class:`TaskDataError`."""
        if not state:
            return
        if state["rows"] != len(self._train):
            raise TaskDataError(
                f"tasks.args.path: the checkpoint was written while {self.path!r} split {self.split!r} had "
                f"{state['rows']} rows, it now has {len(self._train)}; resume with the same data or start a "
                "new run"
            )
        self._reading.load_state_dict(state)

    def eval_rows(self, n: int, seed: int) -> list[dict[str, Any]]:
        """The first ``n`` rows of ``eval_split``, else the last ``n`` rows of the train split (which
        training reads too: an ``eval_split`` gives a held-out score)."""
        if self._eval is not None:
            return self._eval.rows(range(min(n, len(self._eval))))
        size = len(self._train)
        return self._train.rows(range(max(0, size - n), size))

    def alphabet(self) -> str:
        """Every character of every prompt and string column (for the character-level tokenizer)."""
        return "".join(sorted(self._train.chars))

    def max_response_tokens(self) -> int:
        """Longest ``answer`` in characters (when present) plus EOS, else 32."""
        return self._train.longest_answer + 1 if self._train.has_answer else 32

    # ------------------------------------------------------------------ rendering

    def render(self, row: dict[str, Any], index: int, where: str) -> dict[str, Any]:
        """``row`` with ``prompt``, ``answer`` and ``prompt_messages`` added (``index`` and ``where``
        name the row in errors)."""
        if self.messages_key is not None:
            messages = _check_messages(row[self.messages_key], index, where, self.messages_key)
            if self.system_prompt is not None and messages[0]["role"] != "system":
                messages = [{"role": "system", "content": self.system_prompt}, *messages]
            text = "\n".join(m["content"] for m in messages)
        else:
            if self.prompt_template is not None:
                text = self._fill(row, index, where)
            else:
                text = row[self.prompt_key]
                if not isinstance(text, str) or not text:
                    # str() would turn None into "None" and [1, 2] into "[1, 2]": train on text only.
                    raise TaskDataError(
                        f"tasks.args.prompt_key: row {index} of {where} has {self.prompt_key} = {text!r:.40} "
                        f"({type(text).__name__}); every prompt must be a non-empty string: fix or drop the "
                        "row"
                    )
            messages = [{"role": "user", "content": text}]
            if self.system_prompt is not None:
                messages.insert(0, {"role": "system", "content": self.system_prompt})
                text = f"{self.system_prompt}\n{text}"
        out = {**row, "prompt": text, "prompt_messages": messages}
        if self._answer_column in row:
            if row[self._answer_column] is None:
                raise TaskDataError(
                    f"tasks.args.answer_key: row {index} of {where} has {self._answer_column} = None; every "
                    "answer must be given: fix or drop the row"
                )
            out["answer"] = row[self._answer_column]
        return out

    def _fill(self, row: dict[str, Any], index: int, where: str) -> str:
        assert self.prompt_template is not None
        for name in _template_fields(self.prompt_template):
            if row[name] is None:
                raise TaskDataError(
                    f"tasks.args.prompt_template: row {index} of {where} has {name} = None; fix or drop "
                    "the row"
                )
        try:
            text = self.prompt_template.format(**row)
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            raise TaskDataError(
                f"tasks.args.prompt_template: cannot render row {index} of {where} ({type(exc).__name__}: "
                f"{exc}); fix the template (a literal brace is written {{{{ or }}}})"
            ) from None
        if not text:
            raise TaskDataError(
                f"tasks.args.prompt_template: row {index} of {where} renders an empty prompt; fix or drop "
                "the row"
            )
        return text


def _template_fields(template: str) -> list[str]:
    """Column names a ``str.format`` template reads (``{question}``, ``{row[0]}`` reads ``row``)."""
    names = []
    for _, field, _, _ in string.Formatter().parse(template):
        if field is not None:
            names.append(field.split(".")[0].split("[")[0])
    return names


def _check_messages(value: Any, index: int, where: str, key: str) -> list[dict[str, str]]:
    """``value`` as a non-empty list of ``{"role": str, "content": str}`` messages."""
    ok = (
        isinstance(value, list)
        and value
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in value
        )
    )
    if not ok:
        raise TaskDataError(
            f"tasks.args.messages_key: row {index} of {where} has {key} = {value!r:.60}; every row must hold "
            'a non-empty list of {"role": str, "content": str} messages: fix or drop the row'
        )
    return [{"role": m["role"], "content": m["content"]} for m in value]


class _Split:
    """One split of a :class:`DatasetTask`: the Arrow-backed dataset, checked once, read by index."""

    def __init__(self, task: DatasetTask, split: str, key: str) -> None:
        self.task = task
        self.data = load_split(task.path, split, key=key)
        self.where = f"dataset '{task.path}' split '{split}'"
        self.columns: list[str] = list(self.data.column_names)
        if len(self.data) == 0:
            raise TaskDataError(f"tasks.args.path: {self.where} is empty; give it at least one row")
        needed = {
            "tasks.args.messages_key": [task.messages_key] if task.messages_key is not None else [],
            "tasks.args.prompt_template": _template_fields(task.prompt_template or ""),
            "tasks.args.prompt_key": [task.prompt_key]
            if task.messages_key is None and task.prompt_template is None
            else [],
            "tasks.args.answer_key": [task.answer_key] if task.answer_key is not None else [],
        }
        for config_key, names in needed.items():
            for name in names:
                if name not in self.columns:
                    raise TaskDataError(
                        f"{config_key}: {self.where} has no column {name!r}; columns: {self.columns}"
                    )
        reserved = [c for c in self.columns if c in RESERVED_FIELDS]
        if reserved:
            raise TaskDataError(
                f"tasks.args.path: {self.where} has column(s) {reserved}, names the trainer passes to reward "
                "functions itself; rename them (Dataset.rename_column)"
            )
        self.has_answer = task._answer_column in self.columns
        self.chars: set[str] = set()
        self.longest_answer = 0
        self._scan()

    def __len__(self) -> int:
        return len(self.data)

    def _scan(self) -> None:
        """Render every row once, in batches (none kept): bad rows fail now, not at step 500."""
        start = 0
        for batch in self.data.iter(batch_size=1000):
            for offset, row in enumerate(_batch_rows(batch)):
                rendered = self.task.render(row, start + offset, self.where)
                for value in (rendered["prompt"], *rendered.values()):
                    if isinstance(value, str):
                        self.chars.update(value)
                if self.has_answer:
                    self.longest_answer = max(self.longest_answer, len(str(rendered["answer"])))
            start += len(next(iter(batch.values()))) if batch else 0

    def rows(self, indices: Iterable[int]) -> list[dict[str, Any]]:
        """The rendered rows at ``indices`` (one Arrow ``take``)."""
        wanted = list(indices)
        if not wanted:
            return []
        batch = _batch_rows(self.data[wanted])
        return [self.task.render(row, i, self.where) for i, row in zip(wanted, batch, strict=True)]


def _batch_rows(batch: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """A column batch (``{column: [values]}``) as rows."""
    columns = list(batch)
    return [dict(zip(columns, values, strict=True)) for values in zip(*batch.values(), strict=True)]
