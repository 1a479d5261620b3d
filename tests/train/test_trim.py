"""The learner's per-micro-batch trim (``trinity_core.train.learner.trim``): the cut widths, and a loss and
gradient equal to those of the untrimmed micro-batches for random prompt / response lengths and splits."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trinity_core.train.learner.logprobs import response_logprobs
from trinity_core.train.learner.trim import trim_micro_batch
from trinity_core.train.models.policy import tiny_model

V, PAD = 30, 0


def _batch(prompt_lengths: list[int], response_lengths: list[int], seed: int) -> tuple[torch.Tensor, ...]:
    """Left-padded prompts, right-padded responses (as ``ExperienceBatch``): ids, attention, action mask."""
    gen = torch.Generator().manual_seed(seed)
    P, R = max(prompt_lengths), max(response_lengths)
    B = len(prompt_lengths)
    ids = torch.randint(3, V, (B, P + R), generator=gen)
    col = torch.arange(P + R)
    p, r = torch.tensor(prompt_lengths)[:, None], torch.tensor(response_lengths)[:, None]
    attn = (col >= P - p) & (col < P + r)
    ids = ids.masked_fill(~attn, PAD)
    action = attn[:, P:] & (torch.rand(B, R, generator=gen) > 0.2)  # some response tokens not trained on
    return ids, attn, action


def test_cut_widths_follow_the_micro_batch_and_drop_an_unneeded_mask() -> None:
    ids, attn, action = _batch([2, 4, 3], [1, 3, 2], seed=0)
    action = attn[:, 4:].clone()  # every response token selected
    # Rows 0 and 2: longest prompt 3 (one column of left padding goes), last response column 2 of 3.
    rows = torch.tensor([0, 2])
    cut = trim_micro_batch(ids[rows], attn[rows], 4, {"action_mask": action[rows], "adv": torch.ones(2)})
    assert cut.prompt_width == 3
    assert cut.input_ids.shape == (2, 3 + 2)
    assert torch.equal(cut.input_ids, ids[rows][:, 1:6])
    assert cut.attention_mask is not None
    assert cut.attention_mask.shape == (2, 5)
    assert cut.columns["action_mask"].shape == (2, 2)
    assert torch.equal(cut.columns["adv"], torch.ones(2))  # a per-row column is passed as it is
    # Row 1 alone: its prompt fills the width, so the mask is dropped (the plain causal path).
    alone = trim_micro_batch(ids[1:2], attn[1:2], 4, {"action_mask": action[1:2]})
    assert alone.attention_mask is None
    assert alone.prompt_width == 4
    assert alone.input_ids.shape == (1, 7)


def test_a_micro_batch_that_selects_nothing_keeps_one_response_column() -> None:
    ids, attn, action = _batch([2, 2], [2, 2], seed=1)
    cut = trim_micro_batch(ids, attn, 2, {"action_mask": torch.zeros_like(action)})
    assert cut.input_ids.shape == (2, 3)
    assert cut.columns["action_mask"].shape == (2, 1)


def _loss_and_grads(
    model: torch.nn.Module,
    ids: torch.Tensor,
    attn: torch.Tensor,
    P: int,
    cols: dict[str, torch.Tensor],
    pieces: list[slice],
    trim: bool,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Token-mean policy-gradient loss summed over micro-batches with the step's global token count."""
    model.zero_grad(set_to_none=True)
    total_tokens = cols["action_mask"].sum().clamp_min(1)
    loss = torch.zeros(())
    for m in pieces:
        sub_ids, sub_attn, sub_P = ids[m], attn[m], P
        sub = {k: v[m] for k, v in cols.items()}
        if trim:
            cut = trim_micro_batch(sub_ids, sub_attn, P, sub)
            sub_ids, sub_attn, sub_P, sub = cut.input_ids, cut.attention_mask, cut.prompt_width, cut.columns
        logp, _ = response_logprobs(model, sub_ids, sub_attn, sub_P, False)
        part = (-(sub["advantages"] * logp) * sub["action_mask"]).sum() / total_tokens
        part.backward()
        loss = loss + part.detach()
    return loss, [p.grad.clone() for p in model.parameters() if p.grad is not None]


@settings(max_examples=10, deadline=None)
@given(
    lengths=st.lists(st.tuples(st.integers(1, 6), st.integers(1, 5)), min_size=1, max_size=6),
    piece=st.integers(1, 6),
    seed=st.integers(0, 1000),
)
def test_trimmed_micro_batches_give_the_untrimmed_loss_and_gradients(
    lengths: list[tuple[int, int]], piece: int, seed: int
) -> None:
    torch.manual_seed(seed)
    model = tiny_model(V, seed=seed)
    ids, attn, action = _batch([p for p, _ in lengths], [r for _, r in lengths], seed)
    P = max(p for p, _ in lengths)
    cols = {"action_mask": action.float(), "advantages": torch.randn(action.shape)}
    pieces = [slice(i, i + piece) for i in range(0, len(lengths), piece)]
    want, want_grads = _loss_and_grads(model, ids, attn, P, cols, pieces, trim=False)
    got, got_grads = _loss_and_grads(model, ids, attn, P, cols, pieces, trim=True)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert len(got_grads) == len(want_grads)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


def test_without_an_attention_mask_the_prompt_stays_and_a_row_selecting_nothing_sets_no_width() -> None:
    # P = 2, R = 4: row 0 selects response columns 0-1, row 1 selects none; the width is row 0's, 2.
    ids = torch.arange(12).reshape(2, 6)
    action = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]])
    cut = trim_micro_batch(ids, None, 2, {"action_mask": action, "reward": torch.tensor([1.0, 0.0])})
    assert cut.prompt_width == 2
    assert cut.attention_mask is None
    assert cut.input_ids.tolist() == [[0, 1, 2, 3], [6, 7, 8, 9]]
    assert cut.columns["action_mask"].tolist() == [[1, 1], [0, 0]]
    assert cut.columns["reward"].tolist() == [1.0, 0.0]  # a per-row column passes as it is


def test_a_prompt_with_a_hole_keeps_every_prompt_column() -> None:
    # P = 4: both prompts have 2 tokens, but row 0's are not left-aligned (a hole at column 2), so
    # dropping the first two columns would drop one of its tokens: every prompt column is kept.
    ids = torch.arange(12).reshape(2, 6)
    attention = torch.tensor([[0, 1, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    action = torch.tensor([[1, 1], [1, 0]])
    cut = trim_micro_batch(ids, attention, 4, {"action_mask": action})
    assert cut.prompt_width == 4
    assert cut.input_ids.tolist() == ids.tolist()
    assert cut.attention_mask is not None
    assert cut.attention_mask.tolist() == attention.tolist()
