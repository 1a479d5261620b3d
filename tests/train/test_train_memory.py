"""Memory settings of ``trinity train``: mixed precision, gradient checkpointing, LoRA, token budgets.

Each is compared with the plain fp32 run of the same tiny model: what must not change (gradients, the
reference policy) is equal, what must change (autocast log-probs, activation recomputation, the
trainable parameters) is shown to change.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import train_dist_worker as worker

from trinity_core.batch import ExperienceBatch
from trinity_core.cli.main import main
from trinity_core.config import resolve_config
from trinity_core.train.learner.logprobs import response_logprobs
from trinity_core.train.learner.micro_batches import micro_batches, row_tokens
from trinity_core.train.models.lora import AdapterDisabled

LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
CLI = [
    "train",
    "--set",
    "trainer.total_steps=1",
    "--set",
    "trainer.progress=false",
    "--set",
    "tasks.eval_size=0",
]


def trainer(tmp: Path, name: str, trainer_keys: dict[str, Any] | None = None, **sections: Any) -> Any:
    """A Runner of the distributed test's tiny run (KL loss on), SGD lr 1 without clipping so that one
    update moves every parameter by minus its gradient."""
    from trinity_core.train.modes.runner import Runner
    from trinity_core.train.run import make_accelerator, prepare_run_dir

    data = copy.deepcopy(worker.CONFIG)
    data["algorithm"]["kl_loss_fn"] = "k3"
    data["trainer"].update({"optimizer": "sgd", "lr": 1.0, "grad_clip": None, **(trainer_keys or {})})
    for section, keys in sections.items():
        data[section].update(keys)
    config = resolve_config(data)
    acc = make_accelerator(config, tmp / name)
    prepare_run_dir(tmp / name, config, resume=False, overwrite=True, is_main=True)
    return Runner(config, tmp / name, accelerator=acc)


def fixed_batch() -> tuple[Tensor, dict[str, Tensor]]:
    batch = ExperienceBatch.from_experiences(
        worker.fixed_experiences(), max_prompt_length=worker.PROMPT, max_response_length=worker.MAX_RESPONSE
    )
    return batch.input_ids.long(), {"action_mask": batch.action_mask, "advantages": batch.advantages}


def update(t: Any) -> dict[str, Tensor]:
    """One optimizer step of ``t``'s learner on the fixed batch; returns the parameter changes."""
    ids, columns = fixed_batch()
    ref = torch.no_grad()(response_logprobs)(t.learner.ref, ids, None, worker.PROMPT, False)[0]
    before = {n: p.detach().clone() for n, p in t.learner.policy.named_parameters()}
    t.learner.update(ids, None, worker.PROMPT, {**columns, "ref_logprob": ref}, len(ids))
    return {n: p.detach() - before[n] for n, p in t.learner.policy.named_parameters()}


def rel(a: Tensor, b: Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


Tensor = torch.Tensor


# ---------------------------------------------------------------- 1. mixed precision


def test_bf16_autocasts_the_forward_and_keeps_weights_and_logprobs_float32(tmp_path: Path) -> None:
    fp32, bf16 = trainer(tmp_path, "fp32"), trainer(tmp_path, "bf16", {"mixed_precision": "bf16"})
    assert bf16.acc.mixed_precision == "bf16"
    ids, _ = fixed_batch()
    with torch.no_grad():
        lp32 = response_logprobs(fp32.learner.model, ids, None, worker.PROMPT, False)[0]
        lp16 = response_logprobs(bf16.learner.model, ids, None, worker.PROMPT, False)[0]
    assert lp16.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in bf16.learner.policy.parameters())
    # bf16 keeps 8 significant bits: the same weights give log-probs that differ, but only a little.
    assert 1e-4 < float((lp16 - lp32).abs().max()) < 0.1
    assert all(torch.isfinite(d).all() for d in update(bf16).values())


def test_the_older_key_trainer_precision_is_still_read() -> None:
    assert resolve_config({"trainer": {"precision": "bf16"}}).trainer.mixed_precision == "bf16"


def test_fp16_on_cpu_is_one_line_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    args = [
        *CLI,
        "--run-dir",
        str(run),
        "--set",
        "trainer.device=cpu",
        "--set",
        "trainer.mixed_precision=fp16",
    ]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert all(word in err for word in ("trainer.mixed_precision", "CUDA", "bf16")), err
    assert not run.exists()  # refused before anything was written


# ---------------------------------------------------------------- 2. gradient checkpointing


def test_gradient_checkpointing_recomputes_activations_and_keeps_the_gradient(tmp_path: Path) -> None:
    whole = {"micro_batch_size": None}
    plain = trainer(tmp_path, "plain", whole)
    ckpt = trainer(tmp_path, "gc", {**whole, "gradient_checkpointing": True})
    calls = {"plain": 0, "gc": 0}
    for name, t in (("plain", plain), ("gc", ckpt)):
        # Inside the checkpointed layer; a pre-hook, as the recompute stops once it has what it needs.
        mlp = t.learner.policy.model.layers[0].mlp
        mlp.register_forward_pre_hook(lambda *_, name=name: calls.__setitem__(name, calls[name] + 1))
    d_plain, d_gc = update(plain), update(ckpt)
    # One forward in the update (the reference is a copy); with checkpointing the backward runs it again.
    assert calls == {"plain": 1, "gc": 2}
    for name, d in d_plain.items():
        assert rel(d_gc[name], d) < 1e-6, name


