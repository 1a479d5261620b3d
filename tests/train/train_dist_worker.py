"""Worker for tests/test_train_distributed.py, run under torchrun with 2 CPU (gloo) ranks.

1. Gradient of one optimizer step on a fixed batch split over the ranks (micro-batches of 2 rows),
   written per rank to ``grad<rank>.safetensors``.
2. The same gradient with token-budget micro-batches (``gradtok<rank>``), and after balancing the
   rows over the ranks by tokens in groups of two (``gradbal<rank>``, the token counts in
   ``balance<rank>.json``).
3. Three real training steps of ``trinity train`` (batches balanced across the ranks); each rank writes
   its parameters to ``params<rank>.safetensors``.
"""

from __future__ import annotations

import json
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


def fixed_experiences(group_size: int = 4) -> list[Experience]:
    """8 experiences with responses of 1..3 tokens (unequal per rank) and random advantages, in task
    groups of ``group_size``."""
    gen = torch.Generator().manual_seed(123)
    exps = []
    for i in range(N_ROWS):
        length = 1 + (i * 5) % MAX_RESPONSE if i < 4 else MAX_RESPONSE
        tokens = torch.randint(3, 14, (PROMPT + length,), generator=gen, dtype=torch.int32)
        exp = Experience(
            eid=EID(batch=0, task=i // group_size, run=i % group_size),
            tokens=tokens,
            prompt_length=PROMPT,
            reward=0.0,
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
    from trinity_core.train.modes.runner import Runner
    from trinity_core.train.run import make_accelerator, prepare_run_dir

    data = {**CONFIG, "trainer": {**CONFIG["trainer"], **(overrides or {})}}
    config = resolve_config(data)
    acc = make_accelerator(config, run_dir)
    prepare_run_dir(run_dir, config, resume=False, overwrite=True, is_main=acc.is_main_process)
    acc.wait_for_everyone()
    return Runner(config, run_dir, accelerator=acc)


def main(out: Path) -> None:
    trainer = make_trainer(out / "grad-run")
    rank, world = trainer.rank, trainer.acc.num_processes
    per = N_ROWS // world
    grads = step_gradient(trainer, fixed_experiences()[rank * per : (rank + 1) * per])
    save_file(grads, str(out / f"grad{rank}.safetensors"))
    budget = make_trainer(out / "token-run", {"micro_batch_size": None, "max_tokens_per_micro_batch": 9})
    grads = step_gradient(budget, fixed_experiences()[rank * per : (rank + 1) * per])
    save_file(grads, str(out / f"gradtok{rank}.safetensors"))

    from trinity_core.train.learner.balance import balance_batch

    mine = fixed_experiences(group_size=2)[rank * per : (rank + 1) * per]
    batch, shares = balance_batch(ExperienceBatch.from_experiences(mine), trainer.acc, pad_token_id=0)
    grads = step_gradient(trainer, batch.to_experiences())
    save_file(grads, str(out / f"gradbal{rank}.safetensors"))
    counts = {k: float(v) for k, v in shares.items()}
    (out / f"balance{rank}.json").write_text(json.dumps(counts), encoding="utf-8")
    trainer = make_trainer(out / "train-run")
    trainer.train()
    params = {n: p.detach().contiguous() for n, p in trainer.learner.policy.named_parameters()}
    save_file(params, str(out / f"params{rank}.safetensors"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
