"""`journal append failures`, a server-level scenario of `rollmux chaos`: an in-process `SchedulerCore`
on a `FailingStore`, served over HTTP by a `ThreadServer` and driven by hand. The stage of each record
kind (submit, place, grant, release, tail, movers, move_out, leave) fails once; each time the caller
gets 503, the core's memory equals a fresh replay of its journal (DESIGN §8: every decision is journaled
before it takes effect), and the request asked again succeeds. Then jobs run, and a silent job is still
failed."""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import Future
from pathlib import Path

from rollmux.core.env import WallClockEnvironment
from rollmux.core.records import config_from as _config_from
from rollmux.harness.chaos import run as chaos_run
from rollmux.harness.chaos.checks import first_diff
from rollmux.harness.chaos.job import job_record
from rollmux.harness.chaos.run import Run, random_token
from rollmux.live.journal import FailingStore, open_store
from rollmux.live.live_state import LiveState
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore

KINDS = ("submit", "place", "grant", "release", "tail", "movers", "move_out", "leave")


class OneShot:
    """FailingStore's fail_on: fail the next stage of one armed record kind, once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.armed: str | None = None
        self.fired: list[str] = []

    def arm(self, kind: str | None) -> None:
        with self._lock:
            self.armed = kind

    def __call__(self, kind: str, payload: dict) -> bool:
        with self._lock:
            if kind != self.armed:
                return False
            self.armed = None
            self.fired.append(kind)
            return True


def _record(job_id: str, rollout: float, train: float, slo: float, tail: float = 0.0) -> dict:
    """A job profile with phase times in seconds (what it declares; the scenario drives its phases by hand)."""
    return {"job_id": job_id, "arrival_s": 0.0, "duration_s": 100000.0, "slo": slo, "rollout_gpus": 8,
            "train_gpus": 8, "rollout_s": {"median": rollout, "sigma": 0.0, "max": rollout}, "tail_frac": tail,
            "train_s": train, "sync_s": 5.0, "host_gb": {"rollout": 10.0, "train": 10.0}}


def _memory(core: SchedulerCore) -> dict:
    """The core's state as its scheduler thread sees it (one consistent moment)."""
    fut: Future = Future()

    def take() -> None:
        try:
            fut.set_result(json.loads(json.dumps(core.state.dump())))
        except Exception as exc:  # noqa: BLE001 -- handed to the caller
            fut.set_exception(exc)
    core.env.call_at(core.env.now(), take)
    return fut.result(timeout=chaos_run.WAIT_S)


def _replay(path: Path) -> dict:
    """A fresh `LiveState` built from the committed journal (read-only), dumped."""
    store = open_store(str(path), readonly=True)
    try:
        snap = store.snapshot()
        records = store.records(after=snap[0] if snap else 0)
        config = snap[1]["config"] if snap else records.pop(0).payload
        spec, cfg = _config_from(config)
        state = LiveState(WallClockEnvironment(), spec, cfg)
        if snap:
            state.load(snap[1])
        for r in records:
            state.apply(r.kind, r.payload, replay=True)
        return json.loads(json.dumps(state.dump()))
    finally:
        store.close()


def _log_to_file(run: Run, path: Path) -> None:
    """Until the scenario ends, the `rollmux` loggers of this process write to `path` only (an in-process
    core logs every injected failure, and its watchdog's errors, which are no part of the report)."""
    logger = logging.getLogger("rollmux")
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False

    def restore() -> None:
        logger.removeHandler(handler)
        logger.propagate = propagate
        handler.close()
    run.cleanups.append(restore)


def journal_failures(run: Run) -> None:
    """An in-process `SchedulerCore` on a `FailingStore` (served over HTTP by a `ThreadServer`): the stage of
    each record kind fails once. Each time the caller gets 503, the core's memory equals a fresh replay of
    its journal, and the request asked again succeeds; then jobs run, and a silent job is still failed."""
    scenario = _JournalFailures(run)
    if scenario.admission() and scenario.first_iterations() and scenario.departures():
        scenario.afterwards()


