"""The distribution registers every entropy loss under its documented name (needs the plugin installed)."""

from __future__ import annotations

import pytest
from trinity_plugin_entropy import DefaultEntropyLossFn, DummyEntropyLossFn, MixEntropyLossFn

from trinity_core import registry

NAMES = {"default": DefaultEntropyLossFn, "mix": MixEntropyLossFn, "none": DummyEntropyLossFn}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_name_resolves_to_the_class(name: str) -> None:
    registry.reset_registry()
    assert registry.resolve("entropy_loss", name) is NAMES[name]
    assert registry.record("entropy_loss", name).distribution == "trinity-plugin-entropy"
    fn = registry.create("entropy_loss", name, {"entropy_coef": 0.01})
    assert isinstance(fn, NAMES[name])
    assert fn.entropy_coef == 0.01
