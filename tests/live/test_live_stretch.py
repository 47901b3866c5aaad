"""The live plane honours stretch pricing (core/placement/pricing.py) as its config says (the groups profile prices by Δ)."""

from __future__ import annotations

from rollmux.core.env import SimEnvironment
from rollmux.core.placement import Case
from rollmux.core.placement.why import Refusal
from rollmux.live.live_state import LiveState
from factories import GROUPS, config, make_cluster, make_job


def _decide(cfg):
    """Where a train-heavy job goes once a wide train-heavy job holds a group."""
    state = LiveState(SimEnvironment(), make_cluster(), cfg)
    state.cluster.place(make_job("wide", rollout=50.0, train=200.0, rollout_gpus=16, train_gpus=16), {})
    (place,) = state.cluster.decide(make_job("t", rollout=50.0, train=200.0), {})
    return state, place.plan


def test_under_delta_pricing_the_service_takes_algorithm_1s_first_valid_option():
    state, plan = _decide(GROUPS)
    assert not state.cluster.policy.stretch_pricing and plan.case is Case.DIRECT


def test_asked_for_the_service_charges_the_members_stretch():
    state, plan = _decide(config(GROUPS, stretch_pricing=True))
    assert state.cluster.policy.stretch_pricing
    assert plan.case is Case.ISOLATED and plan.why.reason is Refusal.COSTLIER
