"""The learner trains the distribution that was sampled: temperature, top-k, top-p and ``min_new_tokens``
shape the learner's log-probs and entropy exactly as they shaped ``generate``'s draws.

The ground truth is transformers itself: the rollout's log-probs are read from the processed scores
``generate`` sampled from, and the entropy of those scores is computed here from ``generate``'s output.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rollout_support import TINY_MODEL
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from trinity_core.lm.distribution import SamplingDistribution, tokens_into_turn
from trinity_core.lm.sampling import encode_prompts, generate
from trinity_core.train.explorer.experiences import rollout_batch
from trinity_core.train.learner.logprobs import response_logprobs
from trinity_core.train.learner.passes import StepInputs
from trinity_core.train.models.policy import build_char_tokenizer, tiny_model

ALPHABET = "0123456789+="
SETTINGS = {
    "temperature 0.7": {"temperature": 0.7},
    "temperature 1.3": {"temperature": 1.3},
    "top-k 3": {"top_k": 3},
    "top-p 0.8": {"top_p": 0.8},
    "min_new_tokens 2": {"min_new_tokens": 2},
    "all at once": {"temperature": 0.8, "top_k": 5, "top_p": 0.9, "min_new_tokens": 2},
}
MAX = torch.iinfo(torch.int64).max


def _policy(seed: int = 0) -> tuple[torch.nn.Module, object]:
    tokenizer = build_char_tokenizer(ALPHABET)
    model = tiny_model(len(tokenizer), TINY_MODEL["config"], seed=seed)
    # An untrained model puts little mass on end-of-sequence: raise it, so that banning it matters.
    with torch.no_grad():
        model.lm_head.weight[tokenizer.eos_token_id] += 0.5
    return model.eval(), tokenizer


def _sample(
    model: object, tokenizer: object, setting: dict[str, float]
) -> tuple[object, SamplingDistribution]:
    knobs = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_new_tokens": 1, **setting}
    torch.manual_seed(3)
    rollout = generate(
        model, tokenizer, ["1+2=", "7+8=", "33+4="], repeat=4, max_new_tokens=6, logprobs=True, **knobs
    )
    return rollout, SamplingDistribution(eos_token_id=tokenizer.eos_token_id, **knobs)  # type: ignore[attr-defined]


@pytest.mark.parametrize("setting", SETTINGS.values(), ids=SETTINGS.keys())
def test_the_learners_old_logprob_is_the_rollouts_logprob(setting: dict[str, float]) -> None:
    model, tokenizer = _policy()
    rollout, distribution = _sample(model, tokenizer, setting)
    batch = rollout_batch(rollout, [1.0] * len(rollout.response_ids), step=0, group_size=4)
    inputs = StepInputs.of(batch, distribution)
    with torch.no_grad():
        old = inputs.logprobs(model, share_prompts=False)  # the learner's no-grad pass
    mask = inputs.mask.bool()
    behaviour = rollout.logprobs[:, : old.shape[1]]
    assert torch.isfinite(old[mask]).all()
    torch.testing.assert_close(old[mask], behaviour[mask], atol=1e-5, rtol=0)
    # The same tokens under softmax(logits) would differ: the settings change the distribution.
    plain = StepInputs.of(batch).logprobs(model, share_prompts=False)
    assert (plain[mask] - behaviour[mask]).abs().max() > 1e-3


@pytest.mark.parametrize("setting", SETTINGS.values(), ids=SETTINGS.keys())
def test_the_entropy_is_that_of_the_sampled_distribution(setting: dict[str, float]) -> None:
    model, tokenizer = _policy(seed=1)
    knobs = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_new_tokens": 1, **setting}
    ids, mask = encode_prompts(tokenizer, ["12+3="], torch.device("cpu"))
    torch.manual_seed(5)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask.long(),
        max_new_tokens=5,
        min_new_tokens=int(knobs["min_new_tokens"]),
        do_sample=True,
        temperature=knobs["temperature"],
        top_k=int(knobs["top_k"]),
        top_p=knobs["top_p"],
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        output_scores=True,
        return_dict_in_generate=True,
    )
    scores = torch.stack(out.scores, dim=1)[0]  # (steps, V), after every processor and warper
    probs = scores.softmax(-1)
    want = -(probs * torch.where(probs > 0, probs.log(), 0.0)).sum(-1)
    steps = scores.shape[0]
    distribution = SamplingDistribution(eos_token_id=tokenizer.eos_token_id, **knobs)
    _, entropy = response_logprobs(model, out.sequences, None, ids.shape[1], True, distribution=distribution)
    assert entropy is not None
    torch.testing.assert_close(entropy[0, :steps], want, atol=1e-5, rtol=1e-5)


def test_an_entropy_bonus_cannot_push_up_a_token_the_sampler_never_draws() -> None:
    """End-of-sequence at a response's first token (``min_new_tokens=1``): probability 0 in the learner's
    distribution, and no gradient reaches its logit through the entropy."""
    _model, tokenizer = _policy()
    eos = tokenizer.eos_token_id
    logits = torch.randn(2, 4, 12, requires_grad=True)
    distribution = SamplingDistribution(min_new_tokens=1, eos_token_id=eos)
    warped = distribution.warp(logits)
    assert torch.isneginf(warped[:, 0, eos]).all()
    assert torch.isfinite(warped[:, 1:, eos]).all()
    probs = warped.softmax(-1)
    entropy = -(probs * torch.where(probs > 0, probs.log(), 0.0)).sum(-1)
    entropy.sum().backward()
    assert logits.grad is not None
    assert (logits.grad[:, 0, eos] == 0).all()
    assert (logits.grad[:, 1:, eos] != 0).all()


def test_the_models_generation_config_does_not_change_the_distribution() -> None:
    """A checkpoint's generation_config.json (temperature, top-k, top-p, repetition penalty, min-p) is
    switched off: the run's settings alone decide what is sampled."""
    model, tokenizer = _policy()
    gen = model.generation_config
    gen.temperature, gen.top_k, gen.top_p, gen.repetition_penalty, gen.min_p = 0.5, 3, 0.7, 1.5, 0.2
    rollout, distribution = _sample(model, tokenizer, {})
    batch = rollout_batch(rollout, [1.0] * len(rollout.response_ids), step=0, group_size=4)
    inputs = StepInputs.of(batch, distribution)
    with torch.no_grad():
        old = inputs.logprobs(model, share_prompts=False)
    mask = inputs.mask.bool()
    torch.testing.assert_close(old[mask], rollout.logprobs[:, : old.shape[1]][mask], atol=1e-5, rtol=0)


