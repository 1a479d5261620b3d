"""``trinity export``: a checkpoint of a 2-step run of the embedded default, loaded as a new user would.

The exported folder is read with ``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained`` only, and
its greedy outputs are compared with the trainer's own model (built by the trainer's loading code, with
the checkpoint's weights) generating through the trainer's rollout code.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trinity_core.cli.main import main
from trinity_core.lm.sampling import encode_prompts, generate
from trinity_core.train import train
from trinity_core.train.export import load_checkpoint_policy, save_policy

PROMPTS = ["7+8=", "0+0=", "9+9=", "3+4="]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two steps of the embedded default (its model, task and algorithm), a checkpoint after each."""
    run_dir = tmp_path_factory.mktemp("export") / "run"
    overrides = [
        "trainer.total_steps=2",
        "trainer.checkpoint_every=1",
        "trainer.progress=false",
        "trainer.threads=1",
        "tasks.eval_size=0",
    ]
    train(None, overrides=overrides, run_dir=run_dir)
    return run_dir


def test_the_export_loads_with_from_pretrained_and_reproduces_greedy_outputs(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "model"
    assert main(["export", str(run), str(out)]) == 0
    assert f"exported to {out}" in capsys.readouterr().out

    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    trained, trained_tok, _ = load_checkpoint_policy(run, run / "checkpoints" / "step-000002")

    # What a user types gives the ids the trainer fed the model (BOS first, then one id per character).
    ids, _ = encode_prompts(trained_tok, PROMPTS[:1], torch.device("cpu"))
    assert tokenizer(PROMPTS[0])["input_ids"] == ids[0].tolist()

    ours = generate(trained, trained_tok, PROMPTS, repeat=1, max_new_tokens=4, temperature=1.0, greedy=True)
    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    assert tokenizer.padding_side == "left"
    with torch.no_grad():
        theirs = model.generate(**batch, max_new_tokens=4)  # the exported generation config: greedy
    width = ours.response_ids.shape[1]
    new = theirs[:, batch["input_ids"].shape[1] :]
    for row, length in enumerate(ours.response_lengths.tolist()):
        assert new[row, :length].tolist() == ours.response_ids[row, :length].tolist(), row
    assert width == 4
    assert model.generation_config.max_new_tokens == 2  # last_digit: one digit and EOS
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, trained(**batch).logits)


def test_save_policy_leaves_the_trainers_model_and_tokenizer_as_they_were(run: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model, tokenizer, _ = load_checkpoint_policy(run, run / "checkpoints" / "step-000002")
    before = tokenizer("7+8=", add_special_tokens=True)["input_ids"]
    generation = model.generation_config.to_dict()
    save_policy(model, tokenizer, tmp_path / "model", max_new_tokens=3, overwrite=False)
    assert tokenizer("7+8=", add_special_tokens=True)["input_ids"] == before
    assert model.generation_config.to_dict() == generation
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "model").generation_config.max_new_tokens == 3


def test_step_selects_a_checkpoint_and_bad_input_is_one_line(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.torch import load_file

    out = tmp_path / "step1"
    assert main(["export", str(run), str(out), "--step", "1"]) == 0
    exported = load_file(str(out / "model.safetensors"))
    saved = load_file(str(run / "checkpoints" / "step-000001" / "model.safetensors"))
    assert all(torch.equal(exported[k], v) for k, v in saved.items())
    capsys.readouterr()

    # An existing folder: one line, exit 1, nothing in it touched.
    (out / "mine.txt").write_text("keep")
    before = sorted(p.name for p in out.iterdir())
    assert main(["export", str(run), str(out)]) == 1
    assert capsys.readouterr().err == (
        f"trinity export: error: {out} exists; choose a new folder, or pass --overwrite to replace it\n"
    )
    assert sorted(p.name for p in out.iterdir()) == before
    assert main(["export", str(run), str(out), "--overwrite"]) == 0
    assert not (out / "mine.txt").exists()
    capsys.readouterr()

    assert main(["export", str(run), str(tmp_path / "x"), "--step", "7"]) == 1
    assert capsys.readouterr().err == (
        f"trinity export: error: --step 7: {run} has no checkpoint of that step; checkpoints: "
        "['step-000001', 'step-000002']\n"
    )
    assert main(["export", str(tmp_path), str(tmp_path / "y")]) == 1
    assert "no config.yaml there; give the directory of a trinity train run" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    assert not (tmp_path / "y").exists()
