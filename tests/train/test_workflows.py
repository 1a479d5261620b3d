"""Workflows: single_turn is today's rollout, the wrapper batches episodes' calls, multi-turn shapes,
failures reported and counted."""

from __future__ import annotations

import copy
import itertools
import logging
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from rollout_support import TINY_MODEL

from trinity_core import registry
from trinity_core.components import Workflow
from trinity_core.experience import Experience
from trinity_core.train import train
from trinity_core.train.models.policy import build_char_tokenizer, tiny_model
from trinity_core.workflows import (
    Conversation,
    GenerationEngine,
    ModelWrapper,
    SingleTurnWorkflow,
    WorkflowError,
    WorkflowRunner,
    make_tasks,
)

TIMINGS = ("time/", "throughput/", "explorer/idle_fraction", "learner/idle_fraction", "workflow/")

TINY = {
    "trainer": {"total_steps": 3, "checkpoint_every": 0, "progress": False, "threads": 1, "seed": 3},
    "rollout": {"prompts_per_step": 2},
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none"},
    "tasks": {"eval_size": 4, "reward_fns": ["response_length"]},
    "model": TINY_MODEL,
}


def response_length(completions: list[str], **kwargs: Any) -> list[float]:
    """Characters of the completion (rewards that differ within a group, so the loss is not zero)."""
    return [float(len(c)) for c in completions]


class SingleTurnEpisodes(SingleTurnWorkflow):
    """single_turn run task by task through the batching model wrapper (the log-probs left out, as the
    whole-step path stores none)."""

    batched: ClassVar[bool] = False

    def run(self) -> list[Experience]:
        """As single_turn, without the sampling log-probs."""
        exps = super().run()
        for exp in exps:
            exp.logprobs = None
        return exps


class Echo(Workflow):
    """Turns = the task's ``turns`` field; the environment says ``x`` between turns; reward = turns."""

    def run(self) -> list[Experience]:
        """One episode of ``raw_task["turns"]`` model turns."""
        conversation = Conversation(self.model, self.task.prompt)
        for turn in range(int(self.task.raw_task["turns"])):
            if turn:
                conversation.add_text("xy")
            conversation.respond()
        return [conversation.to_experience(float(len(conversation.turns)))]


class AsyncEcho(Echo):
    """:class:`Echo` as a coroutine."""

    is_async: ClassVar[bool] = True

    async def run_async(self) -> list[Experience]:
        """One episode, awaiting the model."""
        conversation = Conversation(self.model, self.task.prompt)
        for turn in range(int(self.task.raw_task["turns"])):
            if turn:
                conversation.add_text("xy")
            await conversation.respond_async()
        return [conversation.to_experience(float(len(conversation.turns)))]


class Flaky(Workflow):
    """Raises at its second turn on odd tasks (an environment that raises)."""

    def run(self) -> list[Experience]:
        """One turn, or an error at the second."""
        conversation = Conversation(self.model, self.task.prompt)
        conversation.respond()
        if self.task.index % 2:
            conversation.respond()
            raise RuntimeError("the environment broke")
        return [conversation.to_experience(1.0)]


class Endless(Workflow):
    """Never ends on its own."""

    def run(self) -> list[Experience]:
        """Turns until the explorer's call limit stops it."""
        conversation = Conversation(self.model, self.task.prompt)
        while True:
            conversation.respond()


class SameIds(Workflow):
    """Returns two experiences with the same run and step."""

    can_repeat: ClassVar[bool] = True

    def run(self) -> list[Experience]:
        """Two responses, ids left at their defaults."""
        exps = self.model.generate([self.task.prompt], n=2)
        for exp in exps:
            exp.reward = 0.0
        return exps


@pytest.fixture
def engine() -> GenerationEngine:
    tok = build_char_tokenizer(string.digits + "+=xy")
    model = tiny_model(len(tok), TINY_MODEL["config"], seed=0)
    return GenerationEngine(
        model, tok, {"max_new_tokens": 3, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "greedy": False}
    )


@pytest.fixture
def registered() -> Iterator[None]:
    registry.register("reward_fn", "response_length", response_length, replace=True)
    registry.register("workflow", "single_turn_episodes", SingleTurnEpisodes, replace=True)
    registry.register("workflow", "flaky", Flaky, replace=True)
    yield
    for kind, name in (
        ("reward_fn", "response_length"),
        ("workflow", "single_turn_episodes"),
        ("workflow", "flaky"),
    ):
        registry.unregister(kind, name)


