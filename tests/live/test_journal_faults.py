"""A failed journal write changes nothing: memory always equals a replay of the journal."""

from __future__ import annotations

import threading
from collections import Counter

import httpx
import pytest
from factories import make_job

from rollmux.core.records import Leave
from rollmux.core.spec import default_cluster
from rollmux.core.vocabulary import JobStatus
from rollmux.harness.chaos.store_faults import history
from rollmux.live import in_process
from rollmux.live.journal import FailingStore, JournalError, open_store
from rollmux.live.local import ThreadServer
from rollmux.live.rollback import REBASE_EVERY
from rollmux.live.service import SchedulerCore, Unavailable

CLUSTER = default_cluster().model_dump()
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01, "offload_s": 0.0}
KINDS = ("submit", "place", "grant", "release", "tail", "movers", "move_out", "leave")
# a and b complement each other; c is a tight-SLO job alone; when b leaves, a fits with c for less.
JOBS = [make_job("a", rollout=100, train=20, tail_frac=0.3), make_job("b", rollout=20, train=100, tail_frac=0.3),
        make_job("c", rollout=20, train=100, slo=1.05)]


def _steps(core: SchedulerCore, tok: dict) -> list:
    """A run that writes every record kind at least once."""
    def submit(job):
        tok[job.job_id] = core.submit(job.model_dump(exclude_none=True))["token"]
    return [
        lambda: submit(JOBS[0]), lambda: submit(JOBS[1]), lambda: submit(JOBS[2]),   # submit, place
        lambda: core.acquire("a", "rollout", tok["a"]),                              # grant
        lambda: core.request("progress", "a", "a", 9, 10).result(),                 # tail
        lambda: core.release("a", "rollout", TIMINGS, tok["a"]),                    # release
        lambda: core.finish("b", tok["b"]),                                          # leave, movers
        lambda: core.acquire("a", "train", tok["a"]),
        lambda: core.release("a", "train", TIMINGS, tok["a"]),                      # move_out, place
        lambda: core.finish("c", tok["c"]),
    ]


def _replayed(path: str) -> dict:
    """The state a fresh service rebuilds from what the journal holds."""
    other = SchedulerCore(None, store=open_store(path, readonly=True))
    try:
        return other.dump()
    finally:
        other.shutdown()


def _kinds(path: str) -> set[str]:
    return {r.kind for r in open_store(path, readonly=True).records()}


def test_the_run_writes_every_record_kind(tmp_path):
    path = str(tmp_path / "j.db")
    core = SchedulerCore(CLUSTER, store=path, snapshot_every=0)
    try:
        for step in _steps(core, {}):
            step()
    finally:
        core.shutdown()
    assert set(KINDS) <= _kinds(path)


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_stage_of_each_record_kind_changes_nothing(tmp_path, kind):
    path = str(tmp_path / "j.db")
    armed = [True]
    store = FailingStore(open_store(path), fail_on=lambda k, p: armed[0] and k == kind)
    core = SchedulerCore(CLUSTER, store=store, snapshot_every=0)
    tok: dict = {}
    try:
        for step in _steps(core, tok):
            try:
                step()
            except Unavailable:
                assert core.dump() == _replayed(path)  # nothing of the failed decision is left
                armed[0] = False
                step()  # the same request, asked again, goes through
        assert store.injected == 1
        assert core.dump() == _replayed(path)
        assert set(KINDS) <= _kinds(path)  # the retried decision was journaled (a tail is not lost)
        assert set(core._seen) <= set(core.state.jobs)  # no heartbeat watch on a rolled-back job
    finally:
        core.shutdown()


def test_a_failed_commit_rolls_the_batch_back_and_the_service_goes_on(tmp_path):
    path = str(tmp_path / "j.db")
    store = FailingStore(open_store(path))
    core = SchedulerCore(CLUSTER, store=store, snapshot_every=0)
    try:
        tok = {j.job_id: core.submit(j.model_dump(exclude_none=True))["token"] for j in JOBS[:2]}
        store.fail_commit = 1
        with pytest.raises(Unavailable):
            core.acquire("a", "rollout", tok["a"])
        assert core.dump() == _replayed(path) and core.dump()["grants"] == 0
        assert core.acquire("a", "rollout", tok["a"])["grant_no"] == 1  # the turn counter was not advanced
        core.release("a", "rollout", TIMINGS, tok["a"])
        assert core.acquire("b", "rollout", tok["b"])["job_id"] == "b"
        assert core.dump() == _replayed(path)
    finally:
        core.shutdown()


