"""Blackjack as text: rendering, action parsing, the task's rows and the episode rules."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from gym_support import TINY
from trinity_plugin_gym import BlackjackAdapter, BlackjackTask, GymWorkflow

from trinity_core.train.models.policy import build_char_tokenizer, tiny_model
from trinity_core.workflows import GenerationEngine, WorkflowRunner, make_tasks


def test_the_hand_is_rendered_as_player_sum_dealer_card_and_usable_ace() -> None:
    adapter = BlackjackAdapter()
    env = gym.make(adapter.env_id, **adapter.env_kwargs)
    # Seed 0 deals the player 11 against the dealer's 10, no ace (gymnasium's Blackjack-v1).
    observation, _ = env.reset(seed=0)
    assert tuple(observation) == (11, 10, 0)
    assert adapter.render(env, observation) == "11 10="
    assert adapter.render(env, (13, 1, 1)) == "13 1 a="
    assert adapter.state_key(env, (13, 1, 1)) == "13,1,1"
    observation, reward, terminated, _, _ = env.step(adapter.parse("hit"))
    assert (observation[0], reward, terminated) == (12, 0.0, False)  # a 1 counted as an ace is 11 + 1
    _, reward, terminated, _, _ = env.step(adapter.parse("stick"))
    assert terminated
    assert reward in (-1.0, 0.0, 1.0)


@pytest.mark.parametrize(
    ("text", "action"),
    [("stick", 0), ("Hit", 1), (" s", 0), ("hit me", 1), ("", None), ("x", None), ("?hit", None)],
)
def test_actions_are_read_from_the_first_letter_of_the_first_word(text: str, action: int | None) -> None:
    assert BlackjackAdapter().parse(text) == action


def test_every_rendered_hand_and_action_word_is_in_the_alphabet() -> None:
    task = BlackjackTask()
    rows = task.sample(200, torch.Generator().manual_seed(0))
    characters = set(task.alphabet())
    assert all(set(r["prompt"]) <= characters for r in rows)
    assert set("stickhit") <= characters
    assert task.sample(5, torch.Generator().manual_seed(3)) == task.sample(
        5, torch.Generator().manual_seed(3)
    )
    # the prompt is the hand the row's seed deals
    env = gym.make("Blackjack-v1")
    for row in rows[:20]:
        observation, _ = env.reset(seed=row["seed"])
        assert row["prompt"] == BlackjackAdapter().render(env, observation)


def test_episodes_return_the_game_outcome_or_the_invalid_action_penalty() -> None:
    """64 hands of the untrained model: the reward is +1, 0 or -1 (or -0.5 when the reply names no
    action), success is a positive return, step experiences carry the hand as the anchor state."""
    tokenizer = build_char_tokenizer(BlackjackTask().alphabet())
    engine = GenerationEngine(
        tiny_model(len(tokenizer), TINY, seed=0),
        tokenizer,
        {"max_new_tokens": 2, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "greedy": False},
    )
    args = {"adapter": "blackjack", "max_turns": 5, "experience": "step", "history": False}
    runner = WorkflowRunner("gym", GymWorkflow, {**args, "invalid_action_penalty": -0.5}, engine)
    rows = BlackjackTask().sample(64, torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    outcome = runner.run(make_tasks(GymWorkflow, rows, step=0, task_offset=0, repeat_times=1))
    assert not outcome.failures
    last = {}
    for e in outcome.experiences:
        last[e.eid.task] = e
        if e.eid.step == 0:
            player, dealer = rows[e.eid.task]["prompt"].rstrip("=").split(" ")[:2]
            assert e.info["env_state_hash"].startswith(f"{player},{dealer},")
    assert len(last) == 64
    for e in last.values():
        expected = {-0.5} if e.info["invalid_action"] else {-1.0, 0.0, 1.0}
        assert e.reward in expected
        assert e.info["success"] == float(e.reward > 0)
