"""Reference policies: which one a config gets, and the EMA update."""

from __future__ import annotations

import pytest
import torch

from rlkit.lm.reference import (
    AdapterOffReference,
    EmaReference,
    FrozenCopyReference,
    build_reference,
)
from rlkit_plugins.objectives.group_dpo import GroupDpoObjective
from rlkit_plugins.objectives.policy_gradient import PolicyGradientObjective


def test_ema_reference_moves_a_fixed_share_towards_the_policy():
    policy = torch.nn.Linear(2, 1)
    with torch.no_grad():
        policy.weight.fill_(0.0)
    ref = EmaReference(policy, decay=0.75)
    with torch.no_grad():
        policy.weight.fill_(4.0)
    ref.on_optimizer_step(policy)
    assert torch.allclose(ref.model.weight, torch.full((1, 2), 1.0))  # 0.75·0 + 0.25·4
    ref.on_optimizer_step(policy)
    assert torch.allclose(ref.model.weight, torch.full((1, 2), 1.75))
    assert not ref.model.weight.requires_grad and not ref.training


def test_which_reference_each_setting_gets():
    policy = torch.nn.Linear(2, 1)
    def needs_reference(objective) -> bool:
        return objective.reference_use is not None

    pg = PolicyGradientObjective(PolicyGradientObjective.Params(beta=0.04))
    dpo = GroupDpoObjective(GroupDpoObjective.Params(loss_type="sigmoid"))
    simpo = GroupDpoObjective(GroupDpoObjective.Params(loss_type="simpo"))
    assert needs_reference(pg) and needs_reference(dpo) and not needs_reference(simpo)
    assert not needs_reference(PolicyGradientObjective(PolicyGradientObjective.Params(beta=0.0)))
    assert isinstance(build_reference("frozen", policy, uses_lora=False, needed=True), FrozenCopyReference)
    assert isinstance(build_reference("frozen", policy, uses_lora=True, needed=True), AdapterOffReference)
    assert isinstance(build_reference("ema", policy, uses_lora=False, needed=True, ema_decay=0.9), EmaReference)
    assert build_reference("frozen", policy, uses_lora=False, needed=False) is None
    assert build_reference("none", policy, uses_lora=False, needed=True) is None
    with pytest.raises(ValueError, match="unknown reference"):
        build_reference("later", policy, uses_lora=False, needed=True)
