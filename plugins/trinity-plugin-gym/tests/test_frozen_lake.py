"""FrozenLake as text: rendering, action parsing, the episode rules and both experience shapes."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from gym_support import TINY, random_policy_success
from trinity_plugin_gym import FrozenLakeAdapter, FrozenLakeTask, GymWorkflow

from trinity_core.train.models.policy import build_char_tokenizer, tiny_model
from trinity_core.workflows import GenerationEngine, WorkflowRunner, make_tasks


@pytest.fixture(scope="module")
def engine() -> GenerationEngine:
    tokenizer = build_char_tokenizer(FrozenLakeTask().alphabet())
    model = tiny_model(len(tokenizer), TINY, seed=0)
    return GenerationEngine(
        model, tokenizer, {"max_new_tokens": 2, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "greedy": False}
    )


def test_the_map_is_rendered_with_the_agent() -> None:
    adapter = FrozenLakeAdapter()
    env = gym.make(adapter.env_id, **adapter.env_kwargs)
    observation, _ = env.reset(seed=0)
    assert adapter.render(env, observation) == "PFFF/FHFH/FFFH/HFFG="
    observation, reward, terminated, _, _ = env.step(adapter.parse("down"))
    assert adapter.render(env, observation) == "SFFF/PHFH/FFFH/HFFG="
    assert (reward, terminated) == (0.0, False)
    assert FrozenLakeTask().sample(2, torch.Generator().manual_seed(0))[0]["prompt"] == "PFFF/FHFH/FFFH/HFFG="


@pytest.mark.parametrize(
    ("text", "action"),
    [
        ("left", 0),
        ("Down", 1),
        (" r", 2),
        ("up now", 3),
        ("lft", 0),
        ("", None),
        ("x", None),
        ("?left", None),
    ],
)
def test_actions_are_read_from_the_first_letter_of_the_first_word(text: str, action: int | None) -> None:
    assert FrozenLakeAdapter().parse(text) == action


def test_the_random_policy_rarely_reaches_the_goal() -> None:
    """The shortest path has 6 moves, so 5 never reach the goal; 8 moves: 0.29% (exact, by DP)."""
    assert random_policy_success(5) == 0.0
    assert random_policy_success(6) > 0.0
    assert 0.002 < random_policy_success(8) < 0.004


@pytest.mark.parametrize("shape", ["episode", "step"])
def test_episode_rules_hold_on_sampled_episodes(engine: GenerationEngine, shape: str) -> None:
    """64 episodes of the untrained model: the reward is the return (-0.5 after an invalid action, else 0
    or 1), at most max_turns turns, and the shape's experiences."""
    args = {
        "max_turns": 3,
        "experience": shape,
        "history": shape == "episode",
        "invalid_action_penalty": -0.5,
    }
    runner = WorkflowRunner("gym", GymWorkflow, args, engine)
    rows = FrozenLakeTask().sample(64, torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    outcome = runner.run(make_tasks(GymWorkflow, rows, step=0, task_offset=0, repeat_times=1))
    assert not outcome.failures
    assert max(outcome.turns) <= 3
    exps = outcome.experiences
    invalid = [e for e in exps if e.info["invalid_action"]]
    assert invalid
    assert all(e.reward == -0.5 for e in invalid)
    assert all(e.reward in (0.0, 1.0) for e in exps if not e.info["invalid_action"])
    if shape == "episode":
        assert len(exps) == 64
        assert all(e.experience_type == "multi_turn" for e in exps)
        long = [e for e in exps if e.info["turns"] > 1]
        assert long  # some episodes got past their first move
        for e in long:
            assert e.action_mask is not None
            assert not bool(e.action_mask.all())  # the observations between turns are masked out
    else:
        per_task: dict[int, list[int]] = {}
        for e in exps:
            per_task.setdefault(e.eid.task, []).append(e.eid.step)
        assert all(steps == list(range(len(steps))) for steps in per_task.values())
        assert [len(per_task[t]) for t in range(64)] == outcome.turns
        assert all(e.info["env_state_hash"] == "0" for e in exps if e.eid.step == 0)
