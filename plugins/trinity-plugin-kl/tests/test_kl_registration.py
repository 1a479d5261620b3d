"""The distribution registers every KL function under its documented name (needs the plugin installed)."""

from __future__ import annotations

import pytest
from trinity_plugin_kl import (
    AbsFn,
    AbsPlusFn,
    CorrectedK3Fn,
    DummyKLFn,
    K1Fn,
    K1PlusFn,
    K2Fn,
    K3Fn,
    K3PlusFn,
    LowVarKLFn,
    LowVarKLPlusFn,
)

from trinity_core import registry

NAMES = {
    "none": DummyKLFn,
    "k1": K1Fn,
    "k2": K2Fn,
    "k3": K3Fn,
    "low_var_kl": LowVarKLFn,
    "abs": AbsFn,
    "corrected_k3": CorrectedK3Fn,
    "k1+": K1PlusFn,
    "abs+": AbsPlusFn,
    "k3+": K3PlusFn,
    "low_var_kl+": LowVarKLPlusFn,
}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_name_resolves_to_the_class(name: str) -> None:
    registry.reset_registry()
    assert registry.resolve("kl_fn", name) is NAMES[name]
    rec = registry.record("kl_fn", name)
    assert rec.distribution == "trinity-plugin-kl"
    fn = registry.create("kl_fn", name, {"kl_coef": 0.25})
    assert isinstance(fn, NAMES[name])
    assert fn.kl_coef.item() == 0.25
