"""``TrinityGRPOTrainer``: TRL's ``GRPOTrainer`` with advantages and loss from installed plugins.

``pip install 'trinity-core[trl]'`` (TRL 1.16). Everything but the algorithm stays TRL's: datasets,
reward functions, generation (vLLM), PEFT, DeepSpeed, logging. Components are named as in our
config::

    from trl import GRPOConfig
    from trinity_core.integrations.trl import TrinityGRPOTrainer

    trainer = TrinityGRPOTrainer(
        model=model, reward_funcs=[my_reward], args=GRPOConfig(output_dir="out", num_generations=8),
        train_dataset=dataset, policy_loss_fn="sapo", advantage_fn="grpo", loss_agg_mode="token-mean",
    )
    trainer.train()

Advantages: the rewards of the whole generation batch (all processes; TRL's reward weights applied,
rows TRL could not score count as NaN and are refused by our functions) are grouped by prompt (TRL
places each prompt's ``num_generations`` completions next to each other) and passed through the
advantage function as experiences; per-token advantages keep their shape. Loss: the same terms as
``trinity train``'s update (:func:`~trinity_core.integrations.components.total_loss`), normalised by
the tokens and sequences of TRL's accumulation window (``num_items_in_batch`` spans the generation
batch; like TRL's ``dapo`` loss it is rescaled to one window, exact when ``steps_per_generation``
equals ``gradient_accumulation_steps``, TRL's default) and multiplied by the number of processes, so
DDP's gradient average gives the gradient of the global batch. A KL loss needs TRL's reference
model: set ``GRPOConfig(beta=...)`` to any non-zero value (TRL's ``beta`` is otherwise unused; the
KL coefficient is the KL component's ``kl_coef``).

Precision is TRL's: ``GRPOConfig`` defaults to ``bf16=True`` (autocast, on CPU too) while ``trinity
train`` defaults to ``precision: no``; with ``GRPOConfig(bf16=False)`` the loss and gradients equal
``trinity train``'s update on the same batch (tested), with bf16 they differ by bf16 rounding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from trinity_core.components import materialize_metrics
from trinity_core.integrations._optional import require
from trinity_core.integrations.components import AlgorithmComponents, build_components, total_loss
from trinity_core.integrations.rows import experiences_from_rows, run_advantage_fn
from trinity_core.ops.loss_scale import LossScale

__all__ = ["TrinityGRPOTrainer"]

_trl: Any = require("trl", "trl")
_GRPOTrainer: Any = _trl.GRPOTrainer


class TrinityGRPOTrainer(_GRPOTrainer):  # type: ignore[misc]
    """A TRL ``GRPOTrainer`` whose advantages and loss come from trinity plugins.

    Takes ``GRPOTrainer``'s arguments plus the component names of our config: ``policy_loss_fn``,
    ``policy_loss_fn_args``, ``advantage_fn``, ``advantage_fn_args``, ``kl_loss_fn``,
    ``kl_loss_fn_args``, ``entropy_loss_fn``, ``entropy_loss_fn_args``, ``loss_agg_mode``, or
    ``algorithm_type`` for a preset (see
    :func:`~trinity_core.integrations.components.build_components`). TRL's ``loss_type``,
    ``scale_rewards``, ``epsilon`` and ``beta`` (beyond switching the reference model on) have no
    effect. Metrics appear in TRL's logs as ``trinity/<name>``.
    """

    def __init__(
        self,
        *args: Any,
        algorithm_type: str | None = None,
        policy_loss_fn: str | None = None,
        policy_loss_fn_args: Mapping[str, Any] | None = None,
        advantage_fn: str | None = None,
        advantage_fn_args: Mapping[str, Any] | None = None,
        kl_loss_fn: str | None = None,
        kl_loss_fn_args: Mapping[str, Any] | None = None,
        entropy_loss_fn: str | None = None,
        entropy_loss_fn_args: Mapping[str, Any] | None = None,
        loss_agg_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        """Build the components, then ``GRPOTrainer.__init__(*args, **kwargs)``."""
        self.trinity: AlgorithmComponents = build_components(
            algorithm_type=algorithm_type,
            policy_loss_fn=policy_loss_fn,
            policy_loss_fn_args=policy_loss_fn_args,
            advantage_fn=advantage_fn,
            advantage_fn_args=advantage_fn_args,
            kl_loss_fn=kl_loss_fn,
            kl_loss_fn_args=kl_loss_fn_args,
            entropy_loss_fn=entropy_loss_fn,
            entropy_loss_fn_args=entropy_loss_fn_args,
            loss_agg_mode=loss_agg_mode,
        )
        if self.trinity.advantage is None:
            raise ValueError(
                "advantage_fn: TrinityGRPOTrainer computes advantages; name an advantage function"
            )
        super().__init__(*args, **kwargs)
        if self.trinity.needs_reference and self.beta == 0.0:
            raise ValueError(
                f"kl_loss_fn {self.trinity.names['kl_loss_fn']!r} needs TRL's reference model: set "
                "GRPOConfig(beta=...) to any non-zero value (the KL coefficient is the component's kl_coef)"
            )
        self._trinity_rewards: Tensor | None = None

    # ------------------------------------------------------------------ advantages

    def _calculate_rewards(
        self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any
    ) -> Tensor:
        """TRL's rewards of every process, kept for :meth:`_generate_and_score_completions`."""
        rewards_per_func: Tensor = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        self._trinity_rewards = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        """TRL's batch with ``advantages`` replaced by the advantage function's ``(B, T)`` rows."""
        output: dict[str, Any] = super()._generate_and_score_completions(inputs)
        per_func = self._trinity_rewards
        if per_func is None:
            raise RuntimeError("TrinityGRPOTrainer: TRL did not compute rewards through _calculate_rewards")
        self._trinity_rewards = None
        weights = self.reward_weights.to(per_func.device)
        rewards = (per_func * weights.unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        mask = output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        # Response lengths of every process (advantage functions may read them); one gather.
        local = mask.to(torch.bool)
        lengths = self.accelerator.gather(local.sum(dim=1))
        width = max(int(lengths.max()), 1) if lengths.numel() else 1
        global_mask = torch.arange(width, device=lengths.device)[None] < lengths[:, None]
        n = rewards.shape[0]
        exps = experiences_from_rows(rewards, [i // group_size for i in range(n)], global_mask)
        advantages, _, metrics = run_advantage_fn(self.trinity.advantage, exps, global_mask)
        start = self.accelerator.process_index * local.shape[0]
        rows = advantages[start : start + local.shape[0]].to(mask.device)
        full = torch.zeros(local.shape, dtype=torch.float32, device=mask.device)
        cols = min(rows.shape[1], full.shape[1])
        full[:, :cols] = rows[:, :cols]
        output["advantages"] = torch.where(local, full, 0.0)
        for key, value in materialize_metrics(metrics).items():
            self._metrics[mode][f"trinity/{key}"].append(value)
        return output

    # ------------------------------------------------------------------ loss

    def _window_scale(self, inputs: Mapping[str, Any], mask: Tensor) -> LossScale:
        """Tokens and sequences of one accumulation window on all processes, and the process count."""
        world = self.accelerator.num_processes
        mode = "train" if self.model.training else "eval"
        # Set by the HF Trainer during training; outside it, the configured value.
        accumulation = getattr(
            self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps
        )
        steps = accumulation if mode == "train" else 1
        per_window = steps / self.args.steps_per_generation if mode == "train" else 1.0
        tokens = torch.as_tensor(inputs["num_items_in_batch"], device=mask.device).to(torch.float64)
        sequences = mask.shape[0] * steps * world
        return LossScale(
            num_tokens=(tokens * per_window).clamp_min(1.0),
            num_sequences=torch.tensor(sequences, dtype=torch.int64, device=mask.device),
            world_size=world,
            max_tokens=float(self.max_completion_length),
        )

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Tensor:
        """The loss of ``trinity train``'s update on TRL's micro-batch."""
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        logprob, entropy, _aux = self._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            completion_ids.size(1),
            compute_entropy=self.trinity.needs_entropy,
        )
        old = inputs.get("old_per_token_logps")
        advantages = inputs["advantages"]
        if advantages.dim() == 1:
            advantages = advantages[:, None].expand_as(logprob)
        columns = {"action_mask": mask.to(torch.bool), "advantages": advantages}
        if old is not None:  # else one update per generation: the sampling policy is the current one
            columns["old_logprob"] = old
        if inputs.get("ref_per_token_logps") is not None:
            columns["ref_logprob"] = inputs["ref_per_token_logps"]
        loss, terms = total_loss(self.trinity, logprob, columns, self._window_scale(inputs, mask), entropy)
        mode = "train" if self.model.training else "eval"
        for key, value in materialize_metrics(terms).items():
            self._metrics[mode][f"trinity/{key}"].append(value)
        return loss
