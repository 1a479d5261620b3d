"""Shared prompts (``trinity_core.lm.shared_prompt``): the log-probs, entropies and gradients of rows
that repeat a prompt, with that prompt run once, equal the plain pass over every row, for random group
sizes, prompt and response lengths (left-padded prompts, right-padded responses); and the plain pass is
taken wherever sharing cannot apply."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trinity_core.lm.shared_prompt import prompt_groups, shared_prompt_logits
from trinity_core.train.learner.logprobs import response_logprobs
from trinity_core.train.models.policy import tiny_model

V, PAD = 30, 0


def _groups(sizes: list[int], prompt_lengths: list[int], response_lengths: list[int], seed: int) -> tuple:
    """Rows grouped by prompt (``sizes[g]`` rows share prompt ``g``), left-padded prompts and right-padded
    responses as ``ExperienceBatch`` lays them out: ``(ids, attention mask or None, P)``."""
    gen = torch.Generator().manual_seed(seed)
    P, R = max(prompt_lengths), max(response_lengths)
    prompts = torch.randint(3, V, (len(sizes), P), generator=gen)
    counts = torch.tensor(sizes)
    B = int(counts.sum())
    ids = torch.cat([prompts.repeat_interleave(counts, 0), torch.randint(3, V, (B, R), generator=gen)], 1)
    col = torch.arange(P + R)
    p = torch.tensor(prompt_lengths).repeat_interleave(counts)[:, None]
    r = torch.tensor(response_lengths[:B] + [R] * (B - len(response_lengths)))[:, None]
    attn = (col >= P - p) & (col < P + r)
    ids = ids.masked_fill(~attn, PAD)
    return ids, (None if bool(attn[:, :P].all()) else attn), P


def _both(model: Any, ids: torch.Tensor, attn: torch.Tensor | None, P: int) -> None:
    """Shared and plain log-probs, entropies and gradients agree."""
    out = {}
    for share in (False, True):
        model.zero_grad(set_to_none=True)
        logp, entropy = response_logprobs(model, ids, attn, P, with_entropy=True, share_prompts=share)
        assert entropy is not None
        (logp.sum() + 0.5 * entropy.sum()).backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        out[share] = (logp.detach(), entropy.detach(), grads)
    (lp0, e0, g0), (lp1, e1, g1) = out[False], out[True]
    valid = attn[:, P:] if attn is not None else torch.ones_like(lp0, dtype=torch.bool)
    torch.testing.assert_close(lp1[valid], lp0[valid], rtol=0, atol=2e-5)
    torch.testing.assert_close(e1[valid], e0[valid], rtol=0, atol=2e-5)
    assert len(g0) == len(g1)
    for a, b in zip(g0, g1, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    data=st.data(),
    seed=st.integers(0, 2**16),
)
def test_shared_prompts_give_the_plain_logprobs_and_gradients(sizes: list[int], data: Any, seed: int) -> None:
    prompt_lengths = data.draw(st.lists(st.integers(1, 6), min_size=len(sizes), max_size=len(sizes)))
    response_lengths = data.draw(st.lists(st.integers(1, 5), min_size=sum(sizes), max_size=sum(sizes)))
    ids, attn, P = _groups(sizes, prompt_lengths, response_lengths, seed)
    # Right padding of an unpadded batch does not need a mask (as the learner passes it).
    model = tiny_model(V, seed=0)
    _both(model, ids, attn, P)


def test_a_group_of_one_response_token_and_the_counts() -> None:
    ids, attn, P = _groups([3, 2, 4], [4, 2, 3], [1] * 9, seed=1)
    assert ids.shape[1] == P + 1
    assert prompt_groups(ids, attn, P).tolist() == [3, 2, 4]
    model = tiny_model(V, seed=0)
    assert shared_prompt_logits(model, ids, attn, P) is not None
    _both(model, ids, attn, P)


def test_a_prompt_counts_as_shared_only_with_the_same_mask() -> None:
    ids = torch.tensor([[PAD, 5, 6, 7], [PAD, 5, 6, 8], [5, 5, 6, 9]])
    attn = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.bool)
    ids[2, 0] = PAD  # the same ids as rows 0-1, but here the first column is a real token
    assert prompt_groups(ids, attn, 3).tolist() == [2, 1]


def test_plain_pass_where_sharing_does_not_apply() -> None:
    model = tiny_model(V, seed=0)
    distinct, attn, P = _groups([1, 1, 1, 2], [3, 3, 3, 3], [2] * 5, seed=2)
    assert shared_prompt_logits(model, distinct, attn, P) is None  # 4 prompts for 5 rows: no gain
    shared, attn, P = _groups([4, 4], [3, 2], [2] * 8, seed=2)
    assert shared_prompt_logits(model, shared, attn, P) is not None
    # transformers switches the cache off under gradient checkpointing in training mode.
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    model.train()
    assert shared_prompt_logits(model, shared, attn, P) is None
    model.eval()
    assert shared_prompt_logits(model, shared, attn, P) is not None
    # A module that is not a transformers model (its forward takes no cache) is run whole.
    assert shared_prompt_logits(torch.nn.Identity(), shared, attn, P) is None


def test_lora_policy_and_its_adapter_free_reference_share_prompts() -> None:
    peft = pytest.importorskip("peft")
    from trinity_core.train.models.lora import AdapterDisabled

    model = peft.get_peft_model(
        tiny_model(V, seed=0),
        peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    ids, attn, P = _groups([3, 3], [4, 2], [3, 1, 2, 3, 3, 2], seed=3)
    assert shared_prompt_logits(model, ids, attn, P) is not None
    _both(model, ids, attn, P)
    ref = AdapterDisabled(model)
    with torch.no_grad():
        plain = response_logprobs(ref, ids, attn, P, with_entropy=False)[0]
        shared = response_logprobs(ref, ids, attn, P, with_entropy=False, share_prompts=True)[0]
    valid = attn[:, P:] if attn is not None else torch.ones_like(plain, dtype=torch.bool)
    torch.testing.assert_close(shared[valid], plain[valid], rtol=0, atol=2e-5)


@pytest.mark.parametrize("greedy", [False, True])
def test_generation_from_a_shared_prefill_samples_the_same_tokens(greedy: bool) -> None:
    from trinity_core.lm.sampling import encode_prompts, sample_padded
    from trinity_core.train.models.policy import build_char_tokenizer

    tok = build_char_tokenizer("abcdef+=")
    model = tiny_model(len(tok), seed=0)
    ids, mask = encode_prompts(tok, ["ab+c=", "f=", "abc+def="], torch.device("cpu"))
    setting = {"max_new_tokens": 6, "temperature": 1.0, "greedy": greedy, "logprobs": True}
    torch.manual_seed(7)
    shared = sample_padded(model, tok, ids, mask, repeat=4, **setting)
    torch.manual_seed(7)
    whole = sample_padded(model, tok, ids.repeat_interleave(4, 0), mask.repeat_interleave(4, 0), **setting)
    assert torch.equal(shared.response_ids, whole.response_ids)
    assert torch.equal(shared.prompt_ids, whole.prompt_ids)
    assert shared.logprobs is not None
    assert whole.logprobs is not None
    torch.testing.assert_close(shared.logprobs, whole.logprobs, rtol=0, atol=2e-5)


def test_no_shared_prefill_where_generate_builds_its_own_cache() -> None:
    from trinity_core.lm.shared_prompt import prefill_shared_prompts

    model = tiny_model(V, seed=0)
    ids, mask = torch.randint(3, V, (2, 4)), torch.ones(2, 4, dtype=torch.bool)
    assert prefill_shared_prompts(model, ids, mask, repeat=3)
    assert not prefill_shared_prompts(model, ids, mask, repeat=1)
    model.generation_config.cache_implementation = "static"
    assert not prefill_shared_prompts(model, ids, mask, repeat=3)
