"""LoRA adapters through PEFT (``model.lora``; the ``lora`` extra): wrap, reference, merge.

With LoRA only the adapters train, so the optimizer state and gradients are those of the adapters, and a
KL term needs no second model: the reference policy is the same model with its adapters disabled
(:class:`AdapterDisabled`), which is the initial policy exactly (PEFT initialises ``B = 0``).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from trinity_core.config import ConfigError, ConfigProblem, LoraSettings
from trinity_core.extras import require_extra

__all__ = ["AdapterDisabled", "add_lora", "is_lora", "merged"]


def add_lora(model: Any, settings: LoraSettings) -> Any:
    """``model`` wrapped in a PEFT ``PeftModel`` with LoRA adapters as ``settings`` say (base frozen).

    Raises:
        MissingExtraError: PEFT is not installed.
        ConfigError: at ``model.lora.target_modules`` when a name matches no module of ``model``.
    """
    require_extra("lora", "model.lora")
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(model, config)
    except ValueError as exc:
        if "target" not in str(exc).lower():
            raise
        linear = sorted({name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if _is_linear(mod)})
        raise ConfigError(
            [
                ConfigProblem(
                    "model.lora.target_modules",
                    f"{settings.target_modules} matches no module of the model",
                    hint=f"name some of its linear layers {linear}, or all-linear",
                )
            ]
        ) from None


def _is_linear(module: Any) -> bool:
    import torch

    return isinstance(module, torch.nn.Linear)


def is_lora(model: Any) -> bool:
    """Whether ``model`` is a PEFT model (without importing PEFT when it is not installed)."""
    return hasattr(model, "disable_adapter") and hasattr(model, "merge_and_unload")


def merged(model: Any) -> Any:
    """A plain transformers model with the adapters of the PEFT ``model`` merged into its weights.

    ``model`` itself is left as it is (the merge runs on a copy).
    """
    import copy

    return copy.deepcopy(model).merge_and_unload()


class AdapterDisabled:
    """The reference policy of a LoRA run: calls go to the PEFT model with its adapters disabled.

    Stands in for a frozen copy of the initial policy (``response_logprobs(ref, ...)`` calls it under
    ``torch.no_grad``) without holding a second set of weights.
    """

    def __init__(self, model: Any) -> None:
        """Keep ``model``, the (unwrapped) PEFT policy."""
        self.model = model

    @property
    def wrapped_module(self) -> Any:
        """The PEFT model this stand-in calls (what :func:`~trinity_core.lm.forward_call.model_under_wrappers`
        looks through)."""
        return self.model

    def __call__(self, **inputs: Tensor) -> Any:
        """The base model's output for ``inputs`` (adapters off for this call only)."""
        with self.model.disable_adapter():
            return self.model(**inputs)

    def to(self, *args: Any, **kwargs: Any) -> AdapterDisabled:
        """The policy is placed by ``accelerator.prepare``; nothing to move."""
        return self

    def eval(self) -> AdapterDisabled:
        """Nothing to switch: the mode is the policy's."""
        return self

    def requires_grad_(self, requires_grad: bool = True) -> AdapterDisabled:
        """Nothing to freeze: the base weights are frozen by PEFT, and the calls run without gradients."""
        return self
