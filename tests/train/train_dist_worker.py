"""Worker for tests/test_train_distributed.py, run under torchrun with 2 CPU (gloo) ranks.

1. Gradient of one optimizer step on a fixed batch split over the ranks (micro-batches of 2 rows),
   written per rank to ``grad<rank>.safetensors``.
2. Three real training steps of ``trinity train``; each rank writes its parameters to
   ``params<rank>.safetensors``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from trinity_core.batch import ExperienceBatch
from trinity_core.config import resolve_config
from trinity_core.experience import EID, Experience

CONFIG: dict[str, Any] = {
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "kl_loss_fn": "none"},
    "rollout": {"prompts_per_step": 4},
    "tasks": {"eval_size": 0},
    "trainer": {
        "total_steps": 3,
        "checkpoint_every": 0,
        "progress": False,
        "threads": 1,
        "micro_batch_size": 2,
    },
    "model": {
        "config": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "num_hidden_layers": 1,
        }
    },
}
N_ROWS, PROMPT, MAX_RESPONSE = 8, 4, 3


def fixed_experiences() -> list[Experience]:
    """8 experiences with responses of 1..3 tokens (unequal per rank) and random advantages."""
    gen = torch.Generator().manual_seed(123)
    exps = []
    for i in range(N_ROWS):
        length = 1 + (i * 5) % MAX_RESPONSE if i < 4 else MAX_RESPONSE
        tokens = torch.randint(3, 14, (PROMPT + length,), generator=gen, dtype=torch.int32)
        exp = Experience(
            eid=EID(batch=0, task=i // 4, run=i % 4), tokens=tokens, prompt_length=PROMPT, reward=0.0
        )
        exp.advantages = torch.randn(length, generator=gen)
        exps.append(exp)
    return exps


def step_gradient(trainer: Any, exps: list[Experience]) -> dict[str, torch.Tensor]:
    """Accumulate one optimizer step's gradient on ``exps`` with the trainer's loss; return it."""
    batch = ExperienceBatch.from_experiences(exps, max_prompt_length=PROMPT, max_response_length=MAX_RESPONSE)
    mask = batch.action_mask
    columns = {"action_mask": mask, "advantages": batch.advantages}
    trainer.learner.optimizer.zero_grad(set_to_none=True)
    trainer.learner.backward_minibatch(batch.input_ids.long(), None, PROMPT, columns, torch.arange(len(exps)))
    return {
        n: p.grad.detach().clone() for n, p in trainer.learner.policy.named_parameters() if p.grad is not None
    }


def make_trainer(run_dir: Path, overrides: dict[str, Any] | None = None) -> Any:
    from trinity_core.train.loop import Trainer
    from trinity_core.train.run import make_accelerator, prepare_run_dir

    data = {**CONFIG, "trainer": {**CONFIG["trainer"], **(overrides or {})}}
    config = resolve_config(data)
    acc = make_accelerator(config, run_dir)
    prepare_run_dir(run_dir, config, resume=False, overwrite=True, is_main=acc.is_main_process)
    acc.wait_for_everyone()
    return Trainer(config, run_dir, accelerator=acc)


def main(out: Path) -> None:
    trainer = make_trainer(out / "grad-run")
    rank, world = trainer.rank, trainer.acc.num_processes
    per = N_ROWS // world
    grads = step_gradient(trainer, fixed_experiences()[rank * per : (rank + 1) * per])
    save_file(grads, str(out / f"grad{rank}.safetensors"))
    trainer = make_trainer(out / "train-run")
    trainer.train()
    params = {n: p.detach().contiguous() for n, p in trainer.learner.policy.named_parameters()}
    save_file(params, str(out / f"params{rank}.safetensors"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
