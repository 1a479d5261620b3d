"""The kit's checks on the non-default configurations of the group computations."""

from typing import Any, ClassVar

from trinity_core.testing import AddStrategyConformance, AdvantageFnConformance


class TestOPMDLogAvgExp(AdvantageFnConformance):
    component = "opmd"
    args: ClassVar[dict[str, Any]] = {"opmd_baseline": "logavgexp", "tau": 0.3}


class TestOPMDAddStrategyLogAvgExp(AddStrategyConformance):
    component = "opmd"
    args: ClassVar[dict[str, Any]] = {"opmd_baseline": "logavgexp", "tau": 4.0}


class TestAsymREPositiveShift(AdvantageFnConformance):
    component = "asymre"
    args: ClassVar[dict[str, Any]] = {"baseline_shift": 0.25}
