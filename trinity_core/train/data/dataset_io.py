"""Open one split of a dataset with Hugging Face ``datasets``, whatever a user has on disk.

:func:`load_split` accepts a json / jsonl / parquet / csv / arrow file, a folder of such files, a folder
written by ``save_to_disk`` (a ``Dataset`` or ``DatasetDict``), or a hub id (found in the local cache
when offline). The result is an Arrow-backed ``datasets.Dataset``: memory-mapped, read row by row by
index, never materialised as Python objects. Every failure is a :class:`TaskDataError` naming the config
key, the path and what to do.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["BUILDERS", "TaskDataError", "load_split"]

BUILDERS: dict[str, str] = {
    ".json": "json",
    ".jsonl": "json",
    ".parquet": "parquet",
    ".csv": "csv",
    ".arrow": "arrow",
}
"""The ``datasets`` builder that reads a file, by file extension."""

_FORMATS = "a json/jsonl/parquet/csv/arrow file or folder, a save_to_disk folder, or a hub id"


class TaskDataError(ValueError):
    """A task's data is unusable (missing file, missing fields, empty)."""


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No progress bars and no error logs from ``datasets`` while loading: our one-line error says it."""
    import datasets

    bars_were_off = datasets.utils.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    log = logging.getLogger("datasets")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)
        if not bars_were_off:
            datasets.enable_progress_bars()


def _saved_to_disk(folder: Path) -> bool:
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def _empty_file(path: Path, builder: str) -> bool:
    """Whether ``path`` holds no rows (``datasets`` fails on such files with messages about batches)."""
    if builder == "parquet":
        import pyarrow.parquet as pq

        try:
            return bool(pq.ParquetFile(path).metadata.num_rows == 0)
        except Exception:  # not parquet after all: load_dataset reports it
            return False
    if builder in ("json", "csv"):
        with path.open("rb") as f:
            return not f.read(1 << 16).strip() and not f.read(1)
    return path.stat().st_size == 0


def _cause(exc: BaseException) -> str:
    """The message of the error ``datasets`` wrapped (its ``DatasetGenerationError`` says only that)."""
    inner = exc.__cause__ or exc.__context__
    text = str(inner) if inner is not None and str(inner) else str(exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def _from_disk(folder: Path, split: str, key: str) -> Any:
    import datasets

    try:
        data: Any = datasets.load_from_disk(str(folder))
    except IndexError:  # what `datasets` raises for a dataset saved with no rows (no shards)
        raise TaskDataError(
            f"tasks.args.path: dataset '{folder}' is empty; give it at least one row"
        ) from None
    except (OSError, ValueError) as exc:
        raise TaskDataError(
            f"tasks.args.path: cannot load a dataset from '{folder}' ({exc}); write it with "
            "Dataset.save_to_disk(path)"
        ) from None
    if isinstance(data, datasets.DatasetDict):
        if split not in data:
            raise TaskDataError(f"{key}: '{folder}' has no split {split!r}; splits: {sorted(data)}")
        data = data[split]
    return data


def load_split(path: str, split: str, *, key: str = "tasks.args.split") -> Any:
    """Split ``split`` of the dataset at ``path`` as a ``datasets.Dataset``.

    A single file holds one split, ``train``; ``datasets``' slicing syntax (``train[:90%]``) works for
    everything but ``save_to_disk`` folders. ``key`` names the config key of ``split`` in errors.

    Raises:
        TaskDataError: no such file, an unsupported file type, a file that does not parse, an unknown
            split, a hub id that is neither cached nor reachable.
    """
    import datasets

    if not path:
        raise TaskDataError(f"tasks.args.path: the dataset task needs path=<{_FORMATS}>")
    local = Path(path).expanduser()
    if local.is_dir() and _saved_to_disk(local):
        with _quiet():
            return _from_disk(local, split, key)
    if local.is_file():
        builder = BUILDERS.get(local.suffix.lower())
        if builder is None:
            raise TaskDataError(
                f"tasks.args.path: cannot read '{local}': unknown file type {local.suffix!r}; give one of "
                f"{sorted(BUILDERS)} or a save_to_disk folder"
            )
        try:
            empty = _empty_file(local, builder)
        except OSError as exc:
            raise TaskDataError(
                f"tasks.args.path: cannot read '{local}' ({exc.strerror or exc}); make it readable or give "
                "another path"
            ) from None
        if empty:
            raise TaskDataError(f"tasks.args.path: dataset '{path}' is empty; give it at least one row")
        source, options = builder, {"data_files": {"train": str(local)}}
    elif local.is_dir():
        source, options = str(local), {}
    elif local.is_absolute() or path.startswith((".", "~")) or local.suffix.lower() in BUILDERS:
        raise TaskDataError(f"tasks.args.path: '{local}' does not exist; give {_FORMATS}")
    else:
        source, options = path, {}  # a hub id: the local cache, or the hub when online
    try:
        with _quiet():
            data = datasets.load_dataset(source, split=split, **options)
    except StopIteration:  # what the json builder raises for an empty file
        raise TaskDataError(f"tasks.args.path: dataset '{path}' is empty; give it at least one row") from None
    except ValueError as exc:
        if "split" in str(exc).lower():
            raise TaskDataError(f"{key}: '{path}' has no split {split!r} ({exc})") from None
        raise TaskDataError(f"tasks.args.path: cannot load '{path}' ({_cause(exc)})") from None
    except Exception as exc:  # a parse error, a hub id not cached: `datasets` has no common base
        raise TaskDataError(
            f"tasks.args.path: cannot load '{path}' ({_cause(exc)}); give {_FORMATS} (hub ids are read from "
            "the local cache when offline)"
        ) from None
    return data
