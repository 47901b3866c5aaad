"""Measured phase times and host memory feed the live scheduler (DESIGN §5a, §8).

Every test drives the in-process core with explicit releases (no sleeps): a release's
timings are what the job's shim measured.
"""

from __future__ import annotations

import re

import pytest
from factories import GROUPS, config, make_cluster, make_job, served_config

from rollmux.live.service import SchedulerCore, ServiceError
from rollmux.live.telemetry import Telemetry

TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.0, "offload_s": 0.0}


def _record(job_id: str, **kw) -> dict:
    return make_job(job_id, **kw).model_dump(exclude_none=True)


def _iteration(core: SchedulerCore, job_id: str, token: str, rollout_s: float, train_s: float,
               host_bytes: dict | None = None) -> None:
    """One iteration of `job_id` whose phases took these (measured) seconds."""
    for phase, run_s in (("rollout", rollout_s), ("train", train_s)):
        core.acquire(job_id, phase, token)
        core.release(job_id, phase, {**TIMINGS, "run_s": run_s, "host_bytes": host_bytes}, token)


def _groups(core: SchedulerCore) -> dict[str, int]:
    return {j: v["group_id"] for j, v in core.status()["jobs"].items()}


def _shared_pair(core: SchedulerCore) -> dict[str, str]:
    tok = {j: core.submit(_record(j, rollout=100, train=100, slo=2.0))["token"] for j in "ab"}
    assert len(set(_groups(core).values())) == 1  # complementary jobs share a group
    return tok


@pytest.mark.parametrize("slow,snapshot_every", [(True, 2000), (True, 1), (False, 2000)])
def test_a_job_much_slower_than_declared_is_evicted_live(tmp_path, slow, snapshot_every):
    store = str(tmp_path / "journal.db")
    core = SchedulerCore(make_cluster().model_dump(), store=store, repair=True, snapshot_every=snapshot_every)
    try:
        tok = _shared_pair(core)
        scale = 3.0 if slow else 1.0
        _iteration(core, "a", tok["a"], 100 * scale, 100 * scale)
        st = core.status()
        groups = _groups(core)
        if not slow:  # as declared: nothing to repair, the group stays as it was
            assert groups["a"] == groups["b"] and st["jobs"]["a"]["profile"]["planned"] is None
            return
        # Planned at 3x, the pair breaks b's SLO budget: a (the slower) is moved out at its boundary.
        assert groups["a"] != groups["b"] and st["jobs"]["a"]["epoch"] == 2
        assert st["jobs"]["a"]["profile"]["planned"] == {"rollout": 300.0, "train": 300.0}
        members = {tuple(g["members"]) for g in st["groups"]}
        assert members == {("a",), ("b",)}
        dump = core.dump()
    finally:
        core.shutdown()
    # The repair was journaled: a restart replays it (or loads a snapshot holding it) to the same
    # groups, measured profile and estimates.
    again = SchedulerCore(None, store=store)
    try:
        assert again.dump()["groups"] == dump["groups"]
        assert again.dump()["planned"] == dump["planned"] and "a" in dump["planned"]
        assert again.dump()["estimates"] == dump["estimates"] and dump["estimates"]["a"]["count"] == 1
        kinds = [r.kind for r in again.journal.records()]
        assert kinds.count("observe") == 1 and "movers" in kinds
        assert kinds.index("observe") < kinds.index("movers") < kinds.index("move_out")
    finally:
        again.shutdown()


@pytest.mark.parametrize("how", ["default", "cfg"])
def test_without_repair_measured_times_are_shown_but_change_no_plan(how):
    # An embedded core repairs only when asked; a config without repair never does.
    cfg = config(GROUPS, repair=False) if how == "cfg" else None
    core = SchedulerCore(make_cluster().model_dump(), cfg=cfg, repair=how == "cfg")
    try:
        tok = _shared_pair(core)
        _iteration(core, "a", tok["a"], 300, 300)
        groups = _groups(core)
        assert groups["a"] == groups["b"]
        assert core.status()["jobs"]["a"]["profile"]["measured"] == {"rollout": 300, "train": 300}
    finally:
        core.shutdown()


