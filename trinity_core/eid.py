"""The experience id: :class:`EID` and the escaping that keeps its derived ids unambiguous."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EID", "SUFFIX_HEX_CHARS", "escape_id_component"]

#: Length of the random hex suffix of a fresh :class:`EID` (64 bits; the reference used 24).
SUFFIX_HEX_CHARS = 16


def _new_suffix() -> str:
    # os.urandom: a fraction of uuid4's cost, and fork-safe (the kernel's generator, no user-space state).
    return os.urandom(SUFFIX_HEX_CHARS // 2).hex()


def escape_id_component(part: int | str) -> str:
    """Render one id component so that the ``/`` separator stays unambiguous.

    ``%`` becomes ``%25`` and ``/`` becomes ``%2F`` (percent-encoding, as in URLs); any other text,
    including every integer, is unchanged, so ids of ordinary tasks read as in the reference.
    """
    text = str(part)
    if "/" in text or "%" in text:
        return text.replace("%", "%25").replace("/", "%2F")
    return text


@dataclass(slots=True)
class EID:
    """Experience ID: identifies one experience and the groups it belongs to.

    ``batch`` is the explorer step and ``task`` the task's index within it (both set by the rollout
    runner); ``run`` numbers the repeated rollouts of one task and ``step`` the turns inside one run (set
    them in custom workflows); ``suffix`` is random and makes ``uid`` unique.

    The derived ids join components with ``/``:

    ====== ========================== =============================================
    id     components                 experiences that share it
    ====== ========================== =============================================
    uid    batch/task/run/step/suffix one experience
    sid    batch/task/step            all runs of a task at one step
    rid    batch/task/run             all steps of one run of a task
    tid    batch/task                 all runs and steps of one task (a GRPO group)
    ====== ========================== =============================================

    A component that contains ``/`` or ``%`` is percent-escaped (``/`` -> ``%2F``, ``%`` -> ``%25``), so
    ``EID(batch=1, task="a/b")`` has ``tid == "1/a%2Fb"`` and can never collide with
    ``EID(batch="1/a", task="b")``. Integers and the string of the same integer give the same id
    (``task=3`` and ``task="3"`` are one task), which keeps ids stable across stores that keep ids as text.

    ``repr`` reads as trinity-rft's (``EID(batch=1, task=2, run=3, step=4, uuid=abc123)``, the suffix
    named ``uuid``, values unquoted); ``str`` is the escaped, unambiguous ``uid``.

    Slotted: the five fields are stored in the object itself (grouping reads them from every experience
    of a batch, one cache miss fewer each), so an EID takes no attributes beyond them.
    """

    batch: int | str = ""
    task: int | str = ""
    run: int = 0
    step: int = 0
    suffix: str = field(default_factory=_new_suffix)

    @property
    def uid(self) -> str:
        """A unique identifier of the experience: ``batch/task/run/step/suffix``."""
        return (
            f"{escape_id_component(self.batch)}/{escape_id_component(self.task)}/{escape_id_component(self.run)}/"
            f"{escape_id_component(self.step)}/{escape_id_component(self.suffix)}"
        )

    @property
    def sid(self) -> str:
        """Step id: ``batch/task/step``, shared by all runs of a task at the same step."""
        return f"{self.tid}/{escape_id_component(self.step)}"

    @property
    def rid(self) -> str:
        """Run id: ``batch/task/run``, shared by all steps of one run of a task."""
        return f"{self.tid}/{escape_id_component(self.run)}"

    @property
    def tid(self) -> str:
        """Task id: ``batch/task``, shared by every run of a task (the group of GRPO-like algorithms)."""
        return f"{escape_id_component(self.batch)}/{escape_id_component(self.task)}"

    def to_dict(self) -> dict[str, Any]:
        """Return the five fields as a plain dict (``EID(**eid.to_dict()) == eid``)."""
        return {
            "batch": self.batch,
            "task": self.task,
            "run": self.run,
            "step": self.step,
            "suffix": self.suffix,
        }

    def __str__(self) -> str:
        return self.uid

    def __repr__(self) -> str:
        """``EID(batch=1, task=2, run=3, step=4, uuid=abc123)``, as trinity-rft prints it."""
        fields = f"batch={self.batch}, task={self.task}, run={self.run}, step={self.step}"
        return f"EID({fields}, uuid={self.suffix})"
