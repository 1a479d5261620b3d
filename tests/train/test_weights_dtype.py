"""``model.dtype``: a LoRA run keeps its frozen base in bf16, adapters and optimizer state float32, and the
KL reference (adapters disabled) is that same bf16 base; low precision that would train is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import train_dist_worker as worker
from test_train_memory import CLI, LORA, fixed_batch, trainer, update

from trinity_core.cli.main import main
from trinity_core.config import resolve_config
from trinity_core.train.learner.logprobs import response_logprobs
from trinity_core.train.models.dtype import weights_dtype
from trinity_core.train.models.lora import AdapterDisabled
from trinity_core.train.models.policy import load_policy


@pytest.mark.parametrize(
    ("model", "precision", "expected"),
    [
        ({}, "no", torch.float32),
        ({}, "bf16", torch.float32),  # full fine-tune: float32 weights under autocast
        ({"lora": LORA}, "no", torch.float32),
        ({"lora": LORA}, "bf16", torch.bfloat16),  # LoRA: the frozen base in the autocast dtype
        ({"lora": LORA}, "fp16", torch.float16),
        ({"lora": LORA, "dtype": "float32"}, "bf16", torch.float32),  # asked for explicitly
        ({"lora": LORA, "dtype": "bfloat16"}, "no", torch.bfloat16),
    ],
)
def test_auto_is_float32_but_for_a_lora_base_under_mixed_precision(
    model: dict[str, object], precision: str, expected: torch.dtype
) -> None:
    config = resolve_config({"model": model, "trainer": {"mixed_precision": precision}})
    assert weights_dtype(config) == expected


def test_lora_over_a_bf16_base_trains_the_float32_adapters_against_that_same_base(tmp_path: Path) -> None:
    t = trainer(
        tmp_path,
        "lora16",
        {"mixed_precision": "bf16", "optimizer": "adamw", "lr": 1e-2},
        model={"lora": LORA},
    )
    policy, ref = t.learner.policy, t.learner.ref
    base = {n: p for n, p in policy.named_parameters() if "lora_" not in n}
    adapters = {n: p for n, p in policy.named_parameters() if "lora_" in n}
    assert {p.dtype for p in base.values()} == {torch.bfloat16}
    assert {p.dtype for p in adapters.values()} == {torch.float32}
    assert set(adapters) == {n for n, p in policy.named_parameters() if p.requires_grad}

    # The reference is the policy's own bf16 base with the adapters off: no copy, and exactly the bf16
    # model that the config builds.
    assert isinstance(ref, AdapterDisabled)
    assert ref.model is policy
    built, _ = load_policy(
        None, None, t.config.model.config, t.task.alphabet(), seed=t.config.trainer.seed, dtype=torch.bfloat16
    )
    built_params = dict(built.named_parameters())
    for name, p in base.items():
        assert torch.equal(
            p, built_params[name.removeprefix("base_model.model.").replace(".base_layer", "")]
        ), name

    ids, _ = fixed_batch()
    logprobs = torch.no_grad()(response_logprobs)
    before = logprobs(ref, ids, None, worker.PROMPT, False)[0]
    assert torch.equal(before, logprobs(built, ids, None, worker.PROMPT, False)[0])
    moved = update(t)
    assert all(float(moved[n].abs().max()) > 0 for n in adapters if "lora_B" in n)  # trained
    assert all(float(moved[n].abs().max()) == 0 for n in base)  # the base did not move
    state = t.learner.optimizer.state_dict()["state"]
    assert state
    assert {s["exp_avg"].dtype for s in state.values()} == {torch.float32}
    after_ref = logprobs(ref, ids, None, worker.PROMPT, False)[0]
    after_policy = logprobs(policy, ids, None, worker.PROMPT, False)[0]
    assert after_ref.dtype == torch.float32  # log-probs stay float32 over a bf16 model
    assert torch.equal(after_ref, before)  # the reference is still the initial bf16 base
    assert float((after_policy - before).abs().max()) > 1e-4  # while the policy moved


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (["model.dtype=bfloat16"], ["model.dtype", "full fine-tune", "model.lora", "mixed_precision: bf16"]),
        (
            ["model.dtype=float16", "model.lora.r=4", "trainer.device=cpu"],
            ["model.dtype", "CUDA", "bfloat16"],
        ),
    ],
    ids=["bf16-full-fine-tune", "fp16-weights-on-cpu"],
)
def test_refused_weight_dtypes_are_one_line_and_exit_1(
    settings: list[str], expected: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    args = [*CLI, "--run-dir", str(run)]
    for setting in settings:
        args += ["--set", setting]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert all(word in err for word in expected), err
    assert not run.exists()  # refused before anything was written


def test_a_bare_no_in_yaml_is_mixed_precision_no() -> None:
    # `--set trainer.mixed_precision=no` and `mixed_precision: no` in a file: YAML 1.1 reads false.
    assert resolve_config({"trainer": {"mixed_precision": False}}).trainer.mixed_precision == "no"
