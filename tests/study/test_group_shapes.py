"""The group-shape profile (study/group_shapes.py): cost shares and planned pool use per shape."""

from __future__ import annotations

import pytest

from rollmux.core.config import SchedulerConfig
from rollmux.study.group_shapes import COLOCATED, group_shapes
from factories import make_cluster, make_job

CLUSTER = make_cluster()
SHIPPED = SchedulerConfig.profile("shipped")
NOMINAL_GROUPS = SHIPPED.with_overrides({"colocation.enabled": False, "shapes.elastic_rollout": False})


def test_a_lone_job_is_one_shape_whose_pools_are_busy_for_their_phases():
    job = make_job("a", rollout=300.0, train=100.0, sync=20.0, duration=40_000.0)
    out = group_shapes([job], CLUSTER, NOMINAL_GROUPS)
    (row,) = out["rows"]
    assert row["shape"] == [1, 1, 1] and row["cost_share"] == pytest.approx(1.0)
    # Alone, its planned period is its own cycle: each pool is busy for its phase of it.
    assert row["rollout_use"] == pytest.approx(300.0 / 420.0)
    assert row["train_use"] == pytest.approx(100.0 / 420.0)
    assert row["stretch"] == pytest.approx(1.0)


def test_shares_add_up_and_co_located_jobs_are_their_own_row():
    jobs = [make_job(f"j{i}", rollout=200.0 + 40 * i, train=150.0, arrival=100.0 * i, duration=30_000.0,
                     rollout_gpus=8 * (1 + i % 2), slo=1.5) for i in range(6)]
    out = group_shapes(jobs, CLUSTER, SHIPPED)
    shares = {(r["shape"] if r["shape"] == COLOCATED else tuple(r["shape"])): r["cost_share"] for r in out["rows"]}
    assert sum(shares.values()) == pytest.approx(1.0)
    assert COLOCATED in shares and shares[COLOCATED] > 0
    assert all(0 < r["rollout_use"] <= 1 + 1e-9 and 0 < r["train_use"] <= 1 + 1e-9
               for r in out["rows"] if r["shape"] != COLOCATED)


def test_kinds_split_the_cost_and_price_a_lone_jobs_idle_time_as_waste():
    job = make_job("a", rollout=300.0, train=100.0, sync=20.0, duration=40_000.0, slo=1.1)
    out = group_shapes([job], CLUSTER, NOMINAL_GROUPS)
    (k,) = out["kinds"]
    assert k["kind"] == "lone, tight" and k["cost_share"] == pytest.approx(1.0)
    # One rollout node (8 GPUs x $1) busy 300 s and one training node (8 x $2.85) busy 100 s
    # of every 420 s period: the bound's price of that work over the nodes' price.
    busy = (8 * 1.0 * 300.0 + 8 * 2.85 * 100.0) / (8 * 1.0 + 8 * 2.85) / 420.0
    assert k["busy_share"] == pytest.approx(busy)
    assert k["waste_share"] == pytest.approx(1 - busy)


def test_kinds_name_co_located_and_formed_groups_and_their_shares_add_up():
    jobs = [make_job(f"j{i}", rollout=200.0 + 40 * i, train=150.0, arrival=100.0 * i, duration=30_000.0,
                     rollout_gpus=8 * (1 + i % 2), slo=1.5) for i in range(6)]
    out = group_shapes(jobs, CLUSTER, SHIPPED)
    kinds = {k["kind"]: k for k in out["kinds"]}
    assert sum(k["cost_share"] for k in kinds.values()) == pytest.approx(1.0)
    assert "co-located, loose" in kinds and all(0 < k["busy_share"] <= 1.0 + 1e-9 for k in kinds.values())