def test_a_failed_release_write_leaves_the_permit_held_and_a_retry_releases_it(tmp_path):
    path = str(tmp_path / "j.db")
    armed = [True]
    store = FailingStore(open_store(path), fail_on=lambda k, p: armed[0] and k == "release")
    core = SchedulerCore(CLUSTER, store=store, snapshot_every=0)
    try:
        tok = {j.job_id: core.submit(j.model_dump(exclude_none=True))["token"] for j in JOBS[:2]}
        first = core.acquire("a", "rollout", tok["a"])
        with pytest.raises(Unavailable):
            core.release("a", "rollout", TIMINGS, tok["a"])
        assert core.status()["jobs"]["a"]["held"] == ["rollout"]
        armed[0] = False
        core.release("a", "rollout", TIMINGS, tok["a"])
        assert core.acquire("a", "train", tok["a"], first["grant_no"])["job_id"] == "a"  # not stuck
    finally:
        core.shutdown()


def test_a_failed_snapshot_is_not_fatal(tmp_path):
    path = str(tmp_path / "j.db")
    store = FailingStore(open_store(path), fail_snapshot=True)
    core = SchedulerCore(CLUSTER, store=store, snapshot_every=3)
    try:
        tok = {j.job_id: core.submit(j.model_dump(exclude_none=True))["token"] for j in JOBS[:2]}
        for _ in range(3):
            for phase in ("rollout", "train"):
                for j in "ab":
                    core.acquire(j, phase, tok[j])
                    core.release(j, phase, TIMINGS, tok[j])
        assert store.injected >= 1
        assert core.status()["jobs"]["a"]["iterations"] == 3
        assert core.dump() == _replayed(path)
    finally:
        core.shutdown()


# -- through the HTTP server: one failed write costs one call -------------------------------------
ADMIN = "admin-token-for-journal-faults-0123"
EIGHT = [make_job(f"j{i}", rollout=100, train=100, slo=2.0) for i in range(8)]  # two groups of four


class _Tenant(threading.Thread):
    """A co-tenant calling GET /v1/jobs/{id} and heartbeat without retrying, counting what it got."""

    def __init__(self, url: str, jid: str, token: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.url, self.jid, self.token, self.stop = url, jid, token, stop
        self.codes: Counter = Counter()
        self.calls = 0
        self.busy = threading.Event()  # set after 20 calls (again by `again`)

    def again(self) -> None:
        self.calls = 0
        self.busy.clear()

    def run(self) -> None:
        auth = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.url, timeout=30) as http:
            while not self.stop.is_set():
                for r in (http.get(f"/v1/jobs/{self.jid}", headers=auth),
                          http.post(f"/v1/jobs/{self.jid}/heartbeat", json={}, headers=auth)):
                    self.codes[r.status_code] += 1
                self.calls += 1
                if self.calls >= 20:
                    self.busy.set()


@pytest.fixture
def served(tmp_path):
    """A served core over a failing SQLite journal with a few thousand records; its tokens and the arming switch."""
    path = str(tmp_path / "j.db")
    armed = threading.Event()
    store = FailingStore(open_store(path), fail_on=lambda k, p: armed.is_set() and k == "release"
                         and p.get("job_id") == "j0")
    core = SchedulerCore(CLUSTER, store=store, snapshot_every=0, admin_token=ADMIN)
    tok = {j.job_id: core.submit(j.model_dump(exclude_none=True))["token"] for j in EIGHT}
    history(core, tok, 100)  # (about 32 records an iteration)
    with ThreadServer(core) as server:
        yield server, core, tok, armed, path


def _failed_release(served) -> tuple[int, dict, list[_Tenant]]:
    """j0's release fails to be journaled while the other seven call in parallel: its status code,
    the state before it, the tenants (stopped)."""
    server, core, tok, armed, _ = served
    stop = threading.Event()
    tenants = [_Tenant(server.url, j, tok[j], stop) for j in tok if j != "j0"]
    auth = {"Authorization": f"Bearer {tok['j0']}"}
    with httpx.Client(base_url=server.url, timeout=30) as http:
        got = http.post("/v1/jobs/j0/acquire", json={"phase": "rollout", "wait_s": 10}, headers=auth).json()
        before = core.dump()
        for t in tenants:
            t.start()
        assert all(t.busy.wait(30) for t in tenants)
        armed.set()
        code = http.post("/v1/jobs/j0/release", headers=auth, json={
            "phase": "rollout", "grant_no": got["grant_no"], "timings": TIMINGS}).status_code
        armed.clear()
        for t in tenants:
            t.again()
        assert all(t.busy.wait(30) for t in tenants)  # they went on calling after the failure
    stop.set()
    for t in tenants:
        t.join(timeout=30)
    return code, before, tenants


