"""Errors of workflows."""

from __future__ import annotations

__all__ = ["WorkflowError"]


class WorkflowError(ValueError):
    """A workflow cannot be used: unknown, bad arguments, bad experiences, or every episode failed."""
