"""The scheduler service: its core in-process, and served over HTTP."""

from __future__ import annotations

import threading
import time

import pytest
from factories import job_record, make_job, most_running_at_once, run_threads

from rollmux.core.spec import default_cluster
from rollmux.live.client import HttpPermitClient
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore, ServiceError
from rollmux.shim import JobShim

CLUSTER = default_cluster().model_dump()
ADMIN_TOKEN = "admin-token-for-tests-0123456789"


def _two_jobs():
    return [make_job(j, rollout=100, train=100, slo=2.0).model_dump(exclude_none=True) for j in "ab"]


@pytest.fixture
def core():
    c = SchedulerCore(CLUSTER)
    yield c
    c.shutdown()


def test_submitted_complementary_jobs_share_a_group(core):
    a, b = (core.submit(r) for r in _two_jobs())
    assert a["case"] == "isolated" and b["case"] == "direct_packing"
    assert a["group_id"] == b["group_id"]
    groups = core.status()["groups"]
    assert len(groups) == 1 and groups[0]["members"] == ["a", "b"]


def test_bad_submission_is_refused_and_changes_nothing(core):
    bad = job_record("x")
    bad["slo"] = 0.5
    with pytest.raises(ServiceError, match="field slo"):
        core.submit(bad)
    huge = job_record("y")
    huge["host_gb"] = {"rollout": 10.0, "train": 5000.0}
    with pytest.raises(ServiceError, match="can never be placed"):
        core.submit(huge)
    assert core.status()["groups"] == []


def _drive(shim: JobShim, iterations: int, log: list, lock: threading.Lock) -> None:
    for _ in range(iterations):
        for phase in ("rollout", "train"):
            with shim.phase(phase):
                with lock:
                    log.append((shim.job_id, phase, "start", time.perf_counter()))
                time.sleep(0.005)
                with lock:
                    log.append((shim.job_id, phase, "end", time.perf_counter()))


def test_http_server_serves_permits_round_robin_without_overlap():
    with ThreadServer(SchedulerCore(CLUSTER, admin_token=ADMIN_TOKEN)) as server:
        client = HttpPermitClient(server.url, admin_token=ADMIN_TOKEN)
        for r in _two_jobs():
            client.submit(r)
        log, lock = [], threading.Lock()
        run_threads([(_drive, (JobShim(j, client), 3, log, lock)) for j in "ab"])
        for phase in ("rollout", "train"):
            assert most_running_at_once([(t, kind) for _, ph, kind, t in log if ph == phase]) == 1
        starts = [e[0] for e in sorted(log, key=lambda e: e[3]) if e[1] == "rollout" and e[2] == "start"]
        assert starts == ["a", "b"] * 3
        status = client.status()
        assert {j: s["iterations"] for j, s in status["jobs"].items()} == {"a": 3, "b": 3}
        client.close()


# -- tokens, refusals, heartbeats, re-admission, regrouping (in-process core) --------------------

from rollmux.live.service import ADMIN, AuthError, Forbidden, JobGone, NotFound  # noqa: E402
from rollmux.shim import PhaseTimings  # noqa: E402


class CorePermitClient:
    """The shim's permit client on an in-process core (each job uses its own token)."""

    def __init__(self, core: SchedulerCore) -> None:
        self.core, self.tokens = core, {}

    def submit(self, record: dict) -> dict:
        out = self.core.submit(record)
        self.tokens[out["job_id"]] = out["token"]
        return out

    def acquire(self, job_id: str, phase: str):
        from rollmux.live.client import _grant
        return _grant(self.core.acquire(job_id, phase, self.tokens.get(job_id)))

    def tail_started(self, job_id: str) -> None:
        self.core.tail_started(job_id, self.tokens.get(job_id))

    def release(self, timings: PhaseTimings) -> None:
        from dataclasses import asdict
        self.core.release(timings.job_id, timings.phase, asdict(timings), self.tokens.get(timings.job_id))

    def heartbeat(self, job_id: str, nodes=None) -> dict:
        return self.core.heartbeat(job_id, self.tokens.get(job_id), nodes)

    def finish(self, job_id: str) -> None:
        self.core.finish(job_id, self.tokens.get(job_id))

    def readmit(self, job_id: str, reason: str) -> dict:
        return self.core.readmit(job_id, reason, self.tokens.get(job_id))

TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01, "offload_s": 0.0}


def _submit(core, *jobs):
    return {r["job_id"]: core.submit(r)["token"] for r in jobs}


