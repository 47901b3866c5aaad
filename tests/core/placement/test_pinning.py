"""Pinning (core/placement/pinning.py): a joined option's pins and node order."""

from __future__ import annotations

import dataclasses

from rollmux.core.group import Group, isolated_group
from rollmux.core.placement.pinning import pin_into, rollout_node_loads
from factories import make_cluster, make_job

CLUSTER = make_cluster()


def test_rollout_node_loads_use_the_planning_quantile():
    a = make_job("a", rollout=100.0, rollout_max=150.0, sigma=0.2)
    b = make_job("b", rollout=50.0, rollout_gpus=16)
    g = Group(0, 2, 1, (isolated_group(0, a, CLUSTER).members[0],
                        dataclasses.replace(isolated_group(0, b, CLUSTER).members[0], rollout_nodes=(0, 1))))
    assert rollout_node_loads(g, 1.0) == [200.0, 50.0]


def test_pin_into_prefers_the_given_node_order():
    g = Group(0, 3, 1, ())
    cand = pin_into(g, make_job("x", rollout_gpus=16), CLUSTER, 0, [2, 0, 1])
    assert cand.member("x").rollout_nodes == (0, 2)


def test_pin_into_adds_fresh_nodes_after_existing_ones():
    g = Group(0, 2, 1, ())
    cand = pin_into(g, make_job("x", rollout_gpus=16), CLUSTER, 1, [1, 0])
    assert cand.n_rollout == 3
    assert cand.member("x").rollout_nodes == (1, 2)
