"""Agreement with trinity-rft 0.6.0 OnPolicyDistillAdvantage / JSDAdvantage on random inputs."""

from __future__ import annotations

import pytest
import torch
from distill_support import random_batch, reference_inputs, reference_module
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_distill import JSDAdvantage, OnPolicyDistillAdvantage

pytestmark = pytest.mark.reference


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), rows=st.integers(2, 6), kl_coef=st.floats(0.0, 3.0))
def test_on_policy_distill_matches_reference(seed: int, rows: int, kl_coef: float) -> None:
    ref_cls = reference_module("trinity.algorithm.advantage_fn.on_policy_distill_advantage")
    batch = random_batch(seed, rows, 7)
    theirs, their_metrics = ref_cls.OnPolicyDistillAdvantage(kl_coef=kl_coef)(reference_inputs(batch))
    ours, metrics = OnPolicyDistillAdvantage(kl_coef=kl_coef)(batch)
    torch.testing.assert_close(ours.advantages, theirs.batch["advantages"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours.returns, theirs.batch["returns"], rtol=1e-5, atol=1e-6)
    for key in ("kl/mean", "kl/std", "advantages/mean"):
        assert float(metrics[key]) == pytest.approx(their_metrics[key], rel=1e-4, abs=1e-5)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    beta=st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]),
    temperature=st.sampled_from([1.0, 0.7, 2.0]),
    chunk=st.sampled_from([None, 3]),
)
def test_jsd_matches_reference(seed: int, beta: float, temperature: float, chunk: int | None) -> None:
    ref = reference_module("trinity.algorithm.advantage_fn.jsd_advantage")
    args = {"lambda_coef": beta, "kl_coef": 1.5, "temperature": temperature, "chunk_size": chunk}
    batch = random_batch(seed, 5, 7)
    theirs, their_metrics = ref.JSDAdvantage(**args)(reference_inputs(batch))
    ours, metrics = JSDAdvantage(**args, estimator="reference")(batch)
    torch.testing.assert_close(ours.advantages, theirs.batch["advantages"], rtol=1e-5, atol=1e-6)
    for key in ("jsd/mean", "jsd/std", "advantages/mean"):
        assert float(metrics[key]) == pytest.approx(their_metrics[key], rel=1e-4, abs=1e-5)