def test_tokens_into_turn_counts_from_each_assistant_turn() -> None:
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 0, 0]])
    assert tokens_into_turn(mask).tolist() == [[0, 1, MAX, MAX, 0, 1, 2, MAX], [0, 1, 2, 3, 4, 5, MAX, MAX]]


def test_a_ban_applies_at_the_start_of_every_turn() -> None:
    distribution = SamplingDistribution(min_new_tokens=1, eos_token_id=2)
    mask = torch.tensor([[1, 1, 0, 0, 1, 1]])
    warped = distribution.warp(torch.zeros(1, 6, 5), tokens_into_turn(mask))
    assert torch.isneginf(warped[0, :, 2]).tolist() == [True, False, False, False, True, False]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    vocab=st.integers(2, 40),
    temperature=st.sampled_from([0.5, 1.0, 1.7]),
    top_k=st.integers(0, 12),
    top_p=st.sampled_from([0.3, 0.75, 0.95, 1.0]),
)
def test_warp_equals_transformers_warpers(
    seed: int, vocab: int, temperature: float, top_k: int, top_p: float
) -> None:
    logits = torch.randn(3, vocab, generator=torch.Generator().manual_seed(seed)) * 3
    processors = LogitsProcessorList()
    if temperature != 1.0:
        processors.append(TemperatureLogitsWarper(temperature))
    if top_k:
        processors.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p))
    want = processors(torch.zeros(3, 1, dtype=torch.long), logits.clone())
    got = SamplingDistribution(temperature=temperature, top_k=top_k, top_p=top_p).warp(logits[:, None])[:, 0]
    assert torch.equal(torch.isneginf(got), torch.isneginf(want))
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite])
    assert math.isclose(float(got.softmax(-1).sum(-1).min()), 1.0, rel_tol=1e-5)


def test_warp_divides_by_any_temperature_but_one() -> None:
    logits = torch.tensor([[[1.0, -2.0, 4.0]]])
    for temperature in (0.5, 2.0, 3.0):
        got = SamplingDistribution(temperature=temperature).warp(logits)
        torch.testing.assert_close(got, logits / temperature, rtol=0, atol=0)


def test_top_p_drops_a_token_whose_cumulative_probability_is_exactly_one_minus_top_p() -> None:
    # Four equal logits: probabilities exactly 1/4, cumulative 1/4, 1/2, 3/4, 1 in ascending order. With
    # top_p = 0.75 the first reaches 1 - top_p = 1/4 exactly: it is dropped (at or below), as
    # TopPLogitsWarper drops it; three tokens remain.
    logits = torch.zeros(1, 4)
    got = SamplingDistribution(top_p=0.75).warp(logits[:, None])[:, 0]
    want = TopPLogitsWarper(0.75)(torch.zeros(1, 1, dtype=torch.long), logits.clone())
    assert int(torch.isneginf(got).sum()) == 1
    assert torch.equal(torch.isneginf(got), torch.isneginf(want))


def test_warp_without_an_eos_token_or_settings_leaves_even_extreme_logits_alone() -> None:
    # A logit so low that its probability underflows to 0 keeps its value: only the settings change it.
    logits = torch.tensor([[[0.0, -1000.0, 3.0]]])
    assert torch.equal(SamplingDistribution(min_new_tokens=2, eos_token_id=None).warp(logits), logits)
    assert torch.equal(SamplingDistribution(top_p=1.0).warp(logits), logits)


def test_top_k_of_one_keeps_only_the_largest_logits() -> None:
    logits = torch.tensor([[[0.5, 2.0, -1.0, 2.0]]])
    got = SamplingDistribution(top_k=1).warp(logits)
    assert torch.isneginf(got).tolist() == [[[True, False, True, False]]]  # ties with the largest stay