# ---------------------------------------------------------------- 3. LoRA


def test_lora_trains_only_adapters_and_the_reference_is_the_policy_without_them(tmp_path: Path) -> None:
    plain = trainer(tmp_path, "plain")
    lora = trainer(tmp_path, "lora", model={"lora": LORA})
    policy, ref = lora.learner.policy, lora.learner.ref
    assert isinstance(ref, AdapterDisabled)
    assert ref.model is policy  # no second copy of the weights
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert all("lora_" in n for n in trainable)
    assert len(trainable) == 4  # lora_A and lora_B of q_proj and v_proj in the one layer

    ids, _ = fixed_batch()
    base = torch.no_grad()(response_logprobs)(plain.learner.ref, ids, None, worker.PROMPT, False)[0]
    moved = update(lora)
    assert all(float(moved[n].abs().max()) > 0 for n in trainable if "lora_B" in n)
    assert all(float(d.abs().max()) == 0 for n, d in moved.items() if n not in trainable)
    with torch.no_grad():
        after_ref = response_logprobs(ref, ids, None, worker.PROMPT, False)[0]
        after_policy = response_logprobs(policy, ids, None, worker.PROMPT, False)[0]
    assert torch.equal(after_ref, base)  # the reference is still the initial policy, exactly
    assert float((after_policy - base).abs().max()) > 1e-4  # while the policy moved


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("model.lora.target_modules=[no_such_proj]", ["model.lora.target_modules", "q_proj", "all-linear"]),
        ("model.lora.r=4", ["pip install 'trinity-core[lora]'", "peft"]),
    ],
    ids=["unknown-target", "peft-missing"],
)
def test_lora_bad_input_is_one_line_and_exit_1(
    setting: str,
    expected: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if "r=4" in setting:
        monkeypatch.setitem(sys.modules, "peft", None)  # as if PEFT were not installed
    assert main([*CLI, "--run-dir", str(tmp_path / "run"), "--set", setting]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert all(word in err for word in expected), err


def test_lora_export_writes_the_adapter_and_merge_the_merged_model(tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from trinity_core.train.data.tasks import build_task
    from trinity_core.train.export import load_checkpoint_policy
    from trinity_core.train.models.policy import load_policy

    run = tmp_path / "run"
    lora = ["--set", "model.lora.r=4", "--set", "trainer.threads=1", "--set", "trainer.total_steps=2"]
    assert main([*CLI, "--run-dir", str(run), *lora, "--set", "rollout.prompts_per_step=2"]) == 0
    trained, _, config = load_checkpoint_policy(run, run / "checkpoints" / "step-000002")
    ids = torch.tensor([[1, 5, 6, 7, 8]])
    with torch.no_grad():
        expected = trained(input_ids=ids).logits

    assert main(["export", str(run), str(tmp_path / "adapter")]) == 0
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert not (tmp_path / "adapter" / "model.safetensors").exists()
    alphabet = build_task(config).alphabet()
    base, _ = load_policy(None, None, config.model.config, alphabet, seed=config.trainer.seed)
    adapter = PeftModel.from_pretrained(base, tmp_path / "adapter")

    assert main(["export", str(run), str(tmp_path / "merged"), "--merge"]) == 0
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    with torch.no_grad():
        for model in (adapter, merged):
            assert torch.allclose(model(input_ids=ids).logits, expected, atol=1e-5)


# ---------------------------------------------------------------- 4. token-budget micro-batches


def test_micro_batches_pack_consecutive_rows_within_the_token_budget() -> None:
    tokens = torch.tensor([3, 4, 2, 9, 1, 1, 5])
    # 3+4 = 7 fits; 2 (+9 would not); 9 alone (over the budget); 1+1+5 = 7.
    assert micro_batches(slice(0, 7), None, tokens=tokens, max_tokens=7) == [
        slice(0, 2),
        slice(2, 3),
        slice(3, 4),
        slice(4, 7),
    ]
    # Both limits: at most 2 rows as well.
    assert micro_batches(slice(0, 7), 2, tokens=tokens, max_tokens=7)[-2:] == [slice(4, 6), slice(6, 7)]
    assert micro_batches(slice(2, 7), None, tokens=tokens, max_tokens=7) == [
        slice(2, 3),
        slice(3, 4),
        slice(4, 7),
    ]
    pieces = micro_batches(torch.tensor([6, 0, 1]), None, tokens=tokens, max_tokens=7)
    assert [p.tolist() for p in pieces] == [[6], [0, 1]]  # type: ignore[union-attr]


def test_row_tokens_counts_prompt_and_response_tokens() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 0, 1], [0, 0, 0]])
    assert row_tokens(None, mask, 4).tolist() == [6, 7, 4]  # an empty response still has its prompt
    attn = torch.tensor([[0, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    assert row_tokens(attn, mask[:2], 2).tolist() == [3, 5]


def test_token_budget_micro_batches_leave_the_update_unchanged(tmp_path: Path) -> None:
    whole = trainer(tmp_path, "whole", {"micro_batch_size": None})
    budget = trainer(tmp_path, "budget", {"micro_batch_size": None, "max_tokens_per_micro_batch": 12})
    d_whole, d_budget = update(whole), update(budget)
    for name, d in d_whole.items():
        # Float32 rounding of rows cut into other shapes: a few units in the last place of Adam's first
        # step (which divides each gradient by its own magnitude, so small components count fully).
        assert rel(d_budget[name], d) < 2e-6, name
