"""``cpt`` algorithm preset: :class:`CPTAlgorithm`."""

from __future__ import annotations

from trinity_plugin_sft.sft_algorithm import SFTAlgorithm

__all__ = ["CPTAlgorithm"]


class CPTAlgorithm(SFTAlgorithm):
    """CPT: continued pre-training, SFT on raw text (schema ``cpt``: every token is a target).

    Same components, flags and configuration rules as :class:`SFTAlgorithm`; only the experience
    schema differs.
    """

    schema = "cpt"
