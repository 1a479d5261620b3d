"""The per-pair dpo loss: golden values, pairing by adjacency and by ids, errors, masking, host syncs,
micro-batches."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch
from dpo_support import loss_and_grad, pair_batch
from hypothesis import given, settings
from hypothesis import strategies as st
from trinity_plugin_dpo import DPOLossFn, pair_order

from trinity_core.ops import global_normalizers
from trinity_core.testing import count_host_syncs


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_defaults_keys_and_argument_validation() -> None:
    assert DPOLossFn.default_args() == {"beta": 0.1, "label_smoothing": 0.0, "use_pair_ids": False}
    assert DPOLossFn().select_keys == ["ref_log_prob", "response_mask"]
    assert DPOLossFn(use_pair_ids=True).select_keys == [
        "ref_log_prob",
        "response_mask",
        "pair_id",
        "chosen_mask",
    ]
    assert DPOLossFn(backend="tinker").select_keys == ["ref_logprob", "action_mask"]
    with pytest.raises(pydantic.ValidationError, match="beta"):
        DPOLossFn(beta=0.0)
    with pytest.raises(pydantic.ValidationError, match="label_smoothing"):
        DPOLossFn(label_smoothing=0.7)


def golden() -> dict[str, torch.Tensor]:
    # Two pairs. Row sums of logp − ref over the mask: ρ = [2, −1, 0, 1]  ->  z = [3, −1].
    # The masked third column holds values that must be ignored.
    logprob = torch.tensor([[-1.0, -1.0, -9.0], [-2.0, -1.0, -9.0], [-1.0, -2.0, -9.0], [-0.5, -1.5, -9.0]])
    ref = torch.tensor([[-2.0, -2.0, 0.0], [-1.0, -1.0, 0.0], [-2.0, -1.0, 0.0], [-1.5, -1.5, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 0], [1, 1, 0]], dtype=torch.bool)
    return {"logprob": logprob.double(), "ref_logprob": ref.double(), "action_mask": mask}


def test_golden_values_two_pairs_in_one_call() -> None:
    beta, eps = 0.5, 0.1
    x = golden()
    loss, metrics, grad = loss_and_grad(
        DPOLossFn(beta=beta, label_smoothing=eps),
        x["logprob"],
        ref_logprob=x["ref_logprob"],
        action_mask=x["action_mask"],
    )
    z = [3.0, -1.0]

    def pair_loss(zk: float) -> float:
        return -(1 - eps) * math.log(sigmoid(beta * zk)) - eps * math.log(sigmoid(-beta * zk))

    assert float(loss) == pytest.approx((pair_loss(3) + pair_loss(-1)) / 2, rel=1e-12)
    # ∂L/∂logp at a selected token of the chosen row of pair k: (1/2) β [−(1−ε) σ(−βz) + ε σ(βz)].
    d = [0.5 * beta * (-(1 - eps) * sigmoid(-beta * zk) + eps * sigmoid(beta * zk)) for zk in z]
    expected = torch.tensor(
        [[d[0], d[0], 0.0], [-d[0], 0.0, 0.0], [d[1], d[1], 0.0], [-d[1], -d[1], 0.0]], dtype=torch.float64
    )
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)
    assert float(metrics["chosen_reward"]) == pytest.approx(beta * (2 + 0) / 2)
    assert float(metrics["rejected_reward"]) == pytest.approx(beta * (-1 + 1) / 2)
    assert float(metrics["accuracy_mean"]) == pytest.approx(0.5)
    assert float(metrics["malformed_pairs"]) == 0.0
    assert float(metrics["dpo_loss"]) == pytest.approx(float(loss))


def test_many_pairs_equal_the_mean_of_one_pair_calls() -> None:
    x = pair_batch(0, pairs=4)
    fn = DPOLossFn(beta=0.3)
    full, _, full_grad = loss_and_grad(
        fn, x["logprob"], ref_logprob=x["ref_logprob"], action_mask=x["action_mask"]
    )
    singles, grads = [], []
    for k in range(4):
        rows = slice(2 * k, 2 * k + 2)
        loss, _, grad = loss_and_grad(
            fn, x["logprob"][rows], ref_logprob=x["ref_logprob"][rows], action_mask=x["action_mask"][rows]
        )
        singles.append(loss)
        grads.append(grad / 4)
    torch.testing.assert_close(full, torch.stack(singles).mean())
    torch.testing.assert_close(full_grad, torch.cat(grads))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), pairs=st.integers(1, 5), data=st.data())
def test_pair_ids_make_the_loss_independent_of_row_order(seed: int, pairs: int, data: st.DataObject) -> None:
    x = pair_batch(seed, pairs=pairs)
    fn = DPOLossFn(beta=0.2, label_smoothing=0.05)
    kwargs = {"ref_logprob": x["ref_logprob"], "action_mask": x["action_mask"]}
    loss, metrics, grad = loss_and_grad(fn, x["logprob"], **kwargs)
    perm = torch.tensor(data.draw(st.permutations(range(2 * pairs))))
    ids = torch.arange(2 * pairs) // 2 * 7 + 100  # arbitrary (non-contiguous) ids
    chosen = torch.arange(2 * pairs) % 2 == 0
    shuffled = {k: v[perm] for k, v in kwargs.items()}
    loss_p, metrics_p, grad_p = loss_and_grad(
        DPOLossFn(beta=0.2, label_smoothing=0.05, use_pair_ids=True),
        x["logprob"][perm],
        pair_id=ids[perm],
        chosen_mask=chosen[perm],
        **shuffled,
    )
    torch.testing.assert_close(loss_p, loss, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(grad_p, grad[perm], rtol=1e-12, atol=1e-15)
    for key in metrics:
        torch.testing.assert_close(metrics_p[key], metrics[key], rtol=1e-12, atol=1e-15)


def test_pair_order_flags_malformed_pairs() -> None:
    order, ok = pair_order(torch.tensor([5, 9, 5, 9]), torch.tensor([False, True, True, False]))
    assert order.tolist() == [2, 0, 1, 3]
    assert ok.tolist() == [True, True]
    _, ok = pair_order(torch.tensor([0, 0, 1, 1]), torch.tensor([True, True, False, False]))
    assert ok.tolist() == [False, False]
    _, ok = pair_order(torch.tensor([0, 0, 0, 1]), torch.tensor([True, False, False, True]))
    assert ok.tolist() == [True, False]


def test_malformed_pairs_give_a_nan_loss_counted_in_the_metrics_and_a_finite_gradient() -> None:
    x = pair_batch(1, pairs=2)
    loss, metrics, grad = loss_and_grad(
        DPOLossFn(),
        x["logprob"],
        ref_logprob=x["ref_logprob"],
        action_mask=x["action_mask"],
        pair_id=torch.tensor([0, 0, 1, 1]),
        chosen_mask=torch.tensor([True, True, False, False]),
    )
    assert math.isnan(float(loss))
    assert float(metrics["malformed_pairs"]) == 2.0
    assert bool(torch.isfinite(grad).all())


def test_shape_and_argument_errors() -> None:
    x = pair_batch(2, pairs=2)
    kwargs = {"ref_logprob": x["ref_logprob"][:3], "action_mask": x["action_mask"][:3]}
    with pytest.raises(ValueError, match="even number of rows"):
        DPOLossFn()(x["logprob"][:3], **kwargs)
    with pytest.raises(ValueError, match="both pair_id and chosen_mask"):
        DPOLossFn()(
            x["logprob"], ref_logprob=x["ref_logprob"], action_mask=x["action_mask"], pair_id=torch.zeros(4)
        )
    with pytest.raises(ValueError, match="use_pair_ids=True"):
        DPOLossFn(use_pair_ids=True)(x["logprob"], ref_logprob=x["ref_logprob"], action_mask=x["action_mask"])


def test_nan_and_inf_at_masked_positions_leak_nowhere() -> None:
    x = pair_batch(3)
    mask = x["action_mask"]
    dirty = {k: v.clone() for k, v in x.items() if k != "action_mask"}
    for i, value in enumerate(dirty.values()):
        value[~mask] = (math.nan, math.inf, -math.inf)[i]
    fn = DPOLossFn(label_smoothing=0.2)
    clean = loss_and_grad(fn, x["logprob"], ref_logprob=x["ref_logprob"], action_mask=mask)
    polluted = loss_and_grad(fn, dirty["logprob"], ref_logprob=dirty["ref_logprob"], action_mask=mask)
    assert torch.equal(clean[0], polluted[0])
    assert torch.equal(clean[2], polluted[2])
    for key, value in clean[1].items():
        assert torch.equal(value, polluted[1][key]), key


@pytest.mark.parametrize("use_ids", [False, True])
def test_no_host_sync_and_detached_zero_dim_metrics(use_ids: bool) -> None:
    x = pair_batch(4)
    extra = {"pair_id": torch.arange(6) // 2, "chosen_mask": torch.arange(6) % 2 == 0} if use_ids else {}
    leaf = x["logprob"].clone().requires_grad_(True)
    with count_host_syncs() as log:
        loss, metrics = DPOLossFn(use_pair_ids=use_ids)(
            log_prob=leaf, ref_log_prob=x["ref_logprob"], response_mask=x["action_mask"], **extra
        )
        loss.backward()
    assert len(log) == 0, log.describe()
    assert set(metrics) == {
        "dpo_loss",
        "chosen_reward",
        "rejected_reward",
        "accuracy_mean",
        "malformed_pairs",
    }
    assert all(v.dim() == 0 and not v.requires_grad for v in metrics.values())


def test_micro_batches_with_global_normalizers_give_the_full_batch_gradient() -> None:
    x = pair_batch(5, pairs=5)
    fn = DPOLossFn(beta=0.7)
    mask = x["action_mask"]
    full, _, full_grad = loss_and_grad(
        fn, x["logprob"], ref_logprob=x["ref_logprob"], action_mask=mask, loss_scale=global_normalizers(mask)
    )
    parts = [slice(0, 2), slice(2, 8), slice(8, 10)]  # pairs stay together
    scale = global_normalizers([mask[p] for p in parts])
    leaf = x["logprob"].clone().requires_grad_(True)
    total = sum(
        fn(leaf[p], ref_logprob=x["ref_logprob"][p], action_mask=mask[p], loss_scale=scale)[0] for p in parts
    )
    total.backward()
    torch.testing.assert_close(total.detach(), full, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(leaf.grad, full_grad, rtol=1e-12, atol=1e-14)
