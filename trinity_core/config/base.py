"""The base of every config section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Section"]


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, assignments are validated, and no float
    field takes ``nan`` or an infinity (``lr: .inf`` is refused here, not by the optimizer later)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