def test_over_http_a_failed_append_answers_503_to_its_own_call(served):
    code, _, _ = _failed_release(served)
    assert code == 503


def test_over_http_co_tenants_get_no_401_and_no_503_while_an_append_fails(served):
    _, _, tenants = _failed_release(served)
    codes = sum((t.codes for t in tenants), Counter())
    assert set(codes) == {200}, codes


def test_over_http_the_state_after_a_failed_append_is_the_state_before_it(served):
    _, before, _ = _failed_release(served)
    core, path = served[1], served[4]
    assert core.dump() == before
    assert core.dump() == _replayed(path)


def test_over_http_the_failed_release_asked_again_goes_through(served):
    _failed_release(served)
    server, core, tok = served[0], served[1], served[2]
    held = core.status()["jobs"]["j0"]["held"]
    with httpx.Client(base_url=server.url, timeout=30) as http:
        r = http.post("/v1/jobs/j0/release", headers={"Authorization": f"Bearer {tok['j0']}"},
                      json={"phase": "rollout", "timings": TIMINGS})
    assert (held, r.status_code, core.status()["jobs"]["j0"]["held"]) == (["rollout"], 200, [])


def test_over_http_a_rollback_replays_at_most_a_checkpoints_tail_not_the_journal(served):
    _failed_release(served)
    core = served[1]
    assert core._last_seq > 3000
    assert len(core._committed) < max(REBASE_EVERY, len(core.state.jobs))


def test_a_store_still_failing_when_a_rollback_asks_again_for_a_waiting_permit_fails_the_waiter(tmp_path,
                                                                                                   monkeypatch):
    path = str(tmp_path / "j.db")
    armed = threading.Event()
    store = FailingStore(open_store(path), fail_on=lambda k, p: armed.is_set())
    core = SchedulerCore(CLUSTER, store=store, snapshot_every=0)
    try:
        tok = {j.job_id: core.submit(j.model_dump(exclude_none=True))["token"] for j in JOBS[:2]}
        core.acquire("a", "rollout", tok["a"])
        waiting = core.request("acquire", "b", "b", "rollout", None)  # b's turn comes when a releases
        asked = core._request

        def grant_write_fails(jid: str, phase: str) -> None:  # the re-request's grant: the store still fails
            raise JournalError(f"{store.url}: disk full writing the grant of {phase} to {jid}")
        monkeypatch.setattr(core, "_request", grant_write_fails)
        armed.set()
        with pytest.raises(Unavailable):
            core.release("a", "rollout", TIMINGS, tok["a"])
        with pytest.raises(Unavailable):
            waiting.result(timeout=30).result(timeout=30)  # told to ask again, not left waiting
        monkeypatch.setattr(core, "_request", asked)
        armed.clear()
        core.release("a", "rollout", TIMINGS, tok["a"])  # the scheduler thread still serves
        assert core.acquire("b", "rollout", tok["b"])["job_id"] == "b"
        assert core.dump() == _replayed(path)
    finally:
        core.shutdown()


def test_a_callback_that_raises_on_the_scheduler_thread_undoes_its_batch_and_the_thread_goes_on(tmp_path):
    path = str(tmp_path / "j.db")
    core = SchedulerCore(CLUSTER, store=path, snapshot_every=0)
    try:
        tok = core.submit(JOBS[0].model_dump(exclude_none=True))["token"]
        ran = threading.Event()

        def buggy() -> None:  # stages a decision, then fails before it is committed
            core._record(Leave.of("a", JobStatus.CANCELLED, "a bug"))
            ran.set()
            raise RuntimeError("a bug in a scheduler-thread callback")
        core.env.call_at(core.env.now(), buggy)
        assert ran.wait(30)
        assert core.request("status", in_process.ADMIN).result(timeout=30)["jobs"]["a"]["status"] != "cancelled"
        assert core.acquire("a", "rollout", tok)["job_id"] == "a"
        assert core.dump() == _replayed(path)
    finally:
        core.shutdown()
