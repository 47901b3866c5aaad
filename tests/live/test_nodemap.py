"""The service's node map (rollmux/live/nodemap.py): group node indices bound to live nodes."""

from __future__ import annotations

import pytest

from rollmux.live.nodemap import Binding, NoCapacity, NodeMap


def _map(rollout=("r0", "r1", "r2"), train=("t0", "t1")) -> NodeMap:
    m = NodeMap()
    for n in rollout:
        m.join(n, "rollout")
    for n in train:
        m.join(n, "train")
    return m


def _bind(m: NodeMap, gid: int, counts: dict, remap=None) -> list[Binding]:
    plan = m.plan(gid, counts, remap)
    for b in plan:
        m.apply(b)
    return plan


def test_a_new_group_takes_the_lowest_free_nodes_of_each_pool():
    m = _map()
    _bind(m, 7, {"rollout": 2, "train": 1})
    assert m.nodes(7, "rollout", [0, 1]) == ["r0", "r1"] and m.nodes(7, "train", [0]) == ["t0"]
    _bind(m, 8, {"rollout": 1, "train": 1})
    assert m.nodes(8, "rollout", [0]) == ["r2"] and m.free("rollout") == [] and m.free("train") == []


def test_a_shrink_keeps_the_surviving_indices_on_their_machines():
    m = _map()
    _bind(m, 7, {"rollout": 3, "train": 1})
    # Rollout node 1 unpinned: the group keeps old 0 and 2, renumbered 0 and 1.
    _bind(m, 7, {"rollout": 2, "train": 1}, {"rollout": {0: 0, 2: 1}})
    assert m.nodes(7, "rollout", [0, 1]) == ["r0", "r2"] and m.free("rollout") == ["r1"]


def test_a_group_that_grows_keeps_its_nodes_and_adds_free_ones():
    m = _map()
    _bind(m, 7, {"rollout": 1, "train": 1})
    _bind(m, 8, {"rollout": 1, "train": 1})
    _bind(m, 7, {"rollout": 2, "train": 1})
    assert m.nodes(7, "rollout", [0, 1]) == ["r0", "r2"]


def test_no_capacity_plans_nothing():
    m = _map(rollout=("r0",))
    with pytest.raises(NoCapacity, match="rollout"):
        m.plan(7, {"rollout": 2, "train": 1})
    assert m.bound == {}


def test_a_lost_node_drops_its_bindings_and_capacity():
    m = _map()
    _bind(m, 7, {"rollout": 2, "train": 1})
    assert m.lose("r1") == [(7, "rollout", 1)] and m.capacity("rollout") == 2
    assert m.nodes(7, "rollout", [0, 1]) == ["r0", None]
    _bind(m, 7, {"rollout": 2, "train": 1})  # re-bound on the pool's free node
    assert m.nodes(7, "rollout", [0, 1]) == ["r0", "r2"]


def test_a_group_that_leaves_frees_every_node():
    m = _map()
    _bind(m, 7, {"rollout": 2, "train": 2})
    for b in m.release(7):
        m.apply(b)
    assert m.bound == {} and m.free("rollout") == ["r0", "r1", "r2"] and m.free("train") == ["t0", "t1"]


def test_a_node_of_no_pool_is_refused():
    with pytest.raises(ValueError, match="pool"):
        NodeMap().join("x", "gpu")
