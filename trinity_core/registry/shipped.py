"""Which shipped plugin distribution provides each component name, for the message of an unknown name.

``SHIPPED[namespace][name]`` is the distribution under ``plugins/`` of the trinity-core repository that
declares that entry point; tests/test_plugin_messages.py keeps it equal to the plugins' pyproject files
(scripts/sync_tox.py rewrites it).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from pathlib import Path

__all__ = ["SHIPPED", "catalog", "install_hint", "install_line", "shipped_distributions"]

SHIPPED: dict[str, dict[str, str]] = {
    "trinity_core.add_strategies": {
        "correct_bias": "trinity-plugin-polaris",
        "duplicate_informative": "trinity-plugin-polaris",
        "grpo": "trinity-plugin-grpo",
        "opmd": "trinity-plugin-opmd",
        "raft": "trinity-plugin-sft",
        "reward_variance": "trinity-plugin-polaris",
        "step_wise_grpo": "trinity-plugin-multistep",
    },
    "trinity_core.advantage_fns": {
        "asymre": "trinity-plugin-opmd",
        "clipb": "trinity-plugin-clip-filters",
        "clipv": "trinity-plugin-clip-filters",
        "dr_grpo": "trinity-plugin-grpo",
        "gdpo": "trinity-plugin-grpo",
        "gigpo": "trinity-plugin-gigpo",
        "gpg": "trinity-plugin-grpo",
        "grpo": "trinity-plugin-grpo",
        "grpo_passk": "trinity-plugin-grpo",
        "grpo_verl": "trinity-plugin-grpo",
        "jsd": "trinity-plugin-distill",
        "on_policy_distill": "trinity-plugin-distill",
        "opmd": "trinity-plugin-opmd",
        "opo": "trinity-plugin-grpo",
        "optimal_token_baseline": "trinity-plugin-reinforce",
        "ppo": "trinity-plugin-ppo",
        "rec": "trinity-plugin-rec",
        "reinforce": "trinity-plugin-reinforce",
        "reinforce_plus_plus_baseline": "trinity-plugin-reinforce",
        "reinforceplusplus": "trinity-plugin-reinforce",
        "remax": "trinity-plugin-reinforce",
        "rloo": "trinity-plugin-reinforce",
        "step_wise_grpo": "trinity-plugin-multistep",
        "tir_optimal_token_baseline": "trinity-plugin-reinforce",
    },
    "trinity_core.algorithms": {
        "asymre": "trinity-plugin-opmd",
        "cispo": "trinity-plugin-cispo",
        "cpt": "trinity-plugin-sft",
        "dapo": "trinity-plugin-grpo",
        "dpo": "trinity-plugin-dpo",
        "gigpo": "trinity-plugin-gigpo",
        "grpo": "trinity-plugin-grpo",
        "gspo": "trinity-plugin-gspo",
        "jsd": "trinity-plugin-distill",
        "mix": "trinity-plugin-mix",
        "mix_chord": "trinity-plugin-mix",
        "multi_step_grpo": "trinity-plugin-multistep",
        "on_policy_distill": "trinity-plugin-distill",
        "opmd": "trinity-plugin-opmd",
        "ppo": "trinity-plugin-ppo",
        "raft": "trinity-plugin-sft",
        "rec": "trinity-plugin-rec",
        "reinforceplusplus": "trinity-plugin-reinforce",
        "rloo": "trinity-plugin-reinforce",
        "sapo": "trinity-plugin-sapo",
        "sft": "trinity-plugin-sft",
        "sppo": "trinity-plugin-sppo",
        "topr": "trinity-plugin-topr",
    },
    "trinity_core.entropy_losses": {
        "default": "trinity-plugin-entropy",
        "mix": "trinity-plugin-entropy",
        "none": "trinity-plugin-entropy",
    },
    "trinity_core.experience_operators": {
        "drop_truncated": "trinity-plugin-buffer",
        "dynamic_sampling": "trinity-plugin-buffer",
        "overlong_penalty": "trinity-plugin-buffer",
        "reward_clip": "trinity-plugin-buffer",
        "reward_scale": "trinity-plugin-buffer",
    },
    "trinity_core.kl_fns": {
        "abs": "trinity-plugin-kl",
        "abs+": "trinity-plugin-kl",
        "corrected_k3": "trinity-plugin-kl",
        "k1": "trinity-plugin-kl",
        "k1+": "trinity-plugin-kl",
        "k2": "trinity-plugin-kl",
        "k3": "trinity-plugin-kl",
        "k3+": "trinity-plugin-kl",
        "low_var_kl": "trinity-plugin-kl",
        "low_var_kl+": "trinity-plugin-kl",
        "none": "trinity-plugin-kl",
    },
    "trinity_core.policy_losses": {
        "cispo": "trinity-plugin-cispo",
        "clip_cov": "trinity-plugin-peer-losses",
        "dpo": "trinity-plugin-dpo",
        "dppo_kl": "trinity-plugin-peer-losses",
        "dppo_tv": "trinity-plugin-peer-losses",
        "dro": "trinity-plugin-peer-losses",
        "geo_mean": "trinity-plugin-gspo",
        "gpg": "trinity-plugin-peer-losses",
        "gspo": "trinity-plugin-gspo",
        "importance_sampling": "trinity-plugin-ppo",
        "kl_cov": "trinity-plugin-peer-losses",
        "mix": "trinity-plugin-mix",
        "mix_chord": "trinity-plugin-mix",
        "opmd": "trinity-plugin-opmd",
        "ppo": "trinity-plugin-ppo",
        "rec": "trinity-plugin-rec",
        "rollout_correction": "trinity-plugin-rollout-correction",
        "sapo": "trinity-plugin-sapo",
        "sft": "trinity-plugin-sft",
        "sft_is": "trinity-plugin-sft",
        "sft_phi": "trinity-plugin-sft",
        "sppo": "trinity-plugin-sppo",
        "topr": "trinity-plugin-topr",
    },
    "trinity_core.priority_fns": {
        "linear_decay": "trinity-plugin-buffer",
        "reward_variance": "trinity-plugin-buffer",
    },
    "trinity_core.reward_fns": {
        "format": "trinity-plugin-math-reward",
        "gsm8k": "trinity-plugin-math-reward",
        "math_verify": "trinity-plugin-math-reward",
        "reasoning_gym_score": "trinity-plugin-reasoning-gym",
    },
    "trinity_core.task_selectors": {
        "difficulty_based": "trinity-plugin-buffer",
        "offline_easy2hard": "trinity-plugin-buffer",
    },
    "trinity_core.tasks": {
        "blackjack": "trinity-plugin-gym",
        "frozen_lake": "trinity-plugin-gym",
        "multiplication": "trinity-plugin-tools",
        "reasoning_gym": "trinity-plugin-reasoning-gym",
    },
    "trinity_core.tool_parsers": {
        "hermes": "trinity-plugin-tools",
        "mistral": "trinity-plugin-tools",
    },
    "trinity_core.value_losses": {
        "clipped": "trinity-plugin-ppo",
        "mse": "trinity-plugin-ppo",
    },
    "trinity_core.workflows": {
        "gym": "trinity-plugin-gym",
        "tools": "trinity-plugin-tools",
    },
}
"""Entry-point namespace -> component name -> shipped distribution."""


def catalog(pyprojects: Iterable[Path]) -> dict[str, dict[str, str]]:
    """The catalog declared by ``pyprojects`` (component namespaces only, hooks left out)."""
    out: dict[str, dict[str, str]] = {}
    for path in pyprojects:
        project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
        for group, eps in project.get("entry-points", {}).items():
            if group.startswith("trinity_core.") and group != "trinity_core.hooks":
                for name in eps:
                    out.setdefault(group, {})[name] = project["name"]
    return {group: dict(sorted(names.items())) for group, names in sorted(out.items())}


def shipped_distributions() -> list[str]:
    """Every distribution under ``plugins/`` of the trinity-core repository, sorted."""
    return sorted({dist for names in SHIPPED.values() for dist in names.values()})


def install_line(dist: str) -> str:
    """How to install shipped distribution ``dist``: by name, from a wheelhouse, from a checkout."""
    return (
        f"pip install {dist} (from a wheelhouse: pip install --find-links dist {dist}; from a checkout: "
        f"pip install ./plugins/{dist})"
    )


def install_hint(namespace: str, name: str) -> str | None:
    """``'rloo' is provided by trinity-plugin-reinforce: pip install ...``, or ``None`` if not shipped."""
    dist = SHIPPED.get(namespace, {}).get(name)
    if dist is None:
        return None
    return f"{name!r} is provided by {dist}, which is not installed: {install_line(dist)}."
