"""Expert rows mixed into a batch, the capability check, and the teacher's data helper."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch
import yaml

from trinity_core import registry
from trinity_core.batch import ExperienceBatch
from trinity_core.buffer import DiskReader
from trinity_core.cli.main import main
from trinity_core.components import EntropyLossFn
from trinity_core.config import ConfigError, resolve_config
from trinity_core.config.capabilities import check_capabilities, missing_capabilities
from trinity_core.eid import EID
from trinity_core.experience import Experience
from trinity_core.train import train
from trinity_core.train.data.pairs import write_answer_experiences
from trinity_core.train.learner.expert import ExpertData, expert_ratio, load_expert_data
from trinity_core.train.models.policy import build_char_tokenizer

# ------------------------------------------------------------------------------------- expert rows


def rollout_batch() -> ExperienceBatch:
    exps = [
        Experience(
            eid=EID(task=0), tokens=[1, 5, 6, 7, 2], prompt_length=3, reward=1.0, advantages=[0.5, 0.5]
        ),
        Experience(eid=EID(task=1), tokens=[1, 5, 6, 8], prompt_length=3, reward=0.0, advantages=[-1.0]),
    ]
    return ExperienceBatch.from_experiences(exps, pad_token_id=0)


def test_expert_rows_are_repadded_and_marked() -> None:
    expert = ExpertData(
        [Experience(tokens=[1, 9, 3, 4, 2], prompt_length=2)], pad_token_id=0, ratio=0.5, seed=0, rank=0
    )

    mixed = expert.mix(rollout_batch(), step=4)

    # ceil(2 rollout rows x 0.5) = 1 expert row; prompts left-padded to P = 3, responses right to R = 3.
    assert mixed.input_ids.tolist() == [[1, 5, 6, 7, 2, 0], [1, 5, 6, 8, 0, 0], [0, 1, 9, 3, 4, 2]]
    assert (mixed.max_prompt_length, mixed.max_response_length, len(mixed)) == (3, 3, 3)
    assert mixed.attention_mask[2].tolist() == [False, True, True, True, True, True]
    assert mixed.extras["expert_mask"].tolist() == [False, False, True]
    assert mixed.extras["step"].tolist() == [4, 4, 4]
    assert mixed.advantages is not None
    assert mixed.advantages.tolist() == [[0.5, 0.5, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    assert mixed.rewards[:2].tolist() == [1.0, 0.0]
    assert math.isnan(mixed.rewards[2])
    assert mixed.has_reward.tolist() == [True, True, False]
    assert mixed.group_index["task"].tolist() == [0, 1, 2]  # the expert row is a group of its own
    assert mixed.response_mask.tolist() == [[True, True, False], [True, False, False], [True, True, True]]
    assert mixed.experiences[2].tokens.tolist() == [1, 9, 3, 4, 2]


def test_expert_rows_follow_the_step_rank_and_seed() -> None:
    items = [Experience(tokens=[1, i, 2], prompt_length=2) for i in range(3, 53)]
    data = ExpertData(items, pad_token_id=0, ratio=1.0, seed=7, rank=0)
    other_rank = ExpertData(items, pad_token_id=0, ratio=1.0, seed=7, rank=1)

    assert torch.equal(data.pick(3, 8), data.pick(3, 8))  # a resumed run draws the same rows
    assert not torch.equal(data.pick(3, 8), data.pick(4, 8))
    assert not torch.equal(data.pick(3, 8), other_rank.pick(3, 8))
    assert len(ExpertData(items, pad_token_id=0, ratio=0.25, seed=7, rank=0).pick(0, 8)) == 2


def test_the_ratio_is_the_loss_arguments_expert_over_usual() -> None:
    def config(args: dict[str, Any]) -> Any:
        return SimpleNamespace(algorithm=SimpleNamespace(policy_loss_fn_args=args))

    assert expert_ratio(config({"train_batch_size_usual": 8, "train_batch_size_expert": 2})) == 0.25
    assert expert_ratio(config({})) == 1.0  # trinity-rft's expert_data_ratio 0.5: half of the batch


def test_expert_pairs_are_encoded_like_rollouts_and_bad_files_name_the_key(tmp_path: Path) -> None:
    tok = build_char_tokenizer("0123456789+=")
    good = tmp_path / "pairs.jsonl"
    good.write_text(json.dumps({"prompt": "1+2=", "response": "3"}) + "\n")
    data = load_expert_data(resolve_config({"data": {"expert_path": str(good)}}), tok, rank=0)
    assert data is not None
    encode = [tok.bos_token_id, *tok.encode("1+2=3", add_special_tokens=False), tok.eos_token_id]
    assert data.items[0].tokens.tolist() == encode
    assert data.items[0].prompt_length == 5

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "1+2=", "answer": "3"}) + "\n")
    with pytest.raises(ConfigError, match=r"data\.expert_path: .* needs rows with 'prompt' and 'response'"):
        load_expert_data(resolve_config({"data": {"expert_path": str(bad)}}), tok, rank=0)
    # Not read outside mode both: nothing mixes expert rows there.
    config = resolve_config({"mode": "explore", "data": {"expert_path": str(bad)}})
    assert load_expert_data(config, tok, rank=0) is None


# -------------------------------------------------------------------------------- capability check


class NeedsValues(EntropyLossFn):
    """A test entropy loss that reads the critic's ``values`` column and the teacher."""

    required_fields: ClassVar[tuple[str, ...]] = ("values",)
    requires: ClassVar[frozenset[str]] = frozenset({"teacher"})

    def __call__(self, entropy: Any, action_mask: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class NeedsNothingKnown(NeedsValues):
    """A test entropy loss with an undeclared requirement."""

    required_fields: ClassVar[tuple[str, ...]] = ()
    requires: ClassVar[frozenset[str]] = frozenset({"crystal_ball", "mode:train"})


@pytest.fixture
def test_losses() -> Iterator[None]:
    registry.register("entropy_loss", "needs_values_test", NeedsValues)
    registry.register("entropy_loss", "needs_unknown_test", NeedsNothingKnown)
    yield
    registry.unregister("entropy_loss", "needs_values_test")
    registry.unregister("entropy_loss", "needs_unknown_test")


def test_needs_are_refused_one_line_each_naming_the_key(test_losses: None) -> None:
    config = resolve_config({"algorithm": {"entropy_loss_fn": "needs_values_test"}})
    lines = [str(p) for p in missing_capabilities(config)]
    assert lines == [
        "model.critic_path: entropy_loss_fn 'needs_values_test' needs a critic (value model), which this "
        "run lacks; use a preset with use_critic (e.g. algorithm.algorithm_type: ppo) or set "
        "model.critic_path",
        "model.teacher_path: entropy_loss_fn 'needs_values_test' needs a teacher model, which this run "
        "lacks; set model.teacher_path to a local Hugging Face model folder (docs/training.md, 'Teacher')",
    ]
    # Supplying the teacher leaves the critic; mode explore trains nothing and needs nothing.
    with_teacher = resolve_config(
        {"algorithm": {"entropy_loss_fn": "needs_values_test"}, "model": {"teacher_path": "t"}}
    )
    assert [p.path for p in missing_capabilities(with_teacher)] == ["model.critic_path"]
    explore = resolve_config({"mode": "explore", "algorithm": {"entropy_loss_fn": "needs_values_test"}})
    check_capabilities(explore)

    unknown = resolve_config({"algorithm": {"entropy_loss_fn": "needs_unknown_test"}})
    problems = missing_capabilities(unknown)
    assert [p.path for p in problems] == ["algorithm.entropy_loss_fn", "mode"]
    assert "requires 'crystal_ball', which no run provides" in problems[0].message
    assert problems[1].message == "entropy_loss_fn 'needs_unknown_test' runs only in mode 'train', not 'both'"


def test_validate_and_train_refuse_before_the_run_dir(test_losses: None, tmp_path: Path, capsys: Any) -> None:
    config = {"algorithm": {"entropy_loss_fn": "needs_values_test"}, "model": {"teacher_path": "t"}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))

    assert main(["config", "validate", str(path)]) == 1
    assert capsys.readouterr().err.startswith(
        "trinity: invalid config: model.critic_path: entropy_loss_fn 'needs_values_test' needs a critic"
    )
    with pytest.raises(ConfigError, match=r"model\.critic_path"):
        train(config, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------- the teacher's data


def test_answer_experiences_hold_prompt_and_answer(tmp_path: Path) -> None:
    write_answer_experiences(tmp_path / "answers", 5, seed=2)

    exps = asyncio.run(DiskReader(tmp_path / "answers").read())
    task = registry.create("task", "last_digit", {})
    tok = build_char_tokenizer(task.alphabet())
    rows = task.sample(5, torch.Generator().manual_seed(2))
    assert len(exps) == 5
    for exp, row in zip(exps, rows, strict=True):
        text = tok.decode(exp.tokens.tolist(), skip_special_tokens=True)
        assert text == row["prompt"] + row["answer"]
        assert exp.prompt_length == 1 + len(row["prompt"])  # <bos> + prompt
        assert exp.tokens[-1] == tok.eos_token_id