def test_submit_returns_a_token_that_every_later_call_needs(core):
    tok = _submit(core, *_two_jobs())
    assert all(len(t) >= 24 for t in tok.values()) and tok["a"] != tok["b"]
    with pytest.raises(AuthError, match="no bearer token"):
        core.acquire("a", "rollout", None)
    with pytest.raises(Forbidden, match="another job"):
        core.acquire("a", "rollout", tok["b"])  # another job's token
    with pytest.raises(AuthError):
        core.heartbeat("a", "forged")
    assert core.status()["refused"] == 3
    assert core.acquire("a", "rollout", tok["a"])["job_id"] == "a"


def test_a_job_cannot_release_another_jobs_permit(core):
    tok = _submit(core, *_two_jobs())
    core.acquire("a", "rollout", tok["a"])
    with pytest.raises(Forbidden):
        core.release("a", "rollout", TIMINGS, tok["b"])
    assert core.status()["jobs"]["a"]["held"] == ["rollout"]


def test_double_release_is_refused_and_changes_nothing(core):
    tok = _submit(core, *_two_jobs())
    core.acquire("a", "rollout", tok["a"])
    core.release("a", "rollout", TIMINGS, tok["a"])
    before = core.status()
    with pytest.raises(ServiceError, match="double release"):
        core.release("a", "rollout", TIMINGS, tok["a"])
    after = core.status()
    assert (after["grants"], after["groups"], after["jobs"]["a"]["held"]) == \
        (before["grants"], before["groups"], before["jobs"]["a"]["held"])


def test_unknown_job_ids_and_phases_and_bad_timings_are_refused(core):
    tok = _submit(core, *_two_jobs())
    with pytest.raises(Forbidden, match="another job"):  # a job learns nothing of other ids
        core.acquire("nope", "rollout", tok["a"])
    with pytest.raises(NotFound, match="unknown job id"):  # the admin does
        core.request("job", ADMIN, "nope").result()
    with pytest.raises(ServiceError, match="unknown phase"):
        core.acquire("a", "eval", tok["a"])
    core.acquire("a", "rollout", tok["a"])
    with pytest.raises(ServiceError, match="timings"):
        core.release("a", "rollout", {"run_s": -1}, tok["a"])
    with pytest.raises(ServiceError, match="nodes must be"):
        core.heartbeat("a", tok["a"], nodes=7)
    assert core.status()["jobs"]["a"]["held"] == ["rollout"]


def test_unknown_fields_in_a_submission_are_refused(core):
    rec = job_record("x", gpus=8)
    with pytest.raises(ServiceError, match="unknown field.*gpus"):
        core.submit(rec)
    with pytest.raises(ServiceError, match="must be a mapping"):
        core.submit(["not", "a", "job"])
    assert core.status()["jobs"] == {}


def test_resubmitting_a_running_job_is_refused(core):
    _submit(core, *_two_jobs())
    with pytest.raises(ServiceError, match="already submitted"):
        core.submit(_two_jobs()[0])


def test_release_timings_update_the_jobs_measured_profile(core):
    tok = _submit(core, *_two_jobs())
    core.acquire("a", "rollout", tok["a"])
    core.release("a", "rollout", {**TIMINGS, "run_s": 0.5}, tok["a"])
    core.acquire("a", "train", tok["a"])
    core.release("a", "train", {**TIMINGS, "run_s": 0.25}, tok["a"])
    job = core.status()["jobs"]["a"]
    assert job["profile"]["measured"] == {"rollout": 0.5, "train": 0.25}
    assert job["iterations"] == 1


def test_a_silent_job_is_failed_its_permit_reclaimed_and_its_partner_goes_on():
    core = SchedulerCore(CLUSTER, heartbeat_timeout_s=0.4, check_every_s=0.05)
    try:
        tok = _submit(core, *_two_jobs())
        core.acquire("a", "rollout", tok["a"])  # a holds the shared rollout node, then goes silent
        got = []
        t = threading.Thread(target=lambda: got.append(core.acquire("b", "rollout", tok["b"])))
        t.start()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and core.status()["jobs"]["a"]["status"] == "running":
            core.heartbeat("b", tok["b"])
            time.sleep(0.05)
        t.join(timeout=2)
        status = core.status()
        assert status["jobs"]["a"]["status"] == "failed" and "no heartbeat" in status["jobs"]["a"]["reason"]
        assert got and got[0]["job_id"] == "b"  # the reclaimed node went to the partner
        with pytest.raises(JobGone, match="failed"):
            core.acquire("a", "train", tok["a"])
        new = core.submit(_two_jobs()[0])  # a restarted job is placed again like a new arrival
        assert new["status"] == "running" and new["token"] != tok["a"]
    finally:
        core.shutdown()


