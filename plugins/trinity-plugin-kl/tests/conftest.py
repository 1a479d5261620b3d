"""Fixtures: access to the published reference and a host-synchronisation counter."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest
import torch

from trinity_core.testing.reference import import_reference

#: Tensor methods that copy to the host (a synchronisation on an accelerator).
SYNC_METHODS = ("item", "tolist", "__bool__", "cpu", "numpy", "__int__", "__float__", "__index__")


@pytest.fixture
def ref_kl() -> ModuleType:
    """The reference module ``trinity.algorithm.kl_fn.kl_fn`` (skips/fails as the helper decides)."""
    return import_reference("trinity.algorithm.kl_fn.kl_fn")


def _counting(name: str, original: Callable[..., object], calls: list[str]) -> Callable[..., object]:
    def wrapper(self: torch.Tensor, *args: object, **kwargs: object) -> object:
        calls.append(name)
        return original(self, *args, **kwargs)

    return wrapper


@pytest.fixture
def host_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that records the name of every host-synchronising Tensor method called."""
    calls: list[str] = []
    for name in SYNC_METHODS:
        monkeypatch.setattr(torch.Tensor, name, _counting(name, getattr(torch.Tensor, name), calls))
    return calls
