"""What an explorer running ahead of the learner (``synchronizer.sync_offset > 0``) has made but the
learner has not trained on yet, kept in a checkpoint so that a resumed run goes on bit for bit as the
uninterrupted one.

At a checkpoint the rollouts of the next ``sync_offset`` steps are already made (with the weights the
explorer had then), and the explorer's weights may be older than the learner's. One file per rank,
``explorer-<rank>.safetensors``: the rollouts' tensors, the explorer's weights and, in its metadata, the
rest of each step (rewards, messages, versions, EID task offset; a workflow's experiences and what the
experience operators kept, in the wire format).
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from trinity_core.codec import deserialize_many, serialize_many
from trinity_core.lm.sampling import Rollout
from trinity_core.train.explorer.explorer import Explored

__all__ = ["ExplorerState", "load_explorer_state", "save_explorer_state", "state_file"]

ExplorerState = tuple[list[Explored], dict[str, Tensor], int]
"""``(rollouts made ahead, the explorer's weights, their version)``."""


def state_file(directory: Path, rank: int) -> Path:
    """The file of rank ``rank``'s explorer state in checkpoint ``directory``."""
    return directory / f"explorer-{rank}.safetensors"


def save_explorer_state(
    directory: Path, rank: int, explored: list[Explored], weights: dict[str, Tensor], version: int
) -> None:
    """Write ``explored`` (the rollouts made ahead, in step order) and the explorer's ``weights`` of
    ``version`` into checkpoint ``directory``."""
    tensors = {
        f"weights/{name}": value.detach().to("cpu").contiguous().clone() for name, value in weights.items()
    }
    items = []
    for i, item in enumerate(explored):
        record: dict[str, Any] = {
            "step": item.step,
            "rewards": item.rewards,
            "model_version": item.model_version,
            "seconds": item.seconds,
            "messages": item.messages,
            "metrics": sorted(item.metrics),
            "rollout": [],
            "task_offset": item.task_offset,
            "all_rewards": item.all_rewards,
        }
        if item.rollout is not None:
            for f in fields(Rollout):
                value = getattr(item.rollout, f.name)
                if value is not None:
                    tensors[f"{i}/rollout/{f.name}"] = value.detach().to("cpu").contiguous().clone()
                    record["rollout"].append(f.name)
        if item.experiences is not None:
            payload = serialize_many(item.experiences)
            tensors[f"{i}/experiences"] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        if item.operated is not None:  # what the experience operators kept, every round's
            payload = serialize_many(list(item.operated))
            tensors[f"{i}/operated"] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        for key, value in item.metrics.items():
            tensors[f"{i}/metrics/{key}"] = torch.as_tensor(value).detach().to("cpu").reshape(()).clone()
        items.append(record)
    meta = {"version": str(version), "explored": json.dumps(items)}
    save_file(tensors, str(state_file(directory, rank)), metadata=meta)


def load_explorer_state(directory: Path, rank: int) -> ExplorerState | None:
    """The explorer state of rank ``rank`` in checkpoint ``directory``, or None when it holds none (a
    lock-step run, or a checkpoint written before explorer states were kept)."""
    path = state_file(directory, rank)
    if not path.is_file():
        return None
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    tensors = load_file(str(path))
    weights = {k.removeprefix("weights/"): v for k, v in tensors.items() if k.startswith("weights/")}
    explored = []
    for i, record in enumerate(json.loads(meta["explored"])):
        rollout = None
        if record["rollout"]:
            rollout = Rollout(**{name: tensors[f"{i}/rollout/{name}"] for name in record["rollout"]})
        experiences = operated = None
        if f"{i}/experiences" in tensors:
            experiences = deserialize_many(tensors[f"{i}/experiences"].numpy().tobytes())
        if f"{i}/operated" in tensors:
            operated = deserialize_many(tensors[f"{i}/operated"].numpy().tobytes())
        explored.append(
            Explored(
                record["step"],
                rollout,
                record["rewards"],
                record["model_version"],
                record["seconds"],
                messages=record["messages"],
                experiences=experiences,
                metrics={key: tensors[f"{i}/metrics/{key}"] for key in record["metrics"]},
                task_offset=record.get("task_offset"),
                operated=operated,
                all_rewards=record.get("all_rewards"),
            )
        )
    return explored, weights, int(meta["version"])
