"""TrinityGRPOTrainer (TRL 1.16): for the same batch, its loss and gradient equal trinity train's update
(``PolicyUpdate._loss`` with the step's global normalizers); its advantages are the plugin's."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

pytest.importorskip("trl", reason="needs trinity-core[trl]")
from datasets import Dataset
from trl import GRPOConfig

from trinity_core.integrations.trl import TrinityGRPOTrainer
from trinity_core.ops.loss_scale import global_normalizers
from trinity_core.train.data.tasks import CopyTask
from trinity_core.train.learner.update import PolicyUpdate
from trinity_core.train.models.policy import build_char_tokenizer, tiny_model

G = 4


def _reward(completions: list[str], **kwargs: Any) -> list[float]:
    return [float(c.startswith("5")) for c in completions]


def _trainer(tmp_path: Any, **components: Any) -> TrinityGRPOTrainer:
    tok = build_char_tokenizer("0123456789+=")
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=G,
        max_completion_length=4,
        report_to=[],
        use_cpu=True,
        # TRL's configs default to bf16=True (autocast, also on CPU); trinity train's precision
        # defaults to "no". Same precision on both sides, or the log-probs differ by ~1e-3.
        bf16=False,
        gradient_checkpointing=False,
        logging_steps=1,
        save_strategy="no",
    )
    data = Dataset.from_dict({"prompt": ["7+8=", "1+2=", "3+3=", "9+9="]})
    return TrinityGRPOTrainer(
        model=tiny_model(len(tok.get_vocab())),
        reward_funcs=[_reward],
        args=args,
        train_dataset=data,
        processing_class=tok,
        **components,
    )


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(3, 15, (8, 5), generator=g)
    completion_ids = torch.randint(3, 15, (8, 4), generator=g)
    lengths = torch.tensor([4, 2, 3, 1, 4, 4, 2, 3])
    completion_mask = (torch.arange(4)[None] < lengths[:, None]).long()
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.randn(8, generator=g),
        "num_items_in_batch": completion_mask.sum(),
    }


@pytest.mark.parametrize(
    "components",
    [
        {"policy_loss_fn": "sapo", "loss_agg_mode": "token-mean"},
        {"policy_loss_fn": "ppo", "loss_agg_mode": "seq-mean-token-mean", "entropy_loss_fn": "default"},
        {"algorithm_type": "opmd", "kl_loss_fn": "none"},
    ],
    ids=["sapo", "ppo-entropy", "opmd-preset"],
)
def test_loss_and_gradient_equal_trinity_train(tmp_path: Any, components: dict[str, Any]) -> None:
    trainer = _trainer(tmp_path, **components)
    if trainer.trinity.kl_loss is not None:
        pytest.skip("the preset selects a KL loss; covered without reference model here")
    inputs = _batch()
    model = trainer.model
    twin = tiny_model(model.config.vocab_size)
    twin.load_state_dict(model.state_dict())
    loss = trainer._compute_loss(model, inputs)
    loss.backward()

    # trinity train's update on the same rows: PolicyUpdate._loss with the step's global normalizers.
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = inputs["completion_mask"].bool()
    update = SimpleNamespace(
        components=SimpleNamespace(
            policy_loss=trainer.trinity.policy_loss, kl_loss=None, entropy=trainer.trinity.entropy
        ),
        loss_agg_mode=trainer.trinity.loss_agg_mode,
        model=twin,
        use_entropy=trainer.trinity.entropy is not None,
        entropy_grad=True,  # the entropy term's gradient counts, as in TRL's loss
        trainer=SimpleNamespace(share_prompts=True),  # trinity train's default: each prompt run once
        distribution=None,  # TRL samples at temperature 1 without top-k/p: plain softmax
    )
    cols = {"action_mask": mask, "advantages": inputs["advantages"][:, None].expand(8, 4)}
    scale = global_normalizers([mask])
    ref_loss, _ = PolicyUpdate._loss(update, ids, None, 5, cols, scale, scale)  # type: ignore[arg-type]
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    assert trainer.trinity.kl_loss is None
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        if p.grad is not None or q.grad is not None:
            assert p.grad is not None, f"{name}: no gradient through TrinityGRPOTrainer"
            assert q.grad is not None, f"{name}: no gradient through PolicyUpdate._loss"
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)


def test_advantages_come_from_the_plugin(tmp_path: Any) -> None:
    trainer = _trainer(tmp_path, policy_loss_fn="ppo", advantage_fn="opmd")
    trainer._trinity_rewards = None
    rewards = torch.tensor([[1.0], [0.0], [0.0], [0.0], [1.0], [1.0], [1.0], [0.0]])
    from trinity_core.integrations.rows import experiences_from_rows, run_advantage_fn

    mask = torch.ones(8, 3, dtype=torch.bool)
    exps = experiences_from_rows(rewards[:, 0], [i // G for i in range(8)], mask)
    adv, _, _ = run_advantage_fn(trainer.trinity.advantage, exps, mask)
    # opmd with the mean baseline: r - mean(group)
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25, 0.25, 0.25, 0.25, -0.75])
    torch.testing.assert_close(adv[:, 0], expected)


@pytest.mark.parametrize(
    "components",
    [
        {"policy_loss_fn": "sapo", "advantage_fn": "grpo"},
        {"algorithm_type": "opmd", "kl_loss_fn": "none"},
    ],
    ids=["sapo", "opmd"],
)
def test_short_run_learns(tmp_path: Any, components: dict[str, Any]) -> None:
    """60 TRL steps (8 prompts x 8 completions, tiny Qwen2) learn the copy task.

    The copy task (2 letters of "abc") stands in for the default last-digit task, which this model
    needs several hundred steps to learn (CI-sized: about 10 s of training per run on one CPU thread).
    """
    task = CopyTask(length=2, letters="abc")
    rows = task.sample(1000, torch.Generator().manual_seed(0))
    data = Dataset.from_dict({"prompt": [r["prompt"] for r in rows], "answer": [r["answer"] for r in rows]})
    tok = build_char_tokenizer(task.alphabet())

    def exact(completions: list[str], answer: list[str], **kwargs: Any) -> list[float]:
        return [float(c[: len(a)] == a) for c, a in zip(completions, answer, strict=True)]

    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=64,
        num_generations=8,
        max_completion_length=task.max_response_tokens(),
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        max_steps=60,
        report_to=[],
        use_cpu=True,
        bf16=False,
        logging_steps=1,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    trainer = TrinityGRPOTrainer(
        model=tiny_model(len(tok.get_vocab())),
        reward_funcs=[exact],
        args=args,
        train_dataset=data,
        processing_class=tok,
        **components,
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is fastest, and CI has two cores
    try:
        trainer.train()
    finally:
        torch.set_num_threads(threads)
    rewards = [row["reward"] for row in trainer.state.log_history if "reward" in row]
    assert len(rewards) == 60
    assert sum(rewards[:10]) / 10 < 0.3  # it starts out unable to copy
    best = max(sum(rewards[i : i + 10]) / 10 for i in range(len(rewards) - 9))
    assert best >= 0.7, f"best 10-step mean reward {best:.3f}; curve {[round(r, 2) for r in rewards]}"