class _JournalFailures:
    """The scenario's core, store and jobs (jf-a, jf-b together, jf-c apart), and its steps in order; a step
    that returns False ends the scenario (its error is recorded)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.path = run.log_dir / "journal.db"
        _log_to_file(run, run.log_dir / "core.log")  # the core runs in this process: its log goes to the scenario's
        self.shot = OneShot()
        self.store = FailingStore(open_store(str(self.path)), fail_on=self.shot)
        self.admin = random_token(run.ctx.rng)
        self.core = SchedulerCore(chaos_run.CLUSTER, store=self.store, admin_token=self.admin,
                                  heartbeat_timeout_s=chaos_run.HEARTBEAT_TIMEOUT_S, check_every_s=0.1)
        server = ThreadServer(self.core)
        run.cleanups.append(server.stop)
        run.use(server.url, self.admin)
        self.beats = run.client()  # heartbeats of the jobs driven by hand below
        self.tokens: dict[str, str] = {}
        self.failed: list[str] = []  # the kinds whose failure behaved as required

    # -- the steps ---------------------------------------------------------------------------------

    def admission(self) -> bool:
        """submit and place fail; then jf-a, jf-b and jf-c are placed (jf-a with jf-b, jf-c apart)."""
        run, admin = self.run, self.admin
        a, b, c = _record("jf-a", 100, 20, 2.0, tail=0.3), _record("jf-b", 20, 100, 2.0), _record("jf-c", 20, 100, 1.05)
        # submit: the submission itself cannot be journaled.
        self.fail_once("submit", "POST", "/v1/jobs", admin, a)
        run.check(run.http("GET", "/v1/jobs/jf-a", admin).status_code == 404, "jf-a is known after its failed submit")
        if self.submit("jf-a", a) is None:
            return False
        # place: submitted, but its placement cannot be journaled: the whole submission is undone.
        self.fail_once("place", "POST", "/v1/jobs", admin, _record("jf-x", 20, 100, 2.0))
        run.check(run.http("GET", "/v1/jobs/jf-x", admin).status_code == 404,
                  "jf-x is known after its failed placement")
        if self.submit("jf-b", b) is None or self.submit("jf-c", c) is None:
            return False
        st = run.status()["jobs"]
        return run.check(st["jf-a"]["group_id"] == st["jf-b"]["group_id"] != st["jf-c"]["group_id"],
                         f"groups: {({j: st[j]['group_id'] for j in ('jf-a', 'jf-b', 'jf-c')})}, wanted jf-a and "
                         "jf-b together, jf-c apart")

    def first_iterations(self) -> bool:
        """grant, tail and release fail in jf-a's first rollout; then jf-a and jf-b finish an iteration."""
        run, token = self.run, self.tokens["jf-a"]
        # grant: jf-a's rollout permit cannot be journaled.
        self.fail_once("grant", "POST", "/v1/jobs/jf-a/acquire", token, {"phase": "rollout", "wait_s": 5})
        g = self.phase_call("jf-a", "acquire", {"phase": "rollout", "wait_s": 5})
        if not run.check(bool(g) and g.get("tail_share", 0) > 0, f"jf-a's rollout permit: {g}, wanted a tail share"):
            return False
        # tail: its rollout turns tail-bound, but that cannot be journaled; reported again, it is recorded.
        self.fail_once("tail", "POST", "/v1/jobs/jf-a/progress", token, {"done": 9, "total": 10})
        again = self.phase_call("jf-a", "progress", {"done": 9, "total": 10})
        run.check(again == {"tail": True}, f"the tail reported again after its failed record: {again}, wanted "
                                           "{'tail': True} (the tail is never journaled)")
        # release: jf-a's rollout release cannot be journaled; it still holds the permit, and releases again.
        self.fail_once("release", "POST", "/v1/jobs/jf-a/release", token, _release(g))
        if self.phase_call("jf-a", "release", _release(g)) is None:
            return False
        for job_id in ("jf-a", "jf-b"):  # an iteration of each
            for phase in ("rollout", "train") if job_id == "jf-b" else ("train",):
                g = self.phase_call(job_id, "acquire", {"phase": phase, "wait_s": 5})
                if not g or self.phase_call(job_id, "release", _release(g)) is None:
                    return False
        return True

    def departures(self) -> bool:
        """movers fails as jf-b leaves, move_out as jf-a moves to jf-c's group, leave as jf-c finishes."""
        run = self.run
        # movers: jf-b leaves; jf-a alone would fit with jf-c for less, but the regrouping cannot be journaled.
        self.fail_once("movers", "POST", "/v1/jobs/jf-b/finish", self.tokens["jf-b"], {})
        run.check(run.status()["jobs"]["jf-b"]["status"] == "running", "jf-b left although its departure failed")
        if self.phase_call("jf-b", "finish", {}) is None:
            return False
        self.beats.tokens.pop("jf-b", None)
        run.check(_memory(self.core)["jobs"]["jf-a"]["migrate"], "jf-a is not moving after jf-b left")
        # move_out: jf-a's train release is its iteration boundary, where it moves; the move cannot be journaled.
        g = self.phase_call("jf-a", "acquire", {"phase": "rollout", "wait_s": 5})
        if not g or self.phase_call("jf-a", "release", _release(g)) is None:
            return False
        g = self.phase_call("jf-a", "acquire", {"phase": "train", "wait_s": 5})
        if not g:
            return False
        self.fail_once("move_out", "POST", "/v1/jobs/jf-a/release", self.tokens["jf-a"], _release(g))
        if self.phase_call("jf-a", "release", _release(g)) is None:
            return False
        st = run.status()["jobs"]
        run.check(st["jf-a"]["group_id"] == st["jf-c"]["group_id"] and st["jf-a"]["epoch"] == 2,
                  f"jf-a did not move to jf-c's group: {st['jf-a']['group_id']} vs {st['jf-c']['group_id']}, "
                  f"epoch {st['jf-a']['epoch']}")
        # leave: jf-c finishes, but its departure cannot be journaled; it finishes again.
        self.fail_once("leave", "POST", "/v1/jobs/jf-c/finish", self.tokens["jf-c"], {})
        for job_id in ("jf-c", "jf-a"):
            if self.phase_call(job_id, "finish", {}) is None:
                return False
            self.beats.tokens.pop(job_id, None)
        return True

    def afterwards(self) -> None:
        """Every kind failed as required; the core goes on granting, and its heartbeat watchdog still fails
        a silent job."""
        run = self.run
        run.extras.update(failed_kinds=len(self.failed), injected=self.store.injected)
        run.check(sorted(self.failed) == sorted(KINDS),
                  f"kinds not failed as required: {sorted(set(KINDS) - set(self.failed))}")
        # It goes on granting correctly: two jobs share a group and iterate.
        cd, _ = run.submit("jf-d")
        ce, _ = run.submit("jf-e")
        run.same_group(["jf-d", "jf-e"])
        run.join([run.thread_job(cd, "jf-d", lambda it: it < chaos_run.ITERATIONS),
                  run.thread_job(ce, "jf-e", lambda it: it < chaos_run.ITERATIONS)])
        self.same_as_replay("at the end")
        # And its heartbeat watchdog still fails a job that started (its first call) and fell silent.
        r = run.http("POST", "/v1/jobs", self.admin, job_record("jf-silent", chaos_run.PHASE_S, 1.0))
        beat = run.http("POST", "/v1/jobs/jf-silent/heartbeat", r.json().get("token"), {}) if r.is_success else r
        if run.check(r.status_code == 201 and beat.is_success,
                     f"submit jf-silent and its first call: {r.status_code} {beat.status_code} {beat.text[:200]}"):
            bound = 5 * chaos_run.HEARTBEAT_TIMEOUT_S  # it is due after one timeout (the watchdog looks every 0.1 s)
            st, ok_ = run.wait_status(lambda s: s["jobs"]["jf-silent"]["status"] != "running", bound)
            s = st["jobs"]["jf-silent"]
            run.check(ok_ and "heartbeat" in (s["reason"] or ""),
                      f"a silent job is still {s['status']} {bound:.0f} s after its first call "
                      "(the heartbeat watchdog stopped after the journal failures; see core.log)")

    # -- requests ------------------------------------------------------------------------------------

    def same_as_replay(self, what: str) -> bool:
        """Check that the core's memory equals a fresh replay of its journal."""
        mem, rep = _memory(self.core), _replay(self.path)
        return self.run.check(mem == rep, f"{what}: memory differs from a replay of the journal at "
                                          f"{first_diff(mem, rep)}")

    def ok(self, what: str, method: str, p: str, token: str | None, body: object = None) -> dict | None:
        """A request that must succeed: its JSON answer ({} if none), or None (the error is recorded)."""
        r = self.run.http(method, p, token, body)
        if not self.run.check(r.is_success, f"{what}: {r.status_code} {r.text[:300]}"):
            return None
        return r.json() if r.status_code != 204 and r.content else {}

    def fail_once(self, kind: str, method: str, p: str, token: str | None, body: object = None) -> None:
        """The request whose `kind` record fails: 503, memory = replay; if so, `kind` counts as failed."""
        run, shot = self.run, self.shot
        shot.arm(kind)
        r = run.http(method, p, token, body)
        shot.arm(None)
        fired = run.check(kind in shot.fired, f"{kind}: {method} {p} staged no {kind!r} record to fail")
        good = run.check(r.status_code == 503, f"{kind}: the caller got {r.status_code} {r.text[:200]}, wanted 503")
        if self.same_as_replay(f"after the failed {kind!r}") and fired and good:
            self.failed.append(kind)

    def submit(self, job_id: str, record: dict) -> dict | None:
        """Submit a job (admin token); its token goes to the heartbeat client."""
        placed = self.ok(f"submit {job_id}", "POST", "/v1/jobs", self.admin, record)
        if placed is not None:
            self.tokens[job_id] = placed["token"]
            self.beats.register(job_id, placed["token"])
            self.run.jobs.append(job_id)
        return placed

    def phase_call(self, job_id: str, what: str, body: dict) -> dict | None:
        """POST /v1/jobs/<job_id>/<what> with the job's token; must succeed."""
        return self.ok(f"{job_id} {what}", "POST", f"/v1/jobs/{job_id}/{what}", self.tokens[job_id], body)


def _release(grant: dict) -> dict:
    """The release body of a grant."""
    return {"phase": grant["phase"], "grant_no": grant["grant_no"], "timings": {**chaos_run.TIMINGS, "epoch": grant["epoch"]}}
