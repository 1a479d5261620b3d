"""The conformance kit's value-loss checks catch broken value losses (and pass a correct one)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from trinity_core.components import ValueLossFn
from trinity_core.testing import ConformanceError, Subject, check_names
from trinity_core.testing.value_loss import (
    check_value_loss_is_differentiable,
    check_value_loss_zero_at_the_returns,
    check_value_masked_positions_ignored,
    check_value_microbatch_invariant,
    check_value_no_host_sync,
)


class Good(ValueLossFn):
    """Squared error: 0.5 * agg((V - G)^2)."""

    def __call__(
        self, vpreds: Tensor, values: Tensor, returns: Tensor, action_mask: Tensor, **kwargs: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        m = action_mask.bool()
        err = torch.where(m, vpreds - returns, 0.0)
        loss = 0.5 * self.aggregate(err.square(), m)
        return loss, {"vf_loss": loss}


class LeaksPadding(Good):
    """Squared error that lets masked positions into the loss (multiplies by the mask: NaN * 0 = NaN)."""

    def __call__(self, vpreds, values, returns, action_mask, **kwargs):  # type: ignore[no-untyped-def]
        m = action_mask.float()
        loss = ((vpreds - returns).square() * m).sum() / m.sum()
        return loss, {"vf_loss": loss}


class Syncs(Good):
    """Squared error that reads a Python float."""

    def __call__(self, vpreds, values, returns, action_mask, **kwargs):  # type: ignore[no-untyped-def]
        loss, metrics = super().__call__(vpreds, values, returns, action_mask)
        return loss * float(action_mask.sum() > 0), metrics


class Offset(Good):
    """Squared error plus one: not 0 for a perfect critic."""

    def __call__(self, vpreds, values, returns, action_mask, **kwargs):  # type: ignore[no-untyped-def]
        loss, metrics = super().__call__(vpreds, values, returns, action_mask)
        return loss + 1.0, metrics


class Detached(Good):
    """Squared error on detached predictions: no gradient reaches the critic."""

    def __call__(self, vpreds, values, returns, action_mask, **kwargs):  # type: ignore[no-untyped-def]
        return super().__call__(vpreds.detach(), values, returns, action_mask)


class OwnNormalizer(Good):
    """Squared error over this call's own tokens: ignores the step's global normalizers."""

    def __call__(self, vpreds, values, returns, action_mask, **kwargs):  # type: ignore[no-untyped-def]
        m = action_mask.bool()
        loss = 0.5 * torch.where(m, vpreds - returns, 0.0).square().sum() / m.sum()
        return loss, {"vf_loss": loss}


def subject(cls: type) -> Subject:
    return Subject("value_loss", cls.__name__, cls, "<unregistered>")


def test_value_loss_checks_are_registered() -> None:
    names = check_names("value_loss")
    assert "value_loss_zero_at_the_returns" in names
    assert "value_masked_positions_ignored" in names
    assert "has_summary" in names  # the checks every component kind gets


@pytest.mark.parametrize(
    ("cls", "check"),
    [
        (LeaksPadding, check_value_masked_positions_ignored),
        (Syncs, check_value_no_host_sync),
        (Offset, check_value_loss_zero_at_the_returns),
        (Detached, check_value_loss_is_differentiable),
        (OwnNormalizer, check_value_microbatch_invariant),
    ],
)
def test_broken_value_losses_fail_their_check(cls: type, check: Any) -> None:
    check(subject(Good))
    with pytest.raises(ConformanceError):
        check(subject(cls))
