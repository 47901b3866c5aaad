"""Co-execution groups (DESIGN §3): membership, residency, cost and shape classification."""

from __future__ import annotations

import dataclasses

import pytest

from rollmux.core.group import Group, GroupShape, Member, isolated_group, residency_ok
from factories import make_cluster, make_group, make_job


def shape(t_cycle: float, t_load: float) -> GroupShape:
    return GroupShape(period_s=max(t_cycle, t_load), t_cycle_s=t_cycle, t_load_s=t_load)


def test_status_unsaturated_when_load_below_cycle():
    assert shape(200.0, 150.0).status == "unsaturated"


def test_status_full_when_load_equals_cycle():
    assert shape(200.0, 200.0).status == "full"


def test_status_full_within_relative_float_tolerance():
    assert shape(200.0, 200.0 * (1 + 1e-12)).status == "full"
    assert shape(200.0, 200.0 * (1 - 1e-12)).status == "full"


def test_status_saturated_when_load_above_cycle():
    assert shape(200.0, 200.001).status == "saturated"


def test_status_unsaturated_just_beyond_tolerance():
    assert shape(200.0, 199.99).status == "unsaturated"


def test_member_lookup_by_job_id():
    a, b = make_job("a"), make_job("b")
    g = make_group([(a, (0,)), (b, (1,))], 2)
    assert g.member("b").job is b
    assert g.job_ids() == ("a", "b")
    assert g.size == 2


def test_member_lookup_of_unknown_job_raises_key_error():
    g = make_group([(make_job("a"), (0,))], 1)
    with pytest.raises(KeyError):
        g.member("zz")


def test_group_is_frozen():
    g = make_group([(make_job("a"), (0,))], 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.n_rollout = 3  # type: ignore[misc]


def test_host_gb_sums_members_pinned_to_each_node():
    a = make_job("a", host_rollout=100.0, host_train=300.0)
    b = make_job("b", host_rollout=50.0, host_train=200.0, rollout_gpus=16)
    g = Group(0, 3, 2, (Member(a, (0,), (0,)), Member(b, (0, 2), (0, 1))))
    assert g.rollout_host_gb() == [150.0, 0.0, 50.0]
    assert g.train_host_gb() == [500.0, 200.0]


def test_residency_ok_at_exact_capacity():
    cluster = make_cluster(host_gb=1000.0)
    g = make_group([(make_job("a", host_rollout=600.0), (0,)), (make_job("b", host_rollout=400.0), (0,))], 1)
    assert residency_ok(g, cluster)


def test_residency_broken_on_rollout_node():
    cluster = make_cluster(host_gb=1000.0)
    g = make_group([(make_job("a", host_rollout=600.0), (0,)), (make_job("b", host_rollout=401.0), (0,))], 1)
    assert not residency_ok(g, cluster)


def test_residency_broken_on_training_node():
    cluster = make_cluster(host_gb=1000.0)
    g = make_group([(make_job("a", host_train=700.0), (0,)), (make_job("b", host_train=700.0), (1,))], 2)
    assert not residency_ok(g, cluster)


def test_residency_ok_when_members_use_different_rollout_nodes():
    cluster = make_cluster(host_gb=1000.0)
    g = make_group([(make_job("a", host_rollout=700.0), (0,)), (make_job("b", host_rollout=700.0), (1,))], 2)
    assert residency_ok(g, cluster)


def test_isolated_group_is_sized_for_the_job():
    cluster = make_cluster()
    g = isolated_group(7, make_job("a", rollout_gpus=17, train_gpus=16), cluster)
    assert (g.group_id, g.n_rollout, g.n_train) == (7, 3, 2)
    assert g.members[0].rollout_nodes == (0, 1, 2)
    assert g.members[0].train_nodes == (0, 1)


def test_cost_per_hour_prices_whole_nodes():
    cluster = make_cluster(rollout_price=1.0, train_price=2.5)
    g = Group(0, 3, 2)
    assert g.cost_per_hour(cluster) == pytest.approx(3 * 8 * 1.0 + 2 * 8 * 2.5)


def test_shape_is_ignored_by_group_equality():
    g = make_group([(make_job("a"), (0,))], 1)
    assert dataclasses.replace(g, shape=shape(1.0, 1.0)) == g
