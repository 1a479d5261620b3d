"""Golden values of the example's formulas, computed by hand."""

import torch

from trinity_core.config import resolve_config
from trinity_core.registry import create, resolve


def test_clip_loss_by_hand() -> None:
    # ratio exp(0.5) = 1.6487 > 1.2 with A = 1: max(-1.6487, -1.2) = -1.2; token 2 masked.
    loss_fn = create("policy_loss", "example_clip", {"clip_range": 0.2}, backend="verl")
    logp = torch.tensor([[0.0, 9.0]])
    loss, metrics = loss_fn(
        logp,
        old_log_probs=torch.tensor([[-0.5, 0.0]]),
        response_mask=torch.tensor([[True, False]]),
        advantages=torch.tensor([[1.0, 1.0]]),
    )
    assert torch.isclose(loss, torch.tensor(-1.2))
    assert torch.isclose(metrics["pg_loss"], torch.tensor(-1.2))


def test_reward_by_hand() -> None:
    reward = resolve("reward_fn", "example_exact")
    assert reward(["1+1=", "1+1=", "1+1="], [" 2", "3", "2"], [2, 2, 2], truncated=[False, False, True]) == [
        1.0,
        0.0,
        0.0,
    ]


def test_the_preset_resolves_to_its_components() -> None:
    alg = resolve_config({"algorithm": {"algorithm_type": "example"}}).algorithm
    assert (alg.advantage_fn, alg.policy_loss_fn, alg.repeat_times) == ("example_group", "example_clip", 4)