def test_single_turn_is_the_default_and_equals_its_per_task_run(tmp_path: Path, registered: None) -> None:
    """The whole-step rollout (default) and single_turn run task by task through the batching wrapper
    sample the same batch: every metric and every trained weight are bit-identical."""
    batched = train(copy.deepcopy(TINY), run_dir=tmp_path / "batched")
    config = copy.deepcopy(TINY)
    config["rollout"]["workflow"] = "single_turn_episodes"
    episodes = train(config, run_dir=tmp_path / "episodes")
    assert "workflow/generate_calls" not in batched.history[0]
    assert [h["workflow/generate_calls"] for h in episodes.history] == [1.0, 1.0, 1.0]
    # The comparison has something to compare: rewards differ within groups and every step has a gradient.
    # (Not the pg_loss value: on policy it is −mean(A), 0 up to rounding for GRPO advantages.)
    assert all(h["reward/std"] > 0 for h in batched.history)
    assert all(h["actor/grad_norm"] > 0 for h in batched.history)
    for a, b in zip(batched.history, episodes.history, strict=True):
        for key in a:
            if not key.startswith(TIMINGS):
                assert a[key] == b[key], key
    from safetensors.torch import load_file

    def weights(name: str) -> dict[str, torch.Tensor]:
        return load_file(sorted((tmp_path / name / "checkpoints").iterdir())[-1] / "model.safetensors")

    want, got = weights("batched"), weights("episodes")
    assert all(torch.equal(want[k], got[k]) for k in want)


@pytest.mark.parametrize("cls", [Echo, AsyncEcho])
def test_calls_of_concurrent_episodes_are_one_generate_per_turn(engine: GenerationEngine, cls: type) -> None:
    """Episodes of 1..4 turns (16 of them): 4 generate calls, of 16, 12, 8 and 4 requests."""
    rows = [{"prompt": "1+2=", "turns": 1 + i % 4} for i in range(16)]
    runner = WorkflowRunner("echo", cls, {}, engine)
    tasks = make_tasks(cls, rows, step=5, task_offset=0, repeat_times=1)
    torch.manual_seed(0)
    outcome = runner.run(tasks)
    assert outcome.generate_calls == engine.calls == 4
    assert outcome.turns == [r["turns"] for r in rows]
    assert [e.reward for e in outcome.experiences] == [float(r["turns"]) for r in rows]
    assert [(e.eid.batch, e.eid.task, e.eid.run, e.eid.step) for e in outcome.experiences] == [
        (5, i, 0, 0) for i in range(16)
    ]


def test_one_experience_per_episode_masks_the_environment(engine: GenerationEngine) -> None:
    """prompt | response 1 | "xy" | response 2: the action mask is 1 on the responses only, the log-probs
    are the sampling ones there and 0 on the environment's tokens, the type is multi_turn."""
    model = ModelWrapper(engine)
    conversation = Conversation(model, "1+2=")
    first = conversation.respond()
    conversation.add_text("xy")
    second = conversation.respond()
    exp = conversation.to_experience(0.5)
    assert exp.experience_type == "multi_turn"
    assert first.tokens is not None
    assert second.tokens is not None
    assert exp.tokens is not None
    r1 = first.tokens[first.prompt_length :]
    r2 = second.tokens[second.prompt_length :]
    env = torch.tensor(model.encode("xy"), dtype=torch.int32)
    assert torch.equal(exp.tokens, torch.cat([first.tokens, env, r2]))
    assert exp.prompt_length == first.prompt_length == len(model.encode("1+2=", bos=True))
    assert torch.equal(second.tokens[: second.prompt_length], torch.cat([first.tokens, env]))
    assert exp.action_mask is not None
    assert exp.logprobs is not None
    assert exp.action_mask.tolist() == [True] * len(r1) + [False] * 2 + [True] * len(r2)
    assert first.logprobs is not None
    assert second.logprobs is not None
    assert torch.equal(exp.logprobs, torch.cat([first.logprobs, torch.zeros(2), second.logprobs]))
    assert bool((exp.logprobs[exp.action_mask] < 0).all())


def test_one_experience_per_turn_numbers_the_steps(engine: GenerationEngine) -> None:
    """Each turn is its own experience: eid.step = the turn, the episode's return as reward, the infos
    merged, turn t's prompt the conversation before it."""
    conversation = Conversation(ModelWrapper(engine), "1+2=")
    for turn in range(3):
        if turn:
            conversation.add_text("x")
        conversation.respond()
    steps = conversation.step_experiences(1.0, [{"env_state_hash": str(t)} for t in range(3)])
    assert [e.eid.step for e in steps] == [0, 1, 2]
    assert [e.reward for e in steps] == [1.0] * 3
    assert [e.info["env_state_hash"] for e in steps] == ["0", "1", "2"]
    assert [e.experience_type for e in steps] == ["single_turn"] * 3
    lengths = [len(e.tokens) for e in steps if e.tokens is not None]
    assert all(a + 1 < b for a, b in itertools.pairwise(lengths))


