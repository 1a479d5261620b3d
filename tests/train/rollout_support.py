"""Shared by the rollout tests: random rollouts, the hypothesis cases driving them, experience equality."""

from __future__ import annotations

import dataclasses

import torch
from hypothesis import strategies as st

from trinity_core.experience import Experience
from trinity_core.lm.sampling import Rollout

#: The ``model`` section of the tests' training configs: a one-layer model of width 16, seconds per run.
TINY_MODEL = {
    "config": {
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
    }
}

#: ``(G, rows)``: a group size and ``rows`` of ``(prompt length, response length, reward or None)``, a
#: whole number of groups.
ROLLOUT_CASES = st.integers(1, 4).flatmap(
    lambda G: st.tuples(
        st.just(G),
        st.lists(
            st.tuples(st.integers(1, 6), st.integers(1, 5), st.none() | st.floats(-2, 2)),
            min_size=G,
            max_size=4 * G,
        ).map(lambda rows: rows[: len(rows) // G * G]),
    )
)


def random_rollout(prompt_lengths: list[int], response_lengths: list[int], seed: int) -> Rollout:
    """A rollout with left-padded prompts and right-padded responses of the given lengths (pad id 0)."""
    gen = torch.Generator().manual_seed(seed)
    n, width, T = len(prompt_lengths), max(prompt_lengths), max(response_lengths)
    col = torch.arange(width)
    prompt_mask = col >= width - torch.tensor(prompt_lengths)[:, None]
    prompt_ids = torch.where(prompt_mask, torch.randint(3, 50, (n, width), generator=gen), 0)
    lengths = torch.tensor(response_lengths)
    response_mask = torch.arange(T) < lengths[:, None]
    response_ids = torch.where(response_mask, torch.randint(3, 50, (n, T), generator=gen), 0)
    return Rollout(prompt_ids, prompt_mask, response_ids, lengths, lengths == T)


def assert_same_experience(got: Experience, want: Experience) -> None:
    """Every field equal (tensors in value and dtype); EIDs equal but for the suffix, 16 fresh hex digits."""
    for f in dataclasses.fields(Experience):
        x, y = getattr(got, f.name), getattr(want, f.name)
        if f.name == "eid":
            assert (x.batch, x.task, x.run, x.step) == (y.batch, y.task, y.run, y.step)
            assert len(x.suffix) == 16
            int(x.suffix, 16)  # hex digits, else ValueError
        elif isinstance(y, torch.Tensor):
            assert x.dtype == y.dtype, f.name
            assert torch.equal(x, y), f.name
        else:
            assert x == y, f.name
