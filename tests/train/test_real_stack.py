"""The offline real stack: a chat model and a GSM8K-style dataset on disk, ``trinity train`` / ``eval``.

The stack (:mod:`real_stack`): a Qwen2 folder written with ``save_pretrained``, a BPE tokenizer trained
with ``tokenizers`` and saved with a ChatML template, and word problems with ``#### N`` answers as jsonl
and parquet. ``trinity train`` renders the prompts with the chat template, rewards with ``gsm8k`` and
raises the held-out reward; ``trinity eval`` of the exported folder (loaded with ``from_pretrained``)
gives exactly the figures the trainer logged for the same weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from real_stack import (
    CHAT_TEMPLATE,
    PROMPT_TEMPLATE,
    build_chat_model,
    run_config,
    word_problems,
    write_dataset,
)

from trinity_core.cli.main import main

pytest.importorskip("trinity_plugin_math_reward", reason="the gsm8k reward is in trinity-plugin-math-reward")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The model folder, the dataset files and the run configuration (jsonl)."""
    root = tmp_path_factory.mktemp("real-stack")
    rows = word_problems(300, seed=0)
    jsonl, parquet = write_dataset(root, rows)
    model = build_chat_model(root / "my-chat-model", rows)
    config = root / "gsm8k.yaml"
    config.write_text(yaml.safe_dump(run_config(model, jsonl)), encoding="utf-8")
    return {"root": root, "model": model, "jsonl": jsonl, "parquet": parquet, "config": config}


def _eval(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    out = Path(args[args.index("--output") + 1])
    assert main(["eval", *args]) == 0, capsys.readouterr().err
    assert f"written to {out}" in capsys.readouterr().out
    return json.loads(out.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_training_raises_the_held_out_reward_and_the_export_reproduces_it(
    stack: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, config = stack["root"], str(stack["config"])
    before = _eval(capsys, str(stack["model"]), "--config", config, "--output", str(root / "before.json"))
    assert before["model"] == str(stack["model"])
    assert before["settings"]["n"] == 60
    assert before["settings"]["k"] == 4
    run = root / "run"
    assert main(["train", "--config", config, "--run-dir", str(run)]) == 0, capsys.readouterr().err
    capsys.readouterr()

    # eval_every 10: the trainer logged the figures at steps 10 and 20.
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evaluated = [row for row in logged if "eval/greedy_reward" in row]
    assert [row["step"] for row in evaluated] == [10.0, 20.0]

    after = _eval(capsys, str(run / "model"), "--config", config, "--output", str(root / "after.json"))
    b, a = before["figures"], after["figures"]
    # From about 1/9 (a random digit) to about 1/3 (the answers that occur), on 240 held-out samples.
    assert a["eval/sample_reward"] >= b["eval/sample_reward"] + 0.1, (b, a)
    assert a["eval/pass@4"] > b["eval/pass@4"], (b, a)

    # The exported folder gives what the trainer measured on the same weights, greedy and sampled.
    final = {k: v for k, v in evaluated[-1].items() if k.startswith("eval/")}
    assert a == final
    summary = json.loads((run / "summary.json").read_text())
    assert summary["eval_greedy_accuracy"] == a["eval/greedy_reward"]

    # The run directory as the target (its model/ folder and config.yaml), the data read from parquet.
    from_parquet = _eval(
        capsys, str(run), "--set", f"tasks.args.path={stack['parquet']}", "--output", str(root / "pq.json")
    )
    assert from_parquet["model"] == str(run / "model")
    assert from_parquet["figures"] == a


def test_the_export_answers_a_user_as_it_answered_the_trainer(stack: dict[str, Path]) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trinity_core.lm.sampling import encode_prompts, generate
    from trinity_core.train.data.prompts import PromptRenderer

    folder = stack["root"] / "run" / "model"
    if not folder.is_dir():
        pytest.skip("needs the run of the test above")
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.chat_template == CHAT_TEMPLATE
    question = word_problems(1, seed=7)[0]["question"]
    content = PROMPT_TEMPLATE.format(question=question)

    # The trainer's path: the dataset row rendered with the chat template, encoded, greedy rollout.
    row = {"prompt": content, "prompt_messages": [{"role": "user", "content": content}]}
    texts = PromptRenderer(tokenizer, templated=True).texts([row])
    ours = generate(model, tokenizer, texts, repeat=1, max_new_tokens=6, temperature=1.0, greedy=True)
    # A user's path: apply_chat_template and generate with the exported generation config.
    ids = tokenizer.apply_chat_template(
        row["prompt_messages"], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    assert (
        ids["input_ids"][0].tolist() == encode_prompts(tokenizer, texts, torch.device("cpu"))[0][0].tolist()
    )
    with torch.no_grad():
        theirs = model.generate(**ids)[0, ids["input_ids"].shape[1] :]
    length = int(ours.response_lengths[0])
    assert theirs[:length].tolist() == ours.response_ids[0, :length].tolist()
    assert theirs[length - 1] == tokenizer.convert_tokens_to_ids("<|im_end|>")  # stopped at the turn's end
    assert model.generation_config.max_new_tokens == 6


def test_eval_of_a_model_folder_without_a_config_is_one_line(
    stack: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(stack["model"])]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "not a run directory" in err
    assert "--config" in err
    assert not (stack["model"] / "eval.json").exists()
    assert main(["eval", str(stack["root"] / "nowhere"), "--config", str(stack["config"])]) == 1
    assert "no such folder" in capsys.readouterr().err


def test_the_gpu_recipe_is_the_real_stack_at_full_size() -> None:
    from trinity_core.config import resolve_config
    from trinity_core.config.loading import read_yaml_mapping

    example = Path(__file__).resolve().parents[2] / "examples" / "gsm8k-qwen2.5-0.5b.yaml"
    recipe = resolve_config(read_yaml_mapping(example))
    offline = resolve_config(run_config(Path("model"), Path("data")))
    assert recipe.tasks.name == offline.tasks.name == "dataset"
    assert recipe.tasks.reward_fns == offline.tasks.reward_fns == ["gsm8k"]
    assert recipe.tasks.args["eval_split"] == "test"
    assert recipe.model.chat_template is None  # the Qwen tokenizer's own template
    assert recipe.trainer.device == "cuda"
    assert recipe.trainer.eval_every > 0
    assert recipe.trainer.export_every > 0
