"""Golden tests of the plugin's experience operators (derived by hand), on batches built from experiences
and column-wise, through the explorer's output check."""

from __future__ import annotations

import pytest
import torch
from trinity_plugin_buffer import DropTruncated, DynamicSampling, OverlongPenalty, RewardClip, RewardScale

from trinity_core.batch import ExperienceBatch
from trinity_core.components import OperatorContext
from trinity_core.experience import EID, Experience
from trinity_core.testing.experience_operator import kit_batch
from trinity_core.train.explorer.operators import Stage, check_output

CONTEXT = OperatorContext(group_size=4, max_new_tokens=8)


def run(op, batch: ExperienceBatch):  # type: ignore[no-untyped-def]
    before = ExperienceBatch(**batch.__dict__)
    after, metrics = op(batch, 0)
    check_output(Stage(op.name(), op, "test"), before, after, 0)
    return after, metrics


@pytest.mark.parametrize("lazy", [False, True])
def test_dynamic_sampling_keeps_only_groups_with_distinct_rewards(lazy: bool) -> None:
    # The kit's groups: [0, .5, 1, 1] (kept), [1, 1, 1, 1] and [0, 0, 0, 0] (dropped).
    after, metrics = run(DynamicSampling(context=CONTEXT), kit_batch(lazy))
    assert after.rewards.tolist() == [0.0, 0.5, 1.0, 1.0]
    assert after.group_keys["task"] == ["0/0"]
    assert metrics["kept_groups"].item() == 1.0
    assert metrics["dropped_groups"].item() == 2.0
    assert [e.reward for e in after.experiences] == [0.0, 0.5, 1.0, 1.0]


def test_dynamic_sampling_threshold_and_singletons() -> None:
    exps = [
        Experience(eid=EID(batch=0, task=t, run=i), tokens=torch.tensor([1, 2, 3]), prompt_length=2, reward=r)
        for t, i, r in [(0, 0, 0.0), (0, 1, 0.2), (1, 0, 0.0), (1, 1, 1.0), (2, 0, 1.0)]
    ]
    # Population stds: group 0 -> 0.1, group 1 -> 0.5, group 2 (one response) -> 0.
    after, _ = run(DynamicSampling(std_threshold=0.1), ExperienceBatch.from_experiences(exps))
    assert [e.eid.task for e in after.experiences] == [1, 1]


@pytest.mark.parametrize("lazy", [False, True])
def test_drop_truncated_drops_or_masks_the_responses_at_the_budget(lazy: bool) -> None:
    # The kit's lengths: 2 5 8 3 | 1 8 4 2 | 6 8 3 7 (budget 8): rows 2, 5, 9 truncated.
    after, metrics = run(DropTruncated(), kit_batch(lazy))
    assert after.response_lengths.tolist() == [2, 5, 3, 1, 4, 2, 6, 3, 7]
    assert metrics["truncated_fraction"].item() == pytest.approx(3 / 12)
    masked, _ = run(DropTruncated(mode="mask"), kit_batch(lazy))
    assert masked.action_mask.any(dim=1).tolist() == [i not in (2, 5, 9) for i in range(12)]
    assert [bool(e.action_mask.any()) for e in masked.experiences] == [i not in (2, 5, 9) for i in range(12)]


@pytest.mark.parametrize("lazy", [False, True])
def test_overlong_penalty_by_dapos_formula(lazy: bool) -> None:
    # L_max 8, L_c 4: no penalty up to 4 tokens, (4 - L) / 4 from 5 to 8.
    after, metrics = run(OverlongPenalty(cache_length=4, context=CONTEXT), kit_batch(lazy))
    base = [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    lengths = [2, 5, 8, 3, 1, 8, 4, 2, 6, 8, 3, 7]
    want = [r + (0.0 if n <= 4 else (4 - n) / 4) for r, n in zip(base, lengths, strict=True)]
    assert after.rewards.tolist() == pytest.approx(want)
    assert [e.reward for e in after.experiences] == pytest.approx(want)
    assert metrics["penalized_fraction"].item() == pytest.approx(6 / 12)
    longer = OverlongPenalty(max_length=6, cache_length=2, penalty=0.5)  # beyond L_max: -penalty
    after, _ = run(longer, kit_batch(lazy))
    assert after.rewards[2].item() == pytest.approx(1.0 - 0.5)  # 8 > 6
    assert after.rewards[8].item() == pytest.approx(0.0 + 0.5 * (4 - 6) / 2)  # 6 in (4, 6]
    with pytest.raises(ValueError, match="below max_length"):
        OverlongPenalty(max_length=4, cache_length=4)(kit_batch(False), 0)


def test_reward_scale_and_clip() -> None:
    after, _ = run(RewardScale(scale=2.0, shift=-1.0), kit_batch(True))
    assert after.rewards.tolist()[:4] == [-1.0, 0.0, 1.0, 1.0]
    after, metrics = run(RewardClip(low=0.2, high=0.8), kit_batch(True))
    assert after.rewards.tolist()[:4] == [0.2, 0.5, 0.8, 0.8]
    assert metrics["clipped_fraction"].item() == pytest.approx(11 / 12)
    assert [e.reward for e in after.experiences][:4] == [0.2, 0.5, 0.8, 0.8]
    with pytest.raises(ValueError, match="above high"):
        RewardClip(low=1.0, high=0.0)
