"""Group shrink and departure-time re-placement (beyond the paper)."""

from __future__ import annotations

import numpy as np
import pytest
from factories import GROUPS, config, intra, make_cluster, make_group, make_job, make_policy, synthetic_trace

from rollmux.core.group import Group, Member
from rollmux.core.intra_group import plan_group
from rollmux.core.placement import ClusterView
from rollmux.core.repair.moves import migration_seconds
from rollmux.core.repair.regroup import dissolve_decision, shrink
from rollmux.sim.simulator import Simulation

CLUSTER = make_cluster()


def test_shrink_drops_unpinned_rollout_nodes_and_renumbers_pins():
    g = make_group([(make_job("a"), (0,)), (make_job("b"), (2,))], 3)
    shrunk, remap, freed_r, freed_t = shrink(g)
    assert (shrunk.n_rollout, freed_r, freed_t) == (2, 1, 0)
    assert remap == {0: 0, 2: 1}
    assert [m.rollout_nodes for m in shrunk.members] == [(0,), (1,)]


def test_shrink_drops_training_nodes_no_member_needs():
    big = Member(make_job("big", train_gpus=16), (0,), (0, 1))
    small = Member(make_job("small", train_gpus=8), (0,), (0,))
    shrunk, _, _, freed_t = shrink(Group(0, 1, 2, (small,)))
    assert (shrunk.n_train, freed_t) == (1, 1)
    assert shrink(Group(0, 1, 2, (big, small)))[3] == 0


def _view(groups, progress=None):
    return ClusterView(CLUSTER, tuple(groups), None, None, 5, max(g.group_id for g in groups) + 1,
                       progress or {})


def _host_and_lone(duration: float = 200.0 * 400):
    cfg = intra()
    host = plan_group(make_group([(make_job("h", rollout=100, train=100, slo=2.0, duration=duration), (0,))],
                                 1, group_id=0), cfg)
    lone_job = make_job("l", rollout=100, train=100, slo=2.0, duration=duration)
    lone = plan_group(make_group([(lone_job, (0,))], 2, group_id=1), cfg)
    return host, lone, lone_job


def test_migration_time_is_calibrated_to_the_papers_7b_and_32b_moves():
    small = make_job("7b", host_train=112.0)   # 7B x 16 bytes of training state per parameter
    large = make_job("32b", host_train=512.0)
    assert migration_seconds(small, CLUSTER) == pytest.approx(197.2, abs=0.5)
    assert migration_seconds(large, CLUSTER) == pytest.approx(419.4, abs=0.5)
    assert migration_seconds(large, CLUSTER, scale=2.0) == pytest.approx(2 * 419.4, abs=1.0)


def test_a_long_lived_lone_member_moves_into_an_open_group_and_its_slot_is_planned():
    host, lone, _ = _host_and_lone()
    d = dissolve_decision(lone, _view([host]), make_policy(), scale=1.0, margin=2.0)
    assert d is not None and d.dissolve and [m.job_id for m in d.moves] == ["l"]
    assert d.moves[0].plan.group.group_id == host.group_id  # direct packing into the host
    assert d.saving_usd > 2.0 * d.cost_usd > 0


def test_a_lone_member_that_cannot_be_moved_stays_where_it_was_placed():
    host, _, _ = _host_and_lone()  # (the test above: its lone member would move)
    fixed = make_job("l", rollout=100, train=100, slo=2.0, duration=200.0 * 400, cannot=["move"])
    stay = plan_group(make_group([(fixed, (0,))], 2, group_id=1), intra())
    assert dissolve_decision(stay, _view([host]), make_policy(), scale=1.0, margin=2.0) is None


def test_no_move_when_the_saving_does_not_pay_for_the_migration():
    host, lone, _ = _host_and_lone(duration=205.0 * 2)  # two iterations left: gone before it pays
    assert dissolve_decision(lone, _view([host]), make_policy(), scale=1.0, margin=2.0) is None


def test_slower_migrations_need_a_longer_remaining_life_to_pay():
    host, lone, _ = _host_and_lone(duration=205.0 * 4)
    assert dissolve_decision(lone, _view([host]), make_policy(), scale=1.0, margin=2.0) is not None
    assert dissolve_decision(lone, _view([host]), make_policy(), scale=4.0, margin=2.0) is None


def test_no_move_when_the_migration_breaks_the_members_slo():
    host, lone, tight = _host_and_lone()
    used = tight.slo * tight.solo_iter_s * tight.iterations - 100.0  # less than a migration is left
    progress = {"l": (390, used)}
    assert dissolve_decision(lone, _view([host], progress), make_policy(), 1.0, 2.0) is None


def test_regroup_migrates_jobs_and_keeps_every_slo():
    jobs = synthetic_trace(np.random.default_rng(5), 40, sigma=0.1, mean_gap_s=300.0,
                           duration_range=(3_000.0, 40_000.0))
    sim = Simulation(jobs, CLUSTER, config(GROUPS, regroup=True, shrink=True), make_policy())
    res = sim.run()
    assert sim.migrations > 0
    assert len(res.outcomes) == 40
    assert res.slo_attainment == 1.0


def test_regroup_and_shrink_cost_no_more_than_static_groups():
    jobs = synthetic_trace(np.random.default_rng(6), 40, sigma=0.1, mean_gap_s=300.0,
                           duration_range=(3_000.0, 40_000.0))
    static = Simulation(jobs, CLUSTER, config(GROUPS, regroup=False, shrink=False), make_policy()).run()
    dynamic = Simulation(jobs, CLUSTER, GROUPS, make_policy()).run()
    assert dynamic.cost_usd < static.cost_usd


def test_shrink_releases_nodes_before_the_group_empties():
    # a founds a group on two rollout nodes; b packs onto one of them and outlives a.
    a = make_job("a", rollout=100, train=100, slo=2.0, duration=200.0 * 40, rollout_gpus=16)
    b = make_job("b", rollout=100, train=100, slo=2.0, duration=200.0 * 400, rollout_gpus=8)
    sim = Simulation([a, b], CLUSTER, config(GROUPS, regroup=False, shrink=True), make_policy())
    sim.run()
    assert sim.ledger.nodes == {"rollout": 0, "train": 0}
    drops = [rate for t, rate in sim.ledger.rate_changes if 0 < t < sim.env.now()]
    assert drops  # a's departure (or b's) released nodes while the other still ran


def test_consolidation_dissolves_small_groups_on_any_departure():
    jobs = synthetic_trace(np.random.default_rng(9), 40, sigma=0.1, mean_gap_s=300.0,
                           duration_range=(3_000.0, 40_000.0))
    plain = Simulation(jobs, CLUSTER, config(GROUPS, consolidate=0), make_policy())
    plain.run()
    consol = Simulation(jobs, CLUSTER, config(GROUPS, consolidate=2), make_policy())
    consol_res = consol.run()
    assert consol.migrations > plain.migrations
    assert consol_res.slo_attainment == 1.0 and len(consol_res.outcomes) == 40


def test_a_job_that_gives_its_weights_moves_sixteen_bytes_per_parameter():
    job = make_job("7b", host_train=200.0, weights_gb=15.2)  # host_gb counts replicas; the state moves once
    assert migration_seconds(job, CLUSTER) == pytest.approx(135.0 + 8 * 15.2 / 1.8)
