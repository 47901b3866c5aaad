"""Turns no member holds hostage (core/turns.py, live/supervision.py), over the real HTTP server: a
member that only heartbeats loses its turn within its grace, gets it back by asking, and is failed
as hung past its lease; `init` once per placement."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from factories import make_job

from rollmux.core.spec import default_cluster
from rollmux.live.client import HttpPermitClient
from rollmux.live.local import ThreadServer
from rollmux.live.refusals import Conflict
from rollmux.live.service import SchedulerCore
from rollmux.shim import PhaseTimings

ADMIN = "admin-token-for-turn-tests-0123456789"
GRACE_S = 0.5
# Phases of 0.1 s can share nodes with switches this short.
FAST = {**default_cluster().model_dump(), "warm_switch_s": 0.005, "cold_switch_s": 0.1}
WAIT_S = 30.0  # generous: what a test waits for at most before it fails


class Pair:
    """Members a and b of one group, on a served core, driven by hand over HTTP."""

    def __init__(self, server: ThreadServer) -> None:
        self.server = server
        self.http = HttpPermitClient(server.url, admin_token=ADMIN, wait_s=1.0)
        for j in "ab":
            self.http.submit(make_job(j, rollout=0.1, train=0.1, sync=0.0, slo=3.0).model_dump(exclude_none=True))
        assert self.http.job("a")["group_id"] == self.http.job("b")["group_id"]
        self.pool = ThreadPoolExecutor(2)

    def acquire(self, job_id: str, phase: str) -> float:
        """Ask for `phase` (failing the test if it is not granted within WAIT_S); seconds it waited."""
        start = time.monotonic()
        self.pool.submit(self.http.acquire, job_id, phase).result(timeout=WAIT_S)
        return time.monotonic() - start

    def release(self, job_id: str, phase: str) -> None:
        self.http.release(PhaseTimings(job_id, phase, 0.0, 0.0, 0.01, 0.0))

    def run(self, job_id: str, phase: str) -> float:
        waited = self.acquire(job_id, phase)
        self.release(job_id, phase)
        return waited

    def a_goes_idle(self) -> None:
        """One iteration each, then a stops asking (its rollout turn comes when b releases its own)."""
        self.run("a", "rollout")
        self.acquire("a", "train")
        self.run("b", "rollout")
        self.release("a", "train")
        self.run("b", "train")

    def wait_for(self, job_id: str, status: str) -> dict:
        """The job's view once it has `status` (a heartbeat of a's between polls), or the last seen."""
        deadline = time.monotonic() + WAIT_S
        view = self.http.job(job_id)
        while view["status"] != status and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the server's view, the condition itself is asserted after
            view = self.http.job(job_id)
        return view


@pytest.fixture
def pair():
    core = SchedulerCore(FAST, admin_token=ADMIN, heartbeat_timeout_s=30.0, check_every_s=0.05,
                         lease_min_s=60.0, turn_grace_s=GRACE_S)
    with ThreadServer(core) as server:
        p = Pair(server)
        yield p
        p.pool.shutdown(wait=False, cancel_futures=True)
        p.http.close()


@pytest.fixture
def short_lease():
    core = SchedulerCore(FAST, admin_token=ADMIN, heartbeat_timeout_s=30.0, check_every_s=0.05,
                         lease_min_s=1.5, turn_grace_s=GRACE_S)
    with ThreadServer(core) as server:
        p = Pair(server)
        yield p
        p.pool.shutdown(wait=False, cancel_futures=True)
        p.http.close()


def test_a_mate_whose_member_goes_idle_gets_its_next_turn_within_the_grace(pair):
    pair.a_goes_idle()
    pair.http.heartbeat("a")  # alive, just not asking
    waited = pair.acquire("b", "rollout")
    # a's turn came when b released its last rollout, before b asked: b waits at most the grace
    # (plus a watchdog tick and a round trip; a busy machine's margin), not for ever.
    assert waited < GRACE_S + 1.0


def test_the_mate_keeps_iterating_while_the_member_stays_idle(pair):
    pair.a_goes_idle()
    pair.run("b", "rollout")
    for _ in range(3):
        pair.http.heartbeat("a")
        pair.run("b", "train")
        assert pair.run("b", "rollout") < GRACE_S  # a is absent: nothing to wait for
    assert pair.http.job("b")["iterations"] == 4 and pair.http.job("a")["iterations"] == 1


def test_an_idle_member_that_asks_again_gets_its_turn_back(pair):
    pair.a_goes_idle()
    pair.run("b", "rollout")
    pair.run("b", "train")
    pair.acquire("b", "rollout")  # b rolls out; a asks again while it does
    asked = pair.pool.submit(pair.acquire, "a", "rollout")
    pair.release("b", "rollout")
    asked.result(timeout=WAIT_S)  # a's rollout comes next: right after b's
    pair.acquire("b", "train")  # beside a's rollout, as in the plain round robin
    pair.release("b", "train")
    pair.release("a", "rollout")
    pair.run("a", "train")
    assert pair.http.job("a")["iterations"] == 2 and pair.http.job("a")["status"] == "running"


def test_a_member_absent_past_its_lease_is_failed_as_hung(short_lease):
    short_lease.a_goes_idle()
    short_lease.run("b", "rollout")  # a lost its turn
    a = short_lease.wait_for("a", "failed")
    assert a["status"] == "failed" and "hung" in a["reason"] and "turn" in a["reason"]
    assert short_lease.http.job("b")["status"] == "running"


def test_a_second_init_of_the_same_placement_is_refused(pair):
    pair.run("a", "init")
    with pytest.raises(Conflict, match="409.*'init'"):
        pair.http.acquire("a", "init")


def test_init_again_after_a_move_is_allowed(pair):
    pair.run("a", "init")
    epoch = pair.http.job("a")["epoch"]
    pair.http.readmit("a", "its workers restarted")
    moved = pair.wait_for("a", "running")
    assert moved["epoch"] > epoch
    assert pair.acquire("a", "init") < WAIT_S


def test_a_restart_replays_who_lost_its_turn(tmp_path):
    store = f"sqlite://{tmp_path / 'journal.db'}"
    core = SchedulerCore(FAST, store=store, admin_token=ADMIN, check_every_s=0.05, turn_grace_s=GRACE_S)
    with ThreadServer(core) as server:
        p = Pair(server)
        p.a_goes_idle()
        p.run("b", "rollout")  # a lost its turn: journaled
        p.pool.shutdown()
        p.http.close()
    again = SchedulerCore(None, store=store, admin_token=ADMIN, check_every_s=0.05, turn_grace_s=GRACE_S)
    with ThreadServer(again):
        state = again.request("dump").result()
        assert state["controllers"][str(state["jobs"]["a"]["group_id"])]["absent"] == {"a": "rollout"}
