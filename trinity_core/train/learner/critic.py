"""The critic of presets with ``use_critic`` (PPO with GAE): model, value forward, update, checkpoint.

The default critic is the policy's architecture and initial weights with a scalar value head
(``AutoModelForTokenClassification`` with ``num_labels=1``, as verl builds its critic);
``model.critic_path`` loads a local Hugging Face model the same way. In a learner step of mode
``both``:

* :meth:`Critic.values` (no grad) predicts ``V`` for every response token; the learner stores it as the
  batch's ``values`` column, which the GAE advantage function reads;
* :meth:`Critic.update` fits ``V`` to the returns with the value loss (``algorithm.value_loss_fn``),
  ``trainer.epochs`` × ``trainer.minibatches`` optimizer steps over micro-batches, normalised by the
  same global normalizers as the policy loss (:func:`~trinity_core.ops.global_normalizers`);
* during the first ``critic.warmup_steps`` steps only the critic learns (:meth:`Critic.warming_up`).

Checkpoints hold the critic's weights and optimizer next to the policy's (Accelerate's ``save_state``).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from trinity_core.components.faults import FINITE_PREFIX, call_component, checked_loss, finite_flag
from trinity_core.config import ResolvedConfig
from trinity_core.ops import global_normalizers, masked_var
from trinity_core.train.learner.micro_batches import micro_batches, row_ranges
from trinity_core.train.learner.optimizer import make_optimizer
from trinity_core.train.report.profile import StepProfiler

__all__ = ["Critic", "build_critic", "critic_model", "explained_variance", "response_values"]

FILES = ("critic.safetensors", "critic-optimizer.safetensors", "critic-optimizer.json")
"""The critic's files in a checkpoint directory: weights, optimizer tensors, optimizer structure."""


def critic_model(policy: Any, critic_path: str | None, *, seed: int) -> Any:
    """A value model: ``AutoModelForTokenClassification`` with one output per token, no dropout.

    Without ``critic_path``: built from the policy's config, its base model loaded with the policy's
    weights (the value head initialised with ``seed``, leaving the global RNG state as it was).

    Raises:
        ModelLoadError: ``critic_path`` cannot be loaded (naming it and what to do).
    """
    from transformers import AutoModelForTokenClassification

    from trinity_core.train.models.policy import ModelLoadError

    if critic_path is not None:
        try:
            return AutoModelForTokenClassification.from_pretrained(
                critic_path, num_labels=1, classifier_dropout=0.0
            )
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(
                f"model.critic_path: cannot load {critic_path!r} as a value model ({exc}); give a local "
                "directory with config.json and weights, or unset critic_path to start from the policy"
            ) from None
    settings = {k: v for k, v in policy.config.to_dict().items() if k not in ("id2label", "label2id")}
    config = type(policy.config).from_dict({**settings, "num_labels": 1, "classifier_dropout": 0.0})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForTokenClassification.from_config(config)  # type: ignore[no-untyped-call]
    base = getattr(model, model.base_model_prefix)
    base.load_state_dict(getattr(policy, policy.base_model_prefix).state_dict())
    return model.to(next(policy.parameters()).device)


def response_values(
    model: Any, input_ids: Tensor, attention_mask: Tensor | None, prompt_width: int
) -> Tensor:
    """Values ``(B, R)`` float32 of the states before each response token ``input_ids[:, P:]``.

    Aligned as :func:`~trinity_core.train.learner.logprobs.response_logprobs`: the value of response
    token ``t`` is the output at position ``P - 1 + t`` (verl's ``values[:, -R - 1 : -1]``).
    """
    if attention_mask is None:
        out = model(input_ids=input_ids)
    else:
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)
        out = model(input_ids=input_ids, attention_mask=attention_mask.long(), position_ids=position_ids)
    values: Tensor = out.logits[:, prompt_width - 1 : -1, 0].float()
    return values


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> Tensor:
    """``1 - Var(G - V) / Var(G)`` over the selected tokens, in float64 (0-d).

    1 is a perfect critic, 0 one no better than a constant, negative one worse than a constant. NaN when
    the returns do not vary (``Var(G) = 0``, e.g. every reward 0): nothing is there to explain.
    """
    v, g = values.to(torch.float64), returns.to(torch.float64)
    var_g = masked_var(g, mask)
    ratio = masked_var(g - v, mask) / var_g
    return torch.where(var_g > 0, 1.0 - ratio, torch.full_like(ratio, torch.nan))


