"""Bounds of config values set by what the values go to (torch, the sampler), not by taste.

The section models (:mod:`trinity_core.config.models`, :mod:`trinity_core.config.sections`) use them
in their fields' ranges; docs/training.md lists every key's range.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

__all__ = ["MAX_SEED", "MAX_THREADS", "MIN_TEMPERATURE", "Beta"]

MAX_THREADS = 2**31 - 1
"""Most torch CPU threads a config may ask for: ``torch.set_num_threads`` takes a C ``int``."""

MAX_SEED = 2**32 - 1
"""Largest ``trainer.seed``. The trainer derives further seeds from it (the seed times large primes, plus
the step and the rank), which must stay within the unsigned 64-bit range ``torch.manual_seed`` accepts;
at this bound they stay below 2**63. It is numpy's largest seed too."""

MIN_TEMPERATURE = 1e-5
"""Lowest ``rollout.temperature``: below it sampling is greedy decoding in practice (the logits are
divided by the temperature, so a gap of 0.01 between two logits becomes 1,000), and far below it the
scaled logits overflow to inf and the sampling distribution becomes NaN."""

Beta = Annotated[float, Field(ge=0, lt=1)]
"""An Adam beta: torch's optimizers refuse one outside [0, 1)."""
