"""``response_logprobs`` (logits only for response positions, no log-softmax copy) equals the plain
formula ``log_softmax(logits)[y]`` over the full forward, and ``make_optimizer`` fuses Adam(W) on CPU."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from trinity_core.config import TrainerConfig
from trinity_core.train.learner.logprobs import _keeps_logits, response_logprobs
from trinity_core.train.learner.optimizer import make_optimizer
from trinity_core.train.models.policy import tiny_model


def _plain(
    model: Any, ids: torch.Tensor, attn: torch.Tensor | None, P: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The textbook computation: full logits, log-softmax, gather; entropy -sum p log p."""
    kwargs: dict[str, Any] = {}
    if attn is not None:
        kwargs = {"attention_mask": attn.long(), "position_ids": (attn.long().cumsum(-1) - 1).clamp_min(0)}
    logits = model(input_ids=ids, **kwargs).logits[:, P - 1 : -1].float()
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, ids[:, P:, None]).squeeze(-1)
    return logp, -(logp_all.exp() * logp_all).sum(-1)


class NoKeep(torch.nn.Module):
    """A causal LM whose forward has no ``logits_to_keep`` (all logits come back)."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> Any:
        return SimpleNamespace(logits=self.inner(input_ids=input_ids, **kwargs).logits)


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("wrap", [False, True])
def test_logprobs_and_entropy_equal_the_plain_formula(padded: bool, wrap: bool) -> None:
    torch.manual_seed(0)
    model = tiny_model(40, seed=0)
    ids = torch.randint(3, 40, (5, 9))
    P = 4
    attn = None
    if padded:
        attn = torch.ones(5, 9, dtype=torch.bool)
        attn[1, :2] = False
        attn[3, :1] = False
    net = NoKeep(model) if wrap else model
    logp, entropy = response_logprobs(net, ids, attn, P, with_entropy=True)
    want_logp, want_entropy = _plain(model, ids, attn, P)
    assert logp.shape == (5, 5)
    torch.testing.assert_close(logp, want_logp, rtol=0, atol=1e-5)
    assert entropy is not None
    torch.testing.assert_close(entropy, want_entropy, rtol=0, atol=1e-5)
    # Gradients through the shortcut equal those of the formula.
    g1 = torch.autograd.grad(logp.sum() + entropy.sum(), list(model.parameters()))
    lp, ent = _plain(model, ids, attn, P)
    g2 = torch.autograd.grad(lp.sum() + ent.sum(), list(model.parameters()))
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert response_logprobs(net, ids, attn, P, with_entropy=False)[1] is None


@pytest.mark.parametrize("name", ["adamw", "adam"])
def test_adam_is_fused_on_cpu_and_sgd_is_plain(name: str) -> None:
    model = tiny_model(20, seed=0)
    opt = make_optimizer(model, TrainerConfig(optimizer=name, lr=1e-3))
    assert opt.defaults["fused"] is True
    assert opt.defaults["betas"] == (0.9, 0.999)
    sgd = make_optimizer(model, TrainerConfig(optimizer="sgd", lr=1e-3))
    assert isinstance(sgd, torch.optim.SGD)


def test_an_entropy_that_is_only_a_metric_has_no_graph() -> None:
    model = tiny_model(30, seed=0)
    ids = torch.randint(3, 30, (3, 7))
    logp, with_grad = response_logprobs(model, ids, None, 3, with_entropy=True)
    _, metric = response_logprobs(model, ids, None, 3, with_entropy=True, entropy_grad=False)
    assert with_grad is not None
    assert metric is not None
    assert with_grad.requires_grad
    assert not metric.requires_grad
    assert logp.requires_grad
    torch.testing.assert_close(metric, with_grad.detach(), rtol=0, atol=0)


def test_a_lora_policy_and_its_reference_keep_only_the_response_logits() -> None:
    # PEFT's and the reference stand-in's forward signatures do not name logits_to_keep but pass it
    # on: the pass looks through them and asks the transformers model under them for fewer logits.
    peft = pytest.importorskip("peft")
    from trinity_core.train.models.lora import AdapterDisabled

    model = peft.get_peft_model(
        tiny_model(40, seed=0),
        peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    ref = AdapterDisabled(model)
    assert _keeps_logits(model)
    assert _keeps_logits(ref)
    assert not _keeps_logits(NoKeep(tiny_model(40, seed=0)))
    ids, P = torch.randint(3, 40, (4, 8)), 3
    logp, entropy = response_logprobs(model, ids, None, P, with_entropy=True)
    want_logp, want_entropy = _plain(model, ids, None, P)
    torch.testing.assert_close(logp, want_logp, rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy, want_entropy, rtol=0, atol=1e-5)
    with torch.no_grad():
        ref_logp = response_logprobs(ref, ids, None, P, with_entropy=False)[0]
        with model.disable_adapter():
            base_logp = _plain(model, ids, None, P)[0]
    torch.testing.assert_close(ref_logp, base_logp, rtol=0, atol=1e-5)
    assert (ref_logp - logp.detach()).abs().max() > 1e-4  # the adapters change the policy's log-probs