class Critic:
    """The critic of a run: the prepared value model, its optimizer and value loss.

    ``model`` and ``optimizer`` are the ones ``accelerator.prepare`` returned; ``module`` is the
    unwrapped model (what checkpoints hold).
    """

    def __init__(
        self, config: ResolvedConfig, accelerator: Any, model: Any, value_loss: Any, profiler: StepProfiler
    ) -> None:
        """Prepare ``model`` and its optimizer (``trainer.optimizer`` at ``critic.lr``) with Accelerate."""
        ccfg, tcfg = config.critic, config.trainer
        optimizer = make_optimizer(model, tcfg.model_copy(update={"lr": ccfg.lr or tcfg.lr}))
        self.model, self.optimizer = accelerator.prepare(model, optimizer)
        self.module = accelerator.unwrap_model(self.model)
        self.config, self.acc, self.loss_fn, self.profiler = config, accelerator, value_loss, profiler

    def warming_up(self, step: int) -> bool:
        """Whether 0-based step ``step`` is one of the ``critic.warmup_steps`` (the policy is frozen)."""
        return step < self.config.critic.warmup_steps

    def values(self, ids: Tensor, attn: Tensor | None, P: int) -> Tensor:
        """The critic's values ``(B, R)`` of the batch (no grad): the ``values`` column."""
        with self.profiler.section("critic_values"), torch.no_grad():
            return response_values(self.module, ids, attn, P)

    def update(
        self, ids: Tensor, attn: Tensor | None, P: int, columns: dict[str, Tensor], n: int
    ) -> dict[str, Tensor]:
        """Fit the critic to ``columns["returns"]``: ``trainer.epochs`` × ``trainer.minibatches`` steps.

        ``columns`` holds ``action_mask``, ``values`` (this step's predictions, before the update) and
        ``returns``. Returns ``critic/<metric>`` (means over micro-batches), ``critic/grad_norm`` and
        ``critic/explained_variance`` of the values the advantages were computed with.
        """
        acc, tcfg, prof = self.acc, self.config.trainer, self.profiler
        mask, clip = columns["action_mask"], self.config.critic.grad_clip
        mode = self.config.algorithm.loss_agg_mode
        terms: list[dict[str, Tensor]] = []
        norms: list[Tensor] = []
        finite: list[Tensor] = []
        for _epoch in range(tcfg.epochs):
            for rows in row_ranges(n, tcfg.minibatches):
                micro = micro_batches(rows, tcfg.micro_batch_size)
                scale = global_normalizers([mask[m] for m in micro])
                for i, m in enumerate(micro):
                    ctx = contextlib.nullcontext() if i == len(micro) - 1 else acc.no_sync(self.model)
                    with prof.section("critic_update"), ctx:
                        vpreds = response_values(self.model, ids[m], None if attn is None else attn[m], P)
                        result = call_component(
                            "value_loss",
                            self.loss_fn,
                            self.loss_fn,
                            vpreds,
                            columns["values"][m],
                            columns["returns"][m],
                            mask[m],
                            loss_scale=scale,
                            loss_agg_mode=mode,
                        )
                        loss, metrics = checked_loss("value_loss", self.loss_fn, result, vpreds)
                        finite.append(finite_flag("value_loss", loss)[1])
                        acc.backward(loss)
                    terms.append(metrics)
                with prof.section("critic_update"):
                    if clip is not None:
                        norms.append(acc.clip_grad_norm_(self.model.parameters(), clip))
                    self.optimizer.step()
                    self.optimizer.zero_grad(set_to_none=True)
        out = {
            f"critic/{k}": torch.stack([t[k].to(torch.float64) for t in terms if k in t]).mean()
            for k in {k for t in terms for k in t}
        }
        out[f"{FINITE_PREFIX}value_loss"] = torch.stack(finite).min()
        if norms:
            out["critic/grad_norm"] = torch.stack([g.detach().to(torch.float64) for g in norms]).mean()
        out["critic/explained_variance"] = explained_variance(columns["values"], columns["returns"], mask)
        return out

    # ------------------------------------------------------------------ checkpoints

    def load(self, directory: Path) -> None:
        """Restore the critic of a checkpoint written before checkpoints went through Accelerate (which now
        saves the critic as ``model_1.safetensors`` / ``optimizer_1.bin``).

        Raises:
            CheckpointError: the checkpoint holds no critic, or one that does not fit this critic.
        """
        from safetensors.torch import load_file

        from trinity_core.train.checkpoints.commit import CheckpointError, load_optimizer_state

        missing = [name for name in FILES if not (directory / name).is_file()]
        if missing:
            raise CheckpointError(
                f"{directory} holds no critic ({', '.join(missing)} missing): it was written by a run "
                "without one; resume it with the same algorithm, or start a new run (--overwrite)"
            )
        try:
            self.module.load_state_dict(load_file(str(directory / FILES[0])))
        except RuntimeError as exc:
            raise CheckpointError(
                f"{directory}: the critic's weights do not fit this critic ({exc})"
            ) from None
        structure = json.loads((directory / FILES[2]).read_text(encoding="utf-8"))
        self.optimizer.load_state_dict(load_optimizer_state(load_file(str(directory / FILES[1])), structure))


def build_critic(
    config: ResolvedConfig, accelerator: Any, policy: Any, components: Any, profiler: StepProfiler
) -> Critic | None:
    """The run's critic when the preset has ``use_critic`` (its value loss was then built) in mode
    ``both``; otherwise ``None``."""
    value_loss = getattr(components, "value_loss", None)
    if value_loss is None or config.mode != "both":
        return None
    model = critic_model(policy, config.model.critic_path, seed=config.trainer.seed)
    return Critic(config, accelerator, model, value_loss, profiler)