def test_measured_host_memory_counts_in_residency_and_is_flagged(tmp_path):
    # Nodes of 25 GB: two jobs declaring 10 GB each fit together on one node.
    store = str(tmp_path / "journal.db")
    telemetry_src: dict = {}
    telemetry = Telemetry(lambda: telemetry_src["core"].request("metrics").result(timeout=10))
    core = telemetry_src["core"] = SchedulerCore(make_cluster(host_gb=25.0).model_dump(), store=store,
                                                 telemetry=telemetry)
    try:
        tok = {"a": core.submit(_record("a", rollout=100, train=100))["token"]}
        # a's shim measures 18 GB on its rollout node and 4 GB on its training node.
        _iteration(core, "a", tok["a"], 100, 100, host_bytes={"rollout": 18 * 10**9, "train": 4 * 10**9})
        job = core.status()["jobs"]["a"]
        assert job["host_gb"]["measured"] == {"rollout": 18.0, "train": 4.0}
        assert job["host_gb"]["over_declaration"] is True
        text = telemetry.exposition()[0].decode()
        assert re.search(r"^rollmux_jobs_over_memory_declaration 1\.0$", text, re.M)
        assert re.search(r'^rollmux_host_memory_bytes\{pool="rollout",source="measured"\} 1\.8e\+10$', text, re.M)
        assert "a" not in re.findall(r'job="(\w+)"', text.split("rollmux_host_memory_bytes")[1])
        # b (10 GB, complementary) would share a's nodes by a's declaration (20 <= 25), not by its
        # measurement on the rollout node (28 > 25): b gets a rollout node of its own in a's group.
        b = core.submit(_record("b", rollout=100, train=100))
        assert b["case"] == "rollout_scaling" and b["group_id"] == _groups(core)["a"]
        a_nodes = core.status()["groups"][0]
        assert a_nodes["rollout_nodes"] == 2 and b["rollout_nodes"] == [1] and b["train_nodes"] == [0]
        dump = core.dump()
    finally:
        core.shutdown()
    again = SchedulerCore(None, store=store)  # the measurement is journaled: a restart keeps counting it
    try:
        assert again.dump()["groups"] == dump["groups"]
        assert again.status()["jobs"]["a"]["host_gb"]["over_declaration"] is True
    finally:
        again.shutdown()


@pytest.mark.parametrize("measured,over,case", [
    ((9, 4), False, "direct_packing"),  # under the declaration: the declaration counts, b shares a's nodes
    ((18, 18), True, "isolated"),       # over it on both nodes: b fits on neither
])
def test_where_a_second_job_goes_follows_the_counted_memory(measured, over, case):
    core = SchedulerCore(make_cluster(host_gb=25.0).model_dump())
    try:
        tok = {"a": core.submit(_record("a", rollout=100, train=100))["token"]}
        _iteration(core, "a", tok["a"], 100, 100,
                   host_bytes={"rollout": measured[0] * 10**9, "train": measured[1] * 10**9})
        assert core.status()["jobs"]["a"]["host_gb"]["over_declaration"] is over
        assert core.submit(_record("b", rollout=100, train=100))["case"] == case
    finally:
        core.shutdown()


@pytest.mark.parametrize("bad", [{"gpu": 1}, {"rollout": -1}, {"rollout": 1.5}, [1, 2], {"train": True}])
def test_bad_host_bytes_are_refused_and_change_nothing(bad):
    core = SchedulerCore(make_cluster().model_dump())
    try:
        tok = core.submit(_record("a"))["token"]
        core.acquire("a", "rollout", tok)
        with pytest.raises(ServiceError, match="host_bytes") as exc:
            core.release("a", "rollout", {**TIMINGS, "host_bytes": bad}, tok)
        assert exc.value.field == "timings.host_bytes"
        assert core.status()["jobs"]["a"]["held"] == ["rollout"]
    finally:
        core.shutdown()


@pytest.mark.parametrize("flag,repair", [([], True), (["--no-repair"], False)])
def test_rollmux_serve_repairs_live_unless_told_not_to(tmp_path, flag, repair):
    assert served_config(tmp_path, extra=flag)["config"]["regroup"]["repair"] is repair


def test_the_shims_host_memory_reaches_the_scheduler_over_http_once_per_rise(tmp_path):
    from rollmux.live.client import HttpPermitClient
    from rollmux.live.local import ThreadServer
    from rollmux.shim import JobShim
    admin = "admin-token-for-estimates-0123456789"
    held = {"rollout": 3 * 10**9, "train": 6 * 10**9}
    core = SchedulerCore(make_cluster().model_dump(), admin_token=admin, store=str(tmp_path / "j.db"))
    with ThreadServer(core) as server:
        client = HttpPermitClient(server.url, admin_token=admin)
        client.submit(_record("a"))
        shim = JobShim("a", client, host_memory=lambda: dict(held))
        for _ in range(2):  # the same bytes twice: journaled once
            for phase in ("rollout", "train"):
                with shim.phase(phase):
                    pass
        held["train"] = 12 * 10**9  # more than its declared 10 GB
        with shim.phase("rollout"):
            pass
        assert [t.host_bytes for t in shim.history][-1] == held
        job = client.status()["jobs"]["a"]
        assert job["host_gb"]["measured"] == {"rollout": 3.0, "train": 12.0}
        assert job["host_gb"]["over_declaration"] is True
        kinds = [r.kind for r in server.core.journal.records()]
        assert kinds.count("memory") == 2
        client.close()


def test_a_failing_host_memory_hook_still_releases_the_permit():
    from rollmux.shim import JobShim
    core = SchedulerCore(make_cluster().model_dump())
    try:
        tok = core.submit(_record("a"))["token"]

        class Client:
            def acquire(self, job_id, phase):
                from rollmux.live.client import _grant
                return _grant(core.acquire(job_id, phase, tok))

            def release(self, timings):
                from dataclasses import asdict
                core.release(timings.job_id, timings.phase, asdict(timings), tok)

        def broken():
            raise RuntimeError("no measurement")
        shim = JobShim("a", Client(), host_memory=broken)
        with shim.phase("rollout"):
            pass
        assert shim.history[-1].host_bytes is None
        assert core.status()["jobs"]["a"]["held"] == []
    finally:
        core.shutdown()
