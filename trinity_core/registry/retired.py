"""Names trinity-rft 0.6.0 registers that trinity-core refuses, each with what replaces it.

A config written for trinity-rft may name one of these. No shipped plugin provides them because their
semantics equal no component here (docs/reference-differences.md#retired-names): the reference's
``grpo_verl`` algorithm declares trainer-side advantages but selects the experience-pipeline ``grpo``
function (its advantages are never computed), and ``opmd_verl`` / ``asymre_verl`` are deprecated
trainer-side copies of ``opmd`` / ``asymre`` computed on summed token rewards. When nothing is
registered under such a name, the registry's unknown-name error is the one line of :data:`RETIRED`.
"""

from __future__ import annotations

from typing import Final

from trinity_core.registry.kinds import KindSpec

__all__ = ["RETIRED", "retired_message"]

RETIRED: Final[dict[str, dict[str, str]]] = {
    "algorithm": {
        "grpo_verl": (
            "use algorithm_type 'grpo' (the same GRPO with its advantages computed in the experience "
            "pipeline; the reference's 'grpo_verl' paired trainer-side placement with the pipeline 'grpo' "
            "function, so its advantages were never computed)"
        ),
    },
    "advantage_fn": {
        "opmd_verl": (
            "use advantage_fn 'opmd' (the same group baseline, mean or log-avg-exp, on each experience's "
            "reward, in the experience pipeline; 'opmd_verl' was the reference's deprecated trainer-side "
            "copy)"
        ),
        "asymre_verl": (
            "use advantage_fn 'asymre' (the same shifted group-mean baseline on each experience's reward, "
            "in the experience pipeline; 'asymre_verl' was the reference's deprecated trainer-side copy)"
        ),
    },
}
"""kind -> trinity-rft name -> what to use instead."""


def retired_message(spec: KindSpec, name: str) -> str | None:
    """The one-line refusal of ``name`` of the kind ``spec``, or ``None`` when it is not retired."""
    replacement = RETIRED.get(spec.kind, {}).get(name)
    if replacement is None:
        return None
    return f"{spec.title} {name!r} of trinity-rft 0.6.0 is not provided by trinity-core: {replacement}."
