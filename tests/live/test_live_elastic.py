"""The live plane runs elastic rollout (core/elastic.py) and rollout compaction (core/repair/compaction.py)
when its config asks (`rollmux serve --elastic-rollout`); off by default."""

from __future__ import annotations

import pytest

from rollmux.core.colo_model import verl_rollout_scale
from rollmux.core.elastic import rollout_factor
from rollmux.core.env import SimEnvironment
from rollmux.core.spec import default_cluster
from rollmux.live.live_state import LiveState
from rollmux.core.records import config_from, config_record
from rollmux.live.service import SchedulerCore
from factories import GROUPS, TRAIN_HEAVY_COLO, config, make_cluster, make_job

CLUSTER = default_cluster().model_dump()
# compact_every_s=0: a compaction may be tried at every iteration end (the default waits 1800 s).
ELASTIC = config(GROUPS, elastic_rollout=True, compact_every_s=0.0)


def _loose_wide(job_id: str) -> dict:
    """A rollout-heavy 16:8 job whose SLO lets it roll out on one rollout node instead of two."""
    return make_job(job_id, rollout=300.0, train=100.0, rollout_gpus=16, slo=2.0, tail_frac=0.1,
                    duration=3600.0).model_dump(exclude_none=True)


def _tight_wide(job_id: str) -> dict:
    """A train-heavy 16:8 job placed on its two rollout nodes (one would break its SLO), which
    gives one back once it has run ahead of its SLO (compaction), its rollout 1.5x as long."""
    return make_job(job_id, rollout=100.0, train=300.0, rollout_gpus=16, slo=1.1, tail_frac=0.1,
                    duration=3600.0).model_dump(exclude_none=True)


def _timings(run_s: float) -> dict:
    return {"wait_s": 0.0, "onload_s": 0.0, "run_s": run_s, "offload_s": 0.0}


def _iteration(core: SchedulerCore, job_id: str, token: str, rollout_s: float, train_s: float) -> dict:
    """One iteration whose rollout reports `rollout_s` x the factor its permit names; its rollout permit."""
    rollout = core.acquire(job_id, "rollout", token)
    core.release(job_id, "rollout", _timings(rollout_s * rollout["rollout_factor"]), token)
    for phase, run_s in (("train", train_s), ("sync", 5.0)):
        core.acquire(job_id, phase, token)
        core.release(job_id, phase, _timings(run_s), token)
    return rollout


def _until_compacted(core: SchedulerCore, job_id: str, token: str) -> list[dict]:
    """Iterations of the tight job until its group gives a rollout node back; their rollout permits."""
    permits = []
    while core.state.cluster.compacted == 0:
        assert len(permits) < 6, "no compaction within six iterations"
        permits.append(_iteration(core, job_id, token, 100.0, 300.0))
    return permits


@pytest.fixture
def core():
    c = SchedulerCore(CLUSTER, cfg=ELASTIC)
    yield c
    c.shutdown()


def test_the_default_config_keeps_nominal_shapes():
    state = LiveState(SimEnvironment(), make_cluster(), GROUPS)
    assert not state.cluster.policy.shapes.elastic_rollout and not state.cluster.compacts
    core = SchedulerCore(CLUSTER)
    try:
        assert core.submit(_loose_wide("x"))["rollout_nodes"] == [0, 1]
        assert core.status()["groups"][0]["elastic"] == {}
    finally:
        core.shutdown()


def test_a_loose_job_is_placed_on_fewer_rollout_nodes_and_its_permit_names_them(core):
    got = core.submit(_loose_wide("x"))
    assert got["nodes"] == {"rollout": [0], "train": [0]}
    assert core.state.cluster.ledger.nodes == {"rollout": 1, "train": 1}
    grant = core.acquire("x", "rollout", got["token"])
    spec = core.state.planning_spec("x")
    factor = rollout_factor(spec, 2, 1)
    assert grant["nodes"] == [0] and grant["rollout_factor"] == pytest.approx(factor) and factor > 1.5
    # its lease follows the rollout it runs there: twice the worst case x its factor
    assert grant["lease_s"] == pytest.approx(2.0 * spec.rollout_s.max * factor)
    assert core.status()["groups"][0]["elastic"] == {"x": {"rollout_nodes": [0], "rollout_factor": factor}}


def test_a_rollout_measured_at_its_factor_is_no_drift(core):
    tok = core.submit(_loose_wide("x"))["token"]
    for _ in range(4):
        _iteration(core, "x", tok, 300.0, 100.0)  # the declared times, its rollout on one node
    assert core.state.cluster.estimates["x"].scales() == pytest.approx((1.0, 1.0))
    assert "x" not in core.state.cluster.planned  # not re-planned: nothing drifted


def test_a_group_gives_back_a_rollout_node_its_member_can_spare(core):
    got = core.submit(_tight_wide("y"))
    assert got["rollout_nodes"] == [0, 1]
    permits = _until_compacted(core, "y", got["token"])
    assert all(p["nodes"] == [0, 1] and p["rollout_factor"] == 1.0 for p in permits)
    after = core.acquire("y", "rollout", got["token"])
    factor = rollout_factor(core.state.planning_spec("y"), 2, 1)
    assert after["nodes"] == [0] and after["rollout_factor"] == pytest.approx(factor)
    assert core.state.cluster.ledger.nodes == {"rollout": 1, "train": 1}
    status = core.status()
    assert status["rollout_nodes_compacted"] == 1 and status["groups"][0]["rollout_nodes"] == 1
    assert status["groups"][0]["elastic"] == {"y": {"rollout_nodes": [0], "rollout_factor": factor}}
    assert status["pools"]["rollout"]["cost_per_hour"] == pytest.approx(8.0)
    assert core.request("metrics").result(timeout=10)["rollout_nodes_compacted"] == 1


