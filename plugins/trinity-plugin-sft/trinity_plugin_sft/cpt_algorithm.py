"""``cpt`` algorithm preset: :class:`CPTAlgorithm` (reference ``trinity.algorithm.algorithm``)."""

from __future__ import annotations

from trinity_plugin_sft.sft_algorithm import SFTAlgorithm

__all__ = ["CPTAlgorithm"]


class CPTAlgorithm(SFTAlgorithm):
    """CPT: continued pre-training, SFT on raw text (schema ``cpt``: every token is a target).

    Same components, flags and configuration checks as :class:`SFTAlgorithm`; only the experience
    schema differs.
    """

    # Every flag is restated: ConstantMeta protects only attributes in the class's own namespace.
    use_critic = False
    use_reference = False
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "cpt"
