"""``reasoning_gym``: one reasoning-gym generator (or a composite) as a trinity-core task set."""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import torch
from pydantic import Field

from trinity_core.components import ComponentArgs
from trinity_core.train.data.tasks import Task

__all__ = ["ReasoningGymTask"]


class _Args(ComponentArgs):
    dataset: str = Field(
        "chain_sum", description="reasoning-gym generator name (reasoning_gym.create_dataset)."
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="The generator's configuration keywords."
    )
    size: int = Field(1000, ge=1, description="Entries generated; rows are drawn from them uniformly.")
    seed: int = Field(0, description="The generator's seed (entries are deterministic given it).")
    prompt_template: str = Field("{question}", description="The prompt; {question} is the entry's question.")


class ReasoningGymTask(Task):
    """Rows ``{"prompt", "answer", "entry"}`` from a reasoning-gym dataset; rewarded by
    ``reasoning_gym_score`` (the generator's ``score_answer``) unless the config names others."""

    Args: ClassVar[type[ComponentArgs]] = _Args
    default_reward_fns: ClassVar[tuple[str, ...]] = ("reasoning_gym_score",)
    dataset: str
    config: dict[str, Any]
    size: int
    seed: int
    prompt_template: str

    def __init__(self, **args: Any) -> None:
        """Build the generator now, so a bad name or configuration fails before training."""
        super().__init__(**args)
        import reasoning_gym

        try:
            self._data = reasoning_gym.create_dataset(
                self.dataset, size=self.size, seed=self.seed, **self.config
            )
        except Exception as exc:
            raise ValueError(
                f"tasks.args: reasoning-gym cannot build dataset {self.dataset!r} with {self.config}: "
                f"{type(exc).__name__}: {exc}"
            ) from None

    @property
    def fields(self) -> tuple[str, ...]:
        """``prompt``, ``answer``, ``entry`` (the generator's entry, for ``score_answer``)."""
        return ("prompt", "answer", "entry")

    def _row(self, index: int) -> dict[str, Any]:
        entry = self._data[index]
        prompt = self.prompt_template.format(question=entry["question"])
        return {"prompt": prompt, "answer": str(entry["answer"]), "entry": entry}

    def sample(self, n: int, generator: torch.Generator) -> list[dict[str, Any]]:
        """``n`` entries drawn uniformly from the ``size`` generated."""
        return [self._row(i) for i in torch.randint(0, self.size, (n,), generator=generator).tolist()]

    @functools.cached_property
    def _texts(self) -> list[str]:
        rows = [self._row(i) for i in range(self.size)]
        return [r["prompt"] for r in rows] + [r["answer"] for r in rows]

    def alphabet(self) -> str:
        """Every character of the prompts and answers (for the character tokenizer)."""
        return "".join(sorted(set("".join(self._texts))))

    def max_response_tokens(self) -> int:
        """The longest answer's characters and EOS."""
        return max(len(r["answer"]) for r in map(self._row, range(self.size))) + 1