def test_no_compaction_without_elastic_rollout():
    core = SchedulerCore(CLUSTER, cfg=config(GROUPS, compact_every_s=0.0))
    try:
        tok = core.submit(_tight_wide("y"))["token"]
        permits = [_iteration(core, "y", tok, 100.0, 300.0) for _ in range(6)]
        assert all(p["nodes"] == [0, 1] for p in permits) and core.state.cluster.compacted == 0
    finally:
        core.shutdown()


def test_another_jobs_token_gets_no_elastic_permit(core):
    tok_x = core.submit(_loose_wide("x"))["token"]
    tok_z = core.submit(_loose_wide("z"))["token"]
    with pytest.raises(Exception, match="forbidden|another job"):
        core.acquire("x", "rollout", tok_z)
    with pytest.raises(Exception, match="token"):
        core.acquire("x", "rollout", "not-a-token")
    assert core.acquire("x", "rollout", tok_x)["nodes"] == [0]


@pytest.mark.parametrize("snapshot_every", [2000, 3])
def test_a_restart_rebuilds_the_compacted_group(url, snapshot_every):
    core = SchedulerCore(CLUSTER, cfg=ELASTIC, store=url, snapshot_every=snapshot_every)
    tok = core.submit(_tight_wide("y"))["token"]
    _until_compacted(core, "y", tok)
    before = core.status()
    core.shutdown()
    again = SchedulerCore(None, store=url)
    try:
        assert again.state.cfg.shapes.elastic_rollout
        status = again.status()
        assert status["groups"] == before["groups"] and status["rollout_nodes_compacted"] == 1
        assert again.state.cluster.ledger.nodes == {"rollout": 1, "train": 1}
        assert again.acquire("y", "rollout", tok)["nodes"] == [0]
    finally:
        again.shutdown()


# A config record as the first services journaled it: the flat config's fields, no version.
FLAT_V1 = {"seed": 0, "max_group_size": 5, "shrink": True, "regroup": True, "migration_scale": 1.0,
           "regroup_margin": 2.0, "repair": True, "flat_sync": False, "batch_order": True, "consolidate": 2,
           "train_scaling": False, "elastic_rollout": True,
           "intra": {"warm_switch_s": 2.0, "migration": True, "tail_worker_frac": 0.25, "start_ratio": 0.5,
                     "migration_overhead_s": 1.0, "plan_quantile": 1.0, "best_order_max": 6}}


def test_a_config_record_from_before_the_live_elastic_mode_keeps_nominal_shapes():
    old = {"cluster": CLUSTER, "cfg": FLAT_V1}  # no version
    assert not config_from(old)[1].shapes.elastic_rollout
    assert config_from(config_record(default_cluster(), ELASTIC).payload())[1].shapes.elastic_rollout


def test_a_version_2_record_keeps_every_setting_it_journaled():
    flat = {**FLAT_V1, "max_group_size": 3, "colocate": True, "colo_pair": True, "stretch_pricing": True,
            "intra": {**FLAT_V1["intra"], "plan": "mean", "plan_z": 2.0}}
    _, cfg = config_from({"cluster": CLUSTER, "cfg": flat, "version": 2})
    assert cfg.shapes.elastic_rollout and cfg.colocation.enabled and cfg.colocation.pair
    assert cfg.placement.max_group_size == 3 and cfg.placement.pricing == "stretch"
    assert (cfg.admission.plan, cfg.admission.z) == ("mean", 2.0)
    assert not cfg.colocation.regroup  # absent: those services never moved co-located jobs


def test_with_the_co_located_mode_a_wide_job_runs_on_one_training_node():
    # core/colo_model.py, narrowed: a 16:8 job co-located on its training node, its rollout there too
    cfg = config(GROUPS, elastic_rollout=True, colocate=True)
    core = SchedulerCore(CLUSTER, cfg=cfg)
    try:
        record = make_job("w", rollout=100.0, train=300.0, rollout_gpus=16, tail_frac=0.1, slo=1.5,
                          duration=3600.0, colo=TRAIN_HEAVY_COLO).model_dump(exclude_none=True)
        got = core.submit(record)
        assert got["case"] == "colocated" and got["nodes"] == {"rollout": [], "train": [0]}
        grant = core.acquire("w", "rollout", got["token"])
        spec = core.state.planning_spec("w")
        assert (grant["pool"], grant["nodes"]) == ("train", [0])
        scale = verl_rollout_scale(spec, core.state.cluster.cluster, gpus=8)
        assert scale > verl_rollout_scale(spec, core.state.cluster.cluster)  # (on 16 GPUs)
        assert grant["lease_s"] == pytest.approx(max(60.0, 2.0 * spec.rollout_s.max * scale))
    finally:
        core.shutdown()