def test_readmitted_job_gets_a_new_placement_epoch_and_its_shim_moves(core):
    client = CorePermitClient(core)
    client.submit(_two_jobs()[0])
    moves = []
    shim = JobShim("a", client, on_move=moves.append)
    with shim.phase("rollout"):
        pass
    before = shim.epoch
    client.readmit("a", "node lost")
    with shim.phase("rollout"):  # it restarts its iteration from its last checkpoint
        pass
    assert shim.epoch == before + 1 and len(moves) == 1 and moves[0].epoch == shim.epoch


def test_departure_regroups_a_member_at_its_next_iteration_boundary(core):
    client = CorePermitClient(core)
    jobs = [make_job("a", rollout=100, train=20), make_job("b", rollout=20, train=100),
            make_job("c", rollout=20, train=100, slo=1.05)]
    placed = [client.submit(j.model_dump(exclude_none=True)) for j in jobs]
    assert placed[0]["group_id"] == placed[1]["group_id"] != placed[2]["group_id"]
    client.finish("b")
    assert core.state.jobs["a"].migrate  # the lone leftover fits elsewhere for less
    moves = []
    shim = JobShim("a", client, on_move=moves.append)
    for phase in ("rollout", "train"):  # the train release is its iteration boundary: it moves there
        with shim.phase(phase):
            pass
    status = core.status()
    assert status["jobs"]["a"]["group_id"] == status["jobs"]["c"]["group_id"]
    assert [sorted(g["members"]) for g in status["groups"]] == [["a", "c"]]

    def one_iteration(s: JobShim) -> None:
        for phase in ("rollout", "train"):
            with s.phase(phase):
                pass
    run_threads([(one_iteration, (shim,)), (one_iteration, (JobShim("c", client),))])
    assert len(moves) == 1 and moves[0].epoch == 2
    assert status["jobs"]["a"]["epoch"] == 2


def test_phase_timings_record_is_what_release_sends():
    t = PhaseTimings("a", "rollout", 0.1, 0.2, 0.3, 0.4)
    assert set(TIMINGS) <= set(t.__dict__)


def test_jobs_on_a_lost_node_are_readmitted_and_a_stale_release_is_ignored(core):
    client = CorePermitClient(core)
    for r in _two_jobs():
        client.submit(r)
    client.heartbeat("a", nodes=["node-1"])
    client.heartbeat("b", nodes=["node-2"])
    grant = client.acquire("a", "rollout")
    assert core.nodes_lost({"node-1"}) == ["a"]
    status = core.status()
    assert status["jobs"]["a"]["epoch"] == grant.epoch + 1 and status["jobs"]["a"]["held"] == []
    # The killed phase's release arrives late, from the old placement: ignored, no error.
    client.release(PhaseTimings("a", "rollout", 0.0, 0.0, 0.01, 0.0, grant.epoch))
    assert core.status()["jobs"]["b"]["status"] == "running"


def test_an_acquire_that_overtakes_its_own_release_waits_for_it(core):
    tok = _submit(core, *_two_jobs())
    first = core.acquire("a", "rollout", tok["a"])
    got = []
    t = threading.Thread(target=lambda: got.append(core.acquire("a", "rollout", tok["a"], first["grant_no"])))
    t.start()
    deadline = time.monotonic() + 10
    while ("a", "rollout") not in core._after_release and time.monotonic() < deadline:
        time.sleep(0.01)  # until the service has parked the request behind its release
    assert got == [] and ("a", "rollout") in core._after_release  # the old permit is not handed back
    core.release("a", "rollout", TIMINGS, tok["a"])
    core.acquire("b", "rollout", tok["b"])  # b's turn comes first on the shared node
    core.release("b", "rollout", TIMINGS, tok["b"])
    core.acquire("a", "train", tok["a"])
    core.release("a", "train", TIMINGS, tok["a"])
    t.join(timeout=5)
    assert got and got[0]["grant_no"] > first["grant_no"]


def test_a_lost_reply_is_answered_with_the_permit_already_held(core):
    tok = _submit(core, *_two_jobs())
    first = core.acquire("a", "rollout", tok["a"])
    again = core.acquire("a", "rollout", tok["a"], first["grant_no"] - 1)
    assert again["grant_no"] == first["grant_no"] and core.status()["grants"] == 1


def test_a_job_past_its_declared_iterations_does_not_break_placement():
    from rollmux.core.placement.admission import period_budget
    job = make_job("a", rollout=1, train=1, sync=0, duration=10)
    assert period_budget(job, {"a": (job.iterations + 5, 100.0)}) < 0  # over budget, but defined
