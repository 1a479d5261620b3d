"""The kit's policy-loss checks with explicit pair ids (inputs from DPOLossFn.conformance_inputs)."""

from typing import Any, ClassVar

from trinity_core.testing import PolicyLossConformance


class TestDPOWithPairIds(PolicyLossConformance):
    component = "dpo"
    args: ClassVar[dict[str, Any]] = {"use_pair_ids": True}