def test_a_failing_episode_is_reported_counted_and_dropped(
    engine: GenerationEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """An environment that raises: the message names workflow, task, run and turn; the others train."""
    tasks = make_tasks(Flaky, [{"prompt": "1="}] * 4, step=0, task_offset=0, repeat_times=1)
    with caplog.at_level(logging.WARNING, logger="trinity_core.workflows"):
        outcome = WorkflowRunner("flaky", Flaky, {}, engine).run(tasks)
    assert outcome.metrics()["workflow/failed_episodes"] == 2.0
    assert [e.eid.task for e in outcome.experiences] == [0, 2]
    assert (
        "workflow 'flaky' failed on task 1 run 0 at turn 2: RuntimeError: the environment broke"
        in caplog.text
    )


def test_an_endless_episode_fails_at_the_call_limit(engine: GenerationEngine) -> None:
    """Every episode endless: the step stops with one line naming the limit."""
    tasks = make_tasks(Endless, [{"prompt": "1="}] * 2, step=3, task_offset=0, repeat_times=1)
    with pytest.raises(WorkflowError) as info:
        WorkflowRunner("endless", Endless, {}, engine, max_calls=5).run(tasks)
    text = str(info.value)
    assert "\n" not in text
    assert "every episode of step 3 failed (2 episodes)" in text
    assert "workflow 'endless' failed on task 0 run 0 at turn 5: TurnLimitError" in text
    assert "rollout.workflow_max_calls" in text


def test_experiences_without_distinct_ids_fail_the_episode(engine: GenerationEngine) -> None:
    tasks = make_tasks(SameIds, [{"prompt": "1="}], step=0, task_offset=0, repeat_times=2)
    with pytest.raises(WorkflowError, match=r"several experiences with run 0 and step 0; set exp.eid.run"):
        WorkflowRunner("same_ids", SameIds, {}, engine).run(tasks)


def test_a_per_task_workflow_run_logs_samples_from_its_experiences(tmp_path: Path, registered: None) -> None:
    """A step of a per-task workflow has experiences and no rollout: its samples come from them (a run
    past ``log_samples_every``, 100 by default, used to stop with an AttributeError there). Task by task
    the batch is the whole-step rollout's, so the rows are the same: each prompt's first response."""
    import json

    rows = {}
    for name, workflow in (("batched", "single_turn"), ("episodes", "single_turn_episodes")):
        config = copy.deepcopy(TINY)
        config["rollout"]["workflow"] = workflow
        config["trainer"]["log_samples_every"] = 2
        train(config, run_dir=tmp_path / name)
        lines = (tmp_path / name / "samples.jsonl").read_text().splitlines()
        rows[name] = [json.loads(line) for line in lines]
    assert [r["step"] for r in rows["episodes"]] == [2, 2]  # two prompts at step 2
    assert rows["episodes"] == rows["batched"]


def test_failing_episodes_are_counted_and_training_goes_on(tmp_path: Path, registered: None) -> None:
    """Two prompts x 4 runs per step, the odd task's 4 episodes fail each step: 3 steps train."""
    config = copy.deepcopy(TINY)
    config["rollout"]["workflow"] = "flaky"
    result = train(config, run_dir=tmp_path / "half")
    assert result.steps == 3
    assert [h["workflow/failed_episodes"] for h in result.history] == [4.0, 4.0, 4.0]
    assert [h["workflow/episodes"] for h in result.history] == [8.0, 8.0, 8.0]


def test_a_workflow_that_always_fails_stops_the_run_with_one_line(
    tmp_path: Path, registered: None, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from trinity_core.cli.main import main

    config = copy.deepcopy(TINY)
    config["rollout"]["workflow"] = "flaky"
    config["rollout"]["workflow_args"] = {}
    config["rollout"]["prompts_per_step"] = 1
    config["tasks"]["name"] = "last_digit"
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    registry.register("workflow", "flaky", AlwaysFails, replace=True)
    assert main(["train", "--config", str(path), "--run-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("trinity train: error: every episode of step 0 failed (4 episodes); first: ")
    assert "workflow 'flaky' failed on task 0 run 0 at turn 1: RuntimeError: no environment" in err[-1]


class AlwaysFails(Workflow):
    """Fails after its first model call."""

    def run(self) -> list[Experience]:
        """Raises."""
        self.model.generate([self.task.prompt])
        raise RuntimeError("no environment")
