"""The journal's records (core/records.py): one typed, versioned model per kind, and older versions read."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from rollmux.core import records as rec
from rollmux.core.env import SimEnvironment
from rollmux.core.records import KINDS, config_from, config_record, parse
from rollmux.core.repair.moves import Move
from rollmux.core.state import ClusterState
from rollmux.core.vocabulary import Case, JobStatus, Phase
from rollmux.live.live_state import LiveState, ReplayError
from factories import GROUPS, make_cluster, make_job, make_policy

CLUSTER = make_cluster()


def _placed() -> tuple[ClusterState, rec.Place]:
    st = ClusterState(SimEnvironment(), CLUSTER, make_policy(), GROUPS)
    (place,) = st.decide(make_job("a", rollout=100, train=50), {})
    return st, place


def _line(record) -> tuple[str, dict]:
    """The record as a journal stores it: its kind, and its payload through JSON."""
    return record.kind, json.loads(json.dumps(record.payload()))


def _every_record() -> list:
    st, place = _placed()
    move = Move("a", 7, place.plan, 12.5)
    return [config_record(CLUSTER, GROUPS),
            rec.Submit(job=make_job("a"), token_hash="ab" * 32, at=1.5), place,
            rec.Grant(group_id=1, job_id="a", phase=Phase.ROLLOUT, pool="rollout", nodes=[0], switch_s=2.0,
                      granted_at=3.0, tail_share=0.25, epoch=1, units=4, workers=[[0, 1, 2, 3]], keep=[[0]],
                      train_held=[], at=9.0, grant_no=4, lease_s=60.0, rollout_nodes=[0], train_nodes=[0],
                      rollout_factor=1.0, node_ids=["n-r0"], train_held_ids=[]),
            rec.Release(job_id="a", phase=Phase.TRAIN,
                    timings={"wait_s": 0.0, "onload_s": 1.0, "run_s": 2.0, "offload_s": 0.0}),
            rec.Tail(job_id="a"), rec.Observe(job_id="a", rollout_s=100.0, train_s=50.0, at=4.0, rollout_factor=1.5),
            rec.Observe(job_id="a", rollout_s=100.0, train_s=50.0, at=5.0, rollout_factor=1.0, sync_s=3.0),
            rec.Profiled.of(make_job("a", rollout=90.0, train=40.0)),
            rec.Compact.of(1, 2), rec.Memory(job_id="a", host_gb={"rollout": 11.0}), rec.Movers.of(7, (move,), True),
            rec.MoveOut.of("a", "regroup"), rec.Leave.of("a", JobStatus.FAILED, "no heartbeat"),
            rec.Node(node_id="n-r0", pool="rollout"), rec.Node(node_id="n-t9", pool=None),
            rec.Bind(group_id=1, pool="rollout", index=0, node_id="n-r0"),
            rec.Bind(group_id=1, pool="train", index=0, node_id=None),
            rec.Turn(job_id="a", absent=True, phase="train"), rec.Turn(job_id="a", absent=False),
            rec.FirstCall(job_id="a", at=3.0)]


def test_every_kind_has_one_record_type_and_every_record_reads_back_as_it_was_written():
    records = _every_record()
    assert sorted({r.kind for r in records}) == sorted(KINDS)
    intra = GROUPS.intra_for(CLUSTER)
    for r in records:
        kind, payload = _line(r)
        assert payload["version"] == r.version and "kind" not in payload
        back = parse(kind, payload, intra)
        assert type(back) is type(r) and back == r


def test_a_permit_is_the_grants_fields_in_order_without_the_records_version():
    grant = _every_record()[3]
    permit = grant.permit()
    assert list(permit) == [f for f in rec.Grant.model_fields if f not in ("kind", "version")]
    assert json.loads(json.dumps(permit))["phase"] == "rollout"
    # Granted without a node inventory, its line holds no node ids, and it reads back without them.
    plain = grant.model_copy(update={"node_ids": None, "train_held_ids": None})
    assert "node_ids" not in _line(plain)[1] and "node_ids" not in parse("grant", _line(plain)[1]).permit()
    # Read from an older journal, a permit holds only what that journal wrote.
    old = {k: v for k, v in _line(grant)[1].items() if k not in ("lease_s", "version", "train_held")}
    assert set(parse("grant", old).permit()) == set(old)


def test_a_group_is_read_back_only_with_the_planners_view():
    kind, payload = _line(_placed()[1])
    with pytest.raises(ValidationError, match="planner's view"):
        parse(kind, payload)


def test_version_1_movers_are_read_as_themselves_and_observe_without_a_factor_as_its_members():
    old = parse("movers", {"job_ids": ["a", "b"], "group_ids": [3]})
    assert type(old) is rec.MoversV1 and (old.job_ids, old.group_ids, old.version) == (["a", "b"], [3], 1)
    obs = parse("observe", {"job_id": "a", "rollout_s": 1.0, "train_s": 2.0, "at": 3.0})
    assert type(obs) is rec.Observe and obs.rollout_factor is None and obs.version == 2


def test_config_records_of_every_version_read_as_todays():
    flat = {"max_group_size": 3, "repair": True, "elastic_rollout": True, "intra": {"plan": "mean"}}
    cluster = CLUSTER.model_dump(exclude_none=True)
    _, v1 = config_from({"cluster": cluster, "cfg": flat})  # version 1 wrote no version
    _, v2 = config_from({"cluster": cluster, "cfg": flat, "version": 2})
    assert v1.placement.max_group_size == v2.placement.max_group_size == 3 and v2.regroup.repair
    assert not v1.shapes.elastic_rollout and v2.shapes.elastic_rollout  # version 1 services ignored it
    assert (v1.admission.plan, v2.admission.plan) == ("mean", "mean")
    spec, cfg = config_from(config_record(CLUSTER, GROUPS).payload())
    assert (spec, cfg) == (CLUSTER, GROUPS) and isinstance(parse("config", config_record(CLUSTER, GROUPS).payload()),
                                                           rec.Config)


@pytest.mark.parametrize("kind, payload, match", [
    ("promote", {"job_id": "a"}, "does not match any of the expected tags"),
    ("tail", {"job_id": "a", "version": 9}, "version"),
    ("leave", {"job_id": "a", "status": "running", "reason": None}, "leaves as one of"),
    ("compact", {"group_id": 1}, "node"),
])
def test_a_line_that_is_no_record_is_refused_naming_what_does_not_fit(kind, payload, match):
    with pytest.raises(ValidationError, match=match):
        parse(kind, payload)


def test_a_replay_applies_version_1_movers_and_refuses_a_line_that_is_no_record():
    live = LiveState(SimEnvironment(), CLUSTER, GROUPS)
    live.apply("submit", _line(rec.Submit(job=make_job("a"), token_hash="x", at=0.0))[1])
    live.apply(*_line(live.cluster.decide(live.jobs["a"].spec, {})[0]))
    gid = live.jobs["a"].group_id
    live.apply("movers", {"job_ids": ["a"], "group_ids": [gid]}, replay=True)
    assert live.jobs["a"].migrate and gid in live.cluster.dissolving
    with pytest.raises(ReplayError, match="'leave' does not read: status"):
        live.apply("leave", {"job_id": "a", "status": "moving"}, replay=True)
    with pytest.raises(ReplayError, match="not a state change"):
        live.apply(*_line(config_record(CLUSTER, GROUPS)), replay=True)


def test_the_placement_case_is_the_vocabularys_and_serializes_as_its_string():
    plan = _placed()[1].plan
    assert plan.case is Case.ISOLATED and json.dumps({plan.case: plan.case}) == '{"isolated": "isolated"}'
    assert f"{plan.case}" == "isolated"
