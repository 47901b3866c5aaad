"""The server-level scenarios of `rollmux chaos` (see `rollmux.harness.chaos.command`): route auth, journal append
failures, a hung job, a second server on one store, a torn journal. Each is a body run on a `Run`."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import sqlite3
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import httpx

from rollmux.core.env import WallClockEnvironment
from rollmux.harness.chaos.checks import first_diff
from rollmux.harness.chaos.job import PhaseLog, job_record
from rollmux.harness.chaos.run import (
    CLUSTER,
    HEARTBEAT_TIMEOUT_S,
    ITERATIONS,
    PHASE_S,
    SERVE_ARGS,
    TIMINGS,
    WAIT_S,
    Run,
    cli,
    output_tail,
    random_token,
    serve_until_exit,
    start_server,
)
from rollmux.live.journal import FailingStore, open_store
from rollmux.live.live_state import LiveState
from rollmux.live.local import ThreadServer
from rollmux.live.refusals import JobGone
from rollmux.live.service import SchedulerCore, _config_from
from rollmux.shim import PhaseTimings

LEASE_MIN_S = 1.0  # the hung-job scenario's server: a 5 ms phase gets a 1 s lease


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


# -- auth on every route -----------------------------------------------------------------------

def auth_routes(run: Run) -> None:
    """Every route of the API (app.py's table) with no token, a forged one, another job's token, a job's
    token on the admin routes and the admin's on the job-only routes: 401 / 403, counted, nothing changes,
    no refusal echoes a token; an unknown job is 404 for the admin only; /metrics and the dashboard's
    pages carry no token. Then the two jobs run and finish."""
    ca, pa = run.submit("auth-a")
    cb, pb = run.submit("auth-b")
    tok_a, tok_b, admin = pa["token"], pb["token"], run.admin_token
    forged = random_token(run.ctx.rng)
    secrets = {admin, tok_a, tok_b}
    secrets |= {hashlib.sha256(s.encode()).hexdigest() for s in secrets}
    job = "/v1/jobs/auth-a"
    job_only = [("POST", f"{job}/acquire", {"phase": "rollout", "wait_s": 0}),
                ("POST", f"{job}/release", {"phase": "rollout", "timings": TIMINGS, "grant_no": 1}),
                ("POST", f"{job}/heartbeat", {}), ("POST", f"{job}/progress", {"done": 1, "total": 2}),
                ("POST", f"{job}/finish", {})]
    job_or_admin = [("GET", job, None), ("DELETE", job, None)]
    admin_only = [("POST", "/v1/jobs", job_record("auth-c", PHASE_S)), ("GET", "/v1/status", None)]
    before = run.status()
    counted = 0

    def refused(method: str, path: str, body: object, token: str | None, status: int, who: str) -> None:
        nonlocal counted
        counted += 1
        what = f"{method} {path} with {who}"
        try:
            r = run.http(method, path, token, body)
        except httpx.HTTPError as exc:
            run.check(False, f"{what}: no answer ({exc})")
            return
        run.check(r.status_code == status, f"{what}: {r.status_code} {r.text[:200]} (wanted {status})")
        run.check(not any(s in r.text or s in str(r.headers) for s in secrets), f"{what}: the refusal shows a token")

    for method, path, body in job_only + job_or_admin + admin_only:
        refused(method, path, body, None, 401, "no token")
        refused(method, path, body, forged, 401, "a forged token")
    for method, path, body in job_only + job_or_admin:
        refused(method, path, body, tok_b, 403, "another job's token")
    for method, path, body in admin_only:
        refused(method, path, body, tok_a, 403, "a job's token")
    for method, path, body in job_only:
        refused(method, path, body, admin, 403, "the admin token")
    # Only the admin learns that a job id is unknown; a job's token gets the same 403 as for another job.
    refused("GET", "/v1/jobs/auth-nobody", None, admin, 404, "the admin token, unknown job")
    refused("GET", "/v1/jobs/auth-nobody", None, tok_a, 403, "a job's token, unknown job")
    refused("DELETE", "/v1/jobs/auth-nobody", None, tok_a, 403, "a job's token, unknown job")
    # The dashboard: only a login session opens it; a job's token does not log in.
    for token, who in ((None, "no token"), (tok_a, "a job's token"), (admin, "the admin token as a bearer")):
        r = run.http("GET", "/", token)
        run.check(r.status_code == 303 and r.headers.get("location", "").startswith("/login"),
                  f"GET / with {who}: {r.status_code} (wanted 303 to /login)")
    r = httpx.post(f"{run.url}/login", data={"token": tok_a}, timeout=30)
    counted += 1
    run.check(r.status_code == 303 and "failed" in r.headers.get("location", "") and "set-cookie" not in r.headers,
              f"POST /login with a job's token: {r.status_code} to {r.headers.get('location')}, "
              f"cookie {'set' if 'set-cookie' in r.headers else 'not set'} (wanted 303 to /login?failed=1, no cookie)")
    after = run.status()
    run.unchanged(before, after, "the refused requests")
    run.check(after["refused"] - before["refused"] == counted,
              f"status counts {after['refused'] - before['refused']} refusals, wanted {counted}")
    # /metrics answers anyone and shows no token (nor a token's hash); nor do the pages.
    for path in ("/metrics", "/login"):
        r = run.http("GET", path, None)
        run.check(r.status_code == 200, f"GET {path}: {r.status_code}")
        run.check(not any(s in r.text for s in secrets), f"GET {path} shows a token or a token's hash")
    run.extras["refused_requests"] = counted
    jobs = [run.thread_job(ca, "auth-a", lambda it: it < ITERATIONS),
            run.thread_job(cb, "auth-b", lambda it: it < ITERATIONS)]
    run.join(jobs)


# -- a hung job ------------------------------------------------------------------------------------

def hung_job(run: Run) -> None:
    """A job whose phase outlives its lease while its heartbeats go on (a server with --lease-min 1 and
    5 ms declared phases): it is failed as hung, its permit reclaimed, its group mate goes on; its late
    release is refused (410); resubmitted, it runs and finishes."""
    run.own_server("hung", SERVE_ARGS + ["--lease-min", f"{LEASE_MIN_S:g}"])
    hung, mate = "hung-job", "hung-mate"
    ch, _ = run.submit(hung)     # first in the group's turn order: its rollout comes first
    cm, _ = run.submit(mate)
    if not run.same_group([hung, mate]):
        return
    got: dict = {}
    t_ask = time.monotonic()
    asker = threading.Thread(target=lambda: got.update(grant=ch.acquire_dict(hung, "rollout")), daemon=True)
    asker.start()
    asker.join(WAIT_S)
    if not run.check("grant" in got, f"{hung} never got its rollout permit"):
        return
    grant = got["grant"]
    log = PhaseLog(run.log_dir, hung)
    t_start = time.monotonic()
    log.start(grant, 0, t_start - t_ask)  # no end line: its interval ends when it was reclaimed
    stop = threading.Event()
    mate_job = run.thread_job(cm, mate, lambda it: it < 3 or not stop.is_set())
    try:
        # The hung job holds its rollout and only beats; wait for the server to fail it. The last status
        # that still showed it holding bounds its phase interval (its node may go to the mate after that).
        deadline, last_holding, st = time.monotonic() + WAIT_S, None, None
        while time.monotonic() < deadline:
            sent = time.monotonic()
            st = run.status()
            h = st["jobs"][hung]
            if h["status"] == "running" and h["held"] == ["rollout"]:
                last_holding = sent
            elif h["status"] != "running":
                break
            time.sleep(0.05)
        h = st["jobs"][hung]
        run.kills[(hung, os.getpid())] = last_holding if last_holding is not None else t_start
        if not run.check(h["status"] == "failed" and "lease" in (h["reason"] or ""),
                         f"the hung job is {h['status']} ({h['reason']}), wanted failed for outliving its lease"):
            return
        run.killed[hung] = h["reason"]
        run.extras.update(reason=h["reason"], lease_s=grant.get("lease_s"),
                          detected_after_s=round(time.monotonic() - t_ask, 2))
        run.check(h["held"] == [] and not any(hung in g["members"] for g in st["groups"]),
                  f"the hung job still holds {h['held']} or is still a group member")
        it0 = st["jobs"][mate]["iterations"]
        _, ok = run.wait_status(lambda s: s["jobs"][mate]["iterations"] >= it0 + 2, WAIT_S)
        run.check(ok, f"{mate} stopped iterating after {hung} was failed (at {it0})")
        # The hung phase ends at last: its release comes too late.
        try:
            ch.release(PhaseTimings(hung, "rollout", 0.0, 0.0, 2.0, 0.0, grant["epoch"]))
            run.check(False, "the hung job's late release was accepted")
        except JobGone as exc:
            run.check("failed" in str(exc), f"the late release was refused with: {exc}")
        # Resubmitted (its launcher restarts it), it runs like a new arrival and finishes.
        placed = ch.submit(job_record(hung, PHASE_S))
        run.extras["resubmitted_case"] = placed["case"]
        run.join([run.thread_job(ch, hung, lambda it: it < ITERATIONS)])
    finally:
        stop.set()
        run.join([mate_job])


# -- journal append failures ------------------------------------------------------------------------

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
    return fut.result(timeout=WAIT_S)


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
    path = run.log_dir / "journal.db"
    _log_to_file(run, run.log_dir / "core.log")  # the core runs in this process: its log goes to the scenario's
    shot = OneShot()
    store = FailingStore(open_store(str(path)), fail_on=shot)
    admin = random_token(run.ctx.rng)
    core = SchedulerCore(CLUSTER, store=store, admin_token=admin, heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S,
                         check_every_s=0.1)
    server = ThreadServer(core)
    run.cleanups.append(server.stop)
    run.use(server.url, admin)
    beats = run.client()  # heartbeats of the jobs driven by hand below
    tokens: dict[str, str] = {}

    def same_as_replay(what: str) -> bool:
        mem, rep = _memory(core), _replay(path)
        return run.check(mem == rep, f"{what}: memory differs from a replay of the journal at {first_diff(mem, rep)}")

    def ok(what: str, method: str, p: str, token: str | None, body: object = None) -> dict | None:
        r = run.http(method, p, token, body)
        if not run.check(r.is_success, f"{what}: {r.status_code} {r.text[:300]}"):
            return None
        return r.json() if r.status_code != 204 and r.content else {}

    def failing(kind: str, method: str, p: str, token: str | None, body: object = None) -> bool:
        """The request whose `kind` record fails: 503, memory = replay. True if so."""
        shot.arm(kind)
        r = run.http(method, p, token, body)
        shot.arm(None)
        fired = run.check(kind in shot.fired, f"{kind}: {method} {p} staged no {kind!r} record to fail")
        good = run.check(r.status_code == 503, f"{kind}: the caller got {r.status_code} {r.text[:200]}, wanted 503")
        return same_as_replay(f"after the failed {kind!r}") and fired and good

    def submit(job_id: str, record: dict) -> dict | None:
        placed = ok(f"submit {job_id}", "POST", "/v1/jobs", admin, record)
        if placed is not None:
            tokens[job_id] = placed["token"]
            beats.register(job_id, placed["token"])
            run.jobs.append(job_id)
        return placed

    def phase_call(job_id: str, what: str, body: dict) -> dict | None:
        return ok(f"{job_id} {what}", "POST", f"/v1/jobs/{job_id}/{what}", tokens[job_id], body)

    def release(job_id: str, grant: dict) -> dict:
        return {"phase": grant["phase"], "grant_no": grant["grant_no"],
                "timings": {**TIMINGS, "epoch": grant["epoch"]}}

    a, b, c = _record("jf-a", 100, 20, 2.0, tail=0.3), _record("jf-b", 20, 100, 2.0), _record("jf-c", 20, 100, 1.05)
    failed = []
    # submit: the submission itself cannot be journaled.
    if failing("submit", "POST", "/v1/jobs", admin, a):
        failed.append("submit")
    run.check(run.http("GET", "/v1/jobs/jf-a", admin).status_code == 404, "jf-a is known after its failed submit")
    if submit("jf-a", a) is None:
        return
    # place: submitted, but its placement cannot be journaled: the whole submission is undone.
    if failing("place", "POST", "/v1/jobs", admin, _record("jf-x", 20, 100, 2.0)):
        failed.append("place")
    run.check(run.http("GET", "/v1/jobs/jf-x", admin).status_code == 404, "jf-x is known after its failed placement")
    if submit("jf-b", b) is None or submit("jf-c", c) is None:
        return
    st = run.status()["jobs"]
    if not run.check(st["jf-a"]["group_id"] == st["jf-b"]["group_id"] != st["jf-c"]["group_id"],
                     f"groups: {({j: st[j]['group_id'] for j in ('jf-a', 'jf-b', 'jf-c')})}, wanted jf-a and jf-b "
                     "together, jf-c apart"):
        return
    # grant: jf-a's rollout permit cannot be journaled.
    if failing("grant", "POST", "/v1/jobs/jf-a/acquire", tokens["jf-a"], {"phase": "rollout", "wait_s": 5}):
        failed.append("grant")
    g = phase_call("jf-a", "acquire", {"phase": "rollout", "wait_s": 5})
    if not run.check(bool(g) and g.get("tail_share", 0) > 0, f"jf-a's rollout permit: {g}, wanted a tail share"):
        return
    # tail: its rollout turns tail-bound, but that cannot be journaled; reported again, it is recorded.
    if failing("tail", "POST", "/v1/jobs/jf-a/progress", tokens["jf-a"], {"done": 9, "total": 10}):
        failed.append("tail")
    again = phase_call("jf-a", "progress", {"done": 9, "total": 10})
    run.check(again == {"tail": True}, f"the tail reported again after its failed record: {again}, wanted "
                                       "{'tail': True} (the tail is never journaled)")
    # release: jf-a's rollout release cannot be journaled; it still holds the permit, and releases again.
    if failing("release", "POST", "/v1/jobs/jf-a/release", tokens["jf-a"], release("jf-a", g)):
        failed.append("release")
    if phase_call("jf-a", "release", release("jf-a", g)) is None:
        return
    for job_id in ("jf-a", "jf-b"):  # an iteration of each
        for phase in ("rollout", "train") if job_id == "jf-b" else ("train",):
            g = phase_call(job_id, "acquire", {"phase": phase, "wait_s": 5})
            if not g or phase_call(job_id, "release", release(job_id, g)) is None:
                return
    # movers: jf-b leaves; jf-a alone would fit with jf-c for less, but the regrouping cannot be journaled.
    if failing("movers", "POST", "/v1/jobs/jf-b/finish", tokens["jf-b"], {}):
        failed.append("movers")
    run.check(run.status()["jobs"]["jf-b"]["status"] == "running", "jf-b left although its departure failed")
    if phase_call("jf-b", "finish", {}) is None:
        return
    beats.tokens.pop("jf-b", None)
    run.check(_memory(core)["jobs"]["jf-a"]["migrate"], "jf-a is not moving after jf-b left")
    # move_out: jf-a's train release is its iteration boundary, where it moves; the move cannot be journaled.
    g = phase_call("jf-a", "acquire", {"phase": "rollout", "wait_s": 5})
    if not g or phase_call("jf-a", "release", release("jf-a", g)) is None:
        return
    g = phase_call("jf-a", "acquire", {"phase": "train", "wait_s": 5})
    if not g:
        return
    if failing("move_out", "POST", "/v1/jobs/jf-a/release", tokens["jf-a"], release("jf-a", g)):
        failed.append("move_out")
    if phase_call("jf-a", "release", release("jf-a", g)) is None:
        return
    st = run.status()["jobs"]
    run.check(st["jf-a"]["group_id"] == st["jf-c"]["group_id"] and st["jf-a"]["epoch"] == 2,
              f"jf-a did not move to jf-c's group: {st['jf-a']['group_id']} vs {st['jf-c']['group_id']}, "
              f"epoch {st['jf-a']['epoch']}")
    # leave: jf-c finishes, but its departure cannot be journaled; it finishes again.
    if failing("leave", "POST", "/v1/jobs/jf-c/finish", tokens["jf-c"], {}):
        failed.append("leave")
    for job_id in ("jf-c", "jf-a"):
        if phase_call(job_id, "finish", {}) is None:
            return
        beats.tokens.pop(job_id, None)
    run.extras.update(failed_kinds=len(failed), injected=store.injected)
    run.check(sorted(failed) == sorted(KINDS), f"kinds not failed as required: {sorted(set(KINDS) - set(failed))}")
    # It goes on granting correctly: two jobs share a group and iterate.
    cd, _ = run.submit("jf-d")
    ce, _ = run.submit("jf-e")
    run.same_group(["jf-d", "jf-e"])
    run.join([run.thread_job(cd, "jf-d", lambda it: it < ITERATIONS),
              run.thread_job(ce, "jf-e", lambda it: it < ITERATIONS)])
    same_as_replay("at the end")
    # And its heartbeat watchdog still fails a silent job.
    r = run.http("POST", "/v1/jobs", admin, job_record("jf-silent", PHASE_S, 1.0))
    if run.check(r.status_code == 201, f"submit jf-silent: {r.status_code} {r.text[:200]}"):
        bound = 5 * HEARTBEAT_TIMEOUT_S  # it is due after one timeout (the watchdog looks every 0.1 s)
        st, ok_ = run.wait_status(lambda s: s["jobs"]["jf-silent"]["status"] != "running", bound)
        s = st["jobs"]["jf-silent"]
        run.check(ok_ and "heartbeat" in (s["reason"] or ""),
                  f"a silent job is still {s['status']} {bound:.0f} s after its submission "
                  "(the heartbeat watchdog stopped after the journal failures; see core.log)")


# -- a second server on one store --------------------------------------------------------------------

def second_server(run: Run) -> None:
    """A second `rollmux serve` on the shared store exits non-zero with one clear line; the first goes on."""
    ctx = run.ctx
    before = run.status()
    rc, out = serve_until_exit(ctx.store, ctx.server_dir, ctx.cluster_file, SERVE_ARGS)
    lines = _lines(out)
    run.check(rc is not None, f"a second server on {ctx.store} started serving")
    run.check(rc not in (None, 0), f"the second server exited with {rc}")
    run.check(len(lines) == 1, f"the second server printed {len(lines)} lines: {output_tail(out, 6)}")
    run.check("in use" in out, f"the second server's message does not say the journal is in use: {out.strip()}")
    run.extras.update(exit_status=rc, message=lines[-1].strip() if lines else None)
    run.check(ctx.server.proc.poll() is None, f"the first server died: {output_tail(ctx.server.output())}")
    run.unchanged(before, run.status(), "the refused second server")
    ca, _ = run.submit("second-a")
    cb, _ = run.submit("second-b")
    run.join([run.thread_job(ca, "second-a", lambda it: it < ITERATIONS),
              run.thread_job(cb, "second-b", lambda it: it < ITERATIONS)])


# -- a torn journal -----------------------------------------------------------------------------------

def torn_journal(run: Run) -> None:
    """A server stopped (SIGTERM, cleanly), its journal's last record corrupted: the restart exits non-zero
    with one line naming the record; `rollmux journal repair` keeps a backup and truncates; the server
    then starts, with the records before the torn one."""
    srv = run.own_server("torn", [])
    workdir = srv.token_file.parent
    path = workdir / "journal.db"
    client, placed = run.submit("torn-job")
    run.join([run.thread_job(client, "torn-job", lambda it: it < ITERATIONS)])  # it finishes: the last record
    run.final_status = run.status()  # the outcome, unless the server comes back below
    t = time.monotonic()
    rc = srv.signal(signal.SIGTERM)
    run.check(rc == 0, f"SIGTERM: the server exited with {rc}: {output_tail(srv.output())}")
    run.extras["stop_s"] = round(time.monotonic() - t, 2)
    store = open_store(str(path), readonly=True)
    last = store.records()[-1]
    store.close()
    with sqlite3.connect(path) as db:  # a torn write: half of the last record's payload
        db.execute("UPDATE records SET payload = substr(payload, 1, length(payload) / 2) WHERE seq = ?", (last.seq,))
    run.extras.update(torn_record=last.seq, torn_kind=last.kind)
    rc, out = serve_until_exit(str(path), workdir, workdir / "cluster.yaml", [])
    lines = _lines(out)
    run.check(rc not in (None, 0), f"the server started on a torn journal (exit status {rc})")
    run.check(len(lines) == 1, f"the refused restart printed {len(lines)} lines: {output_tail(out, 6)}")
    run.check(f"record {last.seq}" in out, f"the refused restart does not name record {last.seq}: {out.strip()}")
    run.extras["message"] = lines[-1].strip() if lines else None
    checked = cli("journal", "check", str(path))
    run.check(checked.returncode == 1 and f"record {last.seq}" in checked.stdout and len(_lines(checked.stdout)) == 1,
              f"journal check: exit {checked.returncode}: {output_tail(checked.stdout, 6)}")
    repaired = cli("journal", "repair", str(path))
    if not run.check(repaired.returncode == 0, f"journal repair: exit {repaired.returncode}: "
                                               f"{output_tail(repaired.stdout, 6)}"):
        return
    backups = sorted(path.parent.glob(f"{path.name}.bak-*"))
    if run.check(len(backups) == 1, f"journal repair left {len(backups)} backups: {repaired.stdout.strip()}"):
        with sqlite3.connect(f"{backups[0].as_uri()}?mode=ro", uri=True) as db:
            kept = db.execute("SELECT count(*), max(seq) FROM records").fetchone()
        run.check(kept == (last.seq, last.seq), f"the backup holds {kept[0]} records up to {kept[1]}, wanted all "
                                                 f"{last.seq} (the torn one included)")
    store = open_store(str(path), readonly=True)
    try:
        n = len(store.records())
    finally:
        store.close()
    run.check(n == last.seq - 1, f"after the repair the journal holds {n} records, wanted {last.seq - 1}")
    run.extras["repair"] = repaired.stdout.strip()
    try:
        again = start_server(str(path), workdir, workdir / "cluster.yaml", [])
    except RuntimeError as exc:
        run.check(False, f"the server did not start after the repair: {exc}")
        return
    run.cleanups.append(lambda: again.proc.poll() is None and again.signal(signal.SIGTERM))
    run.use(again.url, again.admin_token)
    run.final_status = None
    st = run.status()
    run.check(st["recovered_records"] == last.seq - 1,
              f"the restarted server recovered {st['recovered_records']} records, wanted {last.seq - 1}")
    job = st["jobs"].get("torn-job")
    if run.check(job is not None, "torn-job is unknown after the repair") and last.kind == "leave":
        # Its departure was the torn record: it is running again, and finishes again with its token.
        run.check(job["status"] == "running", f"torn-job is {job['status']} after losing its departure record")
        again_client = run.client(heartbeat=False)
        again_client.register("torn-job", placed["token"])
        again_client.finish("torn-job")
