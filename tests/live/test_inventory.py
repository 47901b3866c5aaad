"""The service's node inventory (rollmux/live/inventory.py): capacity from live nodes, placements bound to them."""

from __future__ import annotations

import pytest

from rollmux.core.grant import Grant
from rollmux.core.spec import default_cluster
from rollmux.live.inventory import ray_inventory
from rollmux.live.service import SchedulerCore
from rollmux.shim import JobShim
from factories import make_job

CLUSTER = default_cluster().model_dump()
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01, "offload_s": 0.0}


def _job(job_id: str, slo: float = 1.0, **kw) -> dict:
    """An 8:8 job; at SLO 1 it shares a group with nobody (one node per pool of its own)."""
    return make_job(job_id, rollout=100.0, train=100.0, slo=slo, **kw).model_dump(exclude_none=True)


def _core(rollout=("r0",), train=("t0",), **kw) -> SchedulerCore:
    core = SchedulerCore(CLUSTER, **kw)
    for n in rollout:
        core.node_up(n, "rollout")
    for n in train:
        core.node_up(n, "train")
    return core


def test_without_reported_nodes_answers_name_no_machines():
    core = SchedulerCore(CLUSTER)
    try:
        got = core.submit(_job("a"))
        assert got["status"] == "running" and "node_ids" not in got
        assert "node_ids" not in core.acquire("a", "rollout", got["token"])
    finally:
        core.shutdown()


def test_a_placement_and_its_permits_name_the_machines():
    core = _core(rollout=("r0", "r1"), train=("t0",))
    try:
        got = core.submit(_job("a"))
        assert got["node_ids"] == {"rollout": ["r0"], "train": ["t0"]}
        rollout = core.acquire("a", "rollout", got["token"])
        assert rollout["node_ids"] == ["r0"] and rollout["train_held_ids"] == []
        core.release("a", "rollout", TIMINGS, got["token"])
        assert core.acquire("a", "train", got["token"])["node_ids"] == ["t0"]
    finally:
        core.shutdown()


def test_an_arrival_that_does_not_fit_waits_in_line_and_is_placed_when_nodes_join():
    core = _core()
    try:
        core.submit(_job("a"))
        b = core.submit(_job("b"))
        assert b["status"] == "queued" and b["queue_position"] == 1 and b["nodes"] is None
        c = core.submit(_job("c"))
        assert c["queue_position"] == 2
        assert core.request("job", "<admin>", "c").result()["queue_position"] == 2
        core.node_up("r1", "rollout")
        assert core.state.jobs["b"].status == "queued"  # it needs a training node too
        core.node_up("t1", "train")
        got = core.request("job", "<admin>", "b").result()
        assert got["status"] == "running" and got["node_ids"] == {"rollout": ["r1"], "train": ["t1"]}
        assert core.request("job", "<admin>", "c").result()["queue_position"] == 1
    finally:
        core.shutdown()


def test_a_lost_node_places_its_jobs_again_on_the_nodes_left():
    core = _core(rollout=("r0", "r1", "r2"), train=("t0", "t1", "t2"))
    try:
        tok = core.submit(_job("a"))["token"]
        core.submit(_job("b"))
        assert core.request("job", "<admin>", "a").result()["node_ids"]["train"] == ["t0"]
        assert core.node_down("t0") == ["a"] and core.state.nodes.capacity("train") == 2
        rollout = core.acquire("a", "rollout", tok)  # its next permit: placed again, on a node left
        got = core.request("job", "<admin>", "a").result()
        # Its old group emptied and gave its rollout node back: the lowest free one again.
        assert got["epoch"] == 2 and got["node_ids"] == {"rollout": ["r0"], "train": ["t2"]}
        assert rollout["node_ids"] == ["r0"] and "t0" not in core.state.nodes.bound.values()
    finally:
        core.shutdown()


def test_a_job_that_lost_its_node_waits_for_one_to_join():
    core = _core()
    try:
        tok = core.submit(_job("a"))["token"]
        core.node_down("t0")
        waiting = core.request("job", "<admin>", "a").result()
        assert waiting["status"] == "moving" and waiting["queue_position"] == 1
        core.node_up("t9", "train")
        assert core.acquire("a", "rollout", tok)["node_ids"] == ["r0"]
        assert core.request("job", "<admin>", "a").result()["node_ids"]["train"] == ["t9"]
    finally:
        core.shutdown()


def test_a_restart_rebuilds_the_inventory_and_the_bindings(tmp_path):
    url = str(tmp_path / "j.db")
    core = _core(rollout=("r0", "r1"), train=("t0",), store=url)
    core.submit(_job("a", slo=2.0))
    before = core.dump()["node_map"]
    core.shutdown()
    again = SchedulerCore(None, store=url)
    try:
        assert again.dump()["node_map"] == before and again.state.nodes.capacity("rollout") == 2
        assert again.state.cluster.cluster.pools.train.max_nodes == 1
    finally:
        again.shutdown()


def test_a_snapshot_keeps_the_inventory_and_the_bindings(tmp_path):
    url = str(tmp_path / "j.db")
    core = _core(rollout=("r0", "r1"), train=("t0",), store=url, snapshot_every=1)
    core.submit(_job("a", slo=2.0))
    before = core.dump()["node_map"]
    core.shutdown()
    again = SchedulerCore(None, store=url)
    try:
        assert again.dump()["node_map"] == before
    finally:
        again.shutdown()


def test_ray_nodes_with_one_pool_resource_are_the_inventory():
    nodes = [{"NodeID": "a", "Alive": True, "Resources": {"rollout_pool": 1.0, "GPU": 8.0}},
             {"NodeID": "b", "Alive": True, "Resources": {"train_pool": 1.0}},
             {"NodeID": "c", "Alive": False, "Resources": {"train_pool": 1.0}},
             {"NodeID": "d", "Alive": True, "Resources": {"CPU": 4.0}},
             {"NodeID": "e", "Alive": True, "Resources": {"rollout_pool": 1.0, "train_pool": 1.0}}]
    assert ray_inventory(nodes) == {"a": "rollout", "b": "train"}


def test_a_shrunk_group_keeps_each_remaining_member_on_its_machine():
    core = _core(rollout=("r0", "r1", "r2"), train=("t0",))
    try:
        heavy = {"rollout": 400.0, "train": 100.0, "slo": 1.3}  # two share a training node, not a rollout one
        a = core.submit(make_job("a", **heavy).model_dump(exclude_none=True))
        b = core.submit(make_job("b", **heavy).model_dump(exclude_none=True))
        assert (b["case"], b["rollout_nodes"], b["node_ids"]["rollout"]) == ("rollout_scaling", [1], ["r1"])
        core.finish("a", a["token"])  # the group gives back rollout node 0 and renumbers b's to 0
        got = core.request("job", "<admin>", "b").result()
        assert got["rollout_nodes"] == [0] and got["node_ids"] == {"rollout": ["r1"], "train": ["t0"]}
        assert core.state.nodes.free("rollout") == ["r0", "r2"]
    finally:
        core.shutdown()


def test_the_shim_names_no_node_strategies_without_an_inventory():
    class _One:
        def acquire(self, job_id, phase):
            return Grant(0, job_id, phase, "rollout", (0,), 0.0, 0.0, 0.0)

        def tail_started(self, job_id):
            pass

        def release(self, timings):
            pass

    shim = JobShim("a", _One())
    with shim.phase("rollout"), pytest.raises(ValueError, match="rollmux serve --ray"):
        shim.node_strategies()
