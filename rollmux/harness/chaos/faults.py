"""The server-level scenarios of `rollmux chaos` (see `rollmux.harness.chaos.command`): route auth, a hung
job, a second server on one store, a torn journal (journal append failures are in `journal_faults`). Each
is a body run on a `Run`."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import httpx

from rollmux.harness.chaos.job import PhaseLog, job_record
from rollmux.harness.chaos.run import (
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
from rollmux.live.journal import Record, open_store
from rollmux.live.refusals import JobGone
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
    refusals = _Refusals(run, {admin, tok_a, tok_b})
    before = run.status()
    _api_refusals(refusals, forged, tok_a, tok_b, admin)
    _dashboard_refusals(refusals, tok_a, admin)
    after = run.status()
    run.unchanged(before, after, "the refused requests")
    run.check(after["refused"] - before["refused"] == refusals.counted,
              f"status counts {after['refused'] - before['refused']} refusals, wanted {refusals.counted}")
    # /metrics answers anyone and shows no token (nor a token's hash); nor do the pages.
    for path in ("/metrics", "/login"):
        r = run.http("GET", path, None)
        run.check(r.status_code == 200, f"GET {path}: {r.status_code}")
        run.check(not any(s in r.text for s in refusals.secrets), f"GET {path} shows a token or a token's hash")
    run.extras["refused_requests"] = refusals.counted
    jobs = [run.thread_job(ca, "auth-a", lambda it: it < ITERATIONS),
            run.thread_job(cb, "auth-b", lambda it: it < ITERATIONS)]
    run.join(jobs)


class _Refusals:
    """Requests that must be refused, counted (the server's status counts them too); no refusal may show
    a token or a token's hash."""

    def __init__(self, run: Run, tokens: set[str]) -> None:
        self.run = run
        self.secrets = tokens | {hashlib.sha256(s.encode()).hexdigest() for s in tokens}
        self.counted = 0

    def refused(self, method: str, path: str, body: object, token: str | None, status: int, who: str) -> None:
        """`method path` with `token` (`who` names it) is answered `status` and shows no secret."""
        run = self.run
        self.counted += 1
        what = f"{method} {path} with {who}"
        try:
            r = run.http(method, path, token, body)
        except httpx.HTTPError as exc:
            run.check(False, f"{what}: no answer ({exc})")
            return
        run.check(r.status_code == status, f"{what}: {r.status_code} {r.text[:200]} (wanted {status})")
        run.check(not any(s in r.text or s in str(r.headers) for s in self.secrets),
                  f"{what}: the refusal shows a token")


def _api_refusals(refusals: _Refusals, forged: str, tok_a: str, tok_b: str, admin: str) -> None:
    """Every API route with a token it does not take (auth-a's routes; auth-b's token is another job's)."""
    job = "/v1/jobs/auth-a"
    job_only = [("POST", f"{job}/acquire", {"phase": "rollout", "wait_s": 0}),
                ("POST", f"{job}/release", {"phase": "rollout", "timings": TIMINGS, "grant_no": 1}),
                ("POST", f"{job}/heartbeat", {}), ("POST", f"{job}/progress", {"done": 1, "total": 2}),
                ("POST", f"{job}/finish", {})]
    job_or_admin = [("GET", job, None), ("DELETE", job, None)]
    admin_only = [("POST", "/v1/jobs", job_record("auth-c", PHASE_S)), ("GET", "/v1/status", None)]
    admin_on_job = [("POST", f"{job}/exit", {"code": 1, "reason": "chaos"})]  # (rollmux run's report)
    refused = refusals.refused
    for method, path, body in job_only + job_or_admin + admin_only + admin_on_job:
        refused(method, path, body, None, 401, "no token")
        refused(method, path, body, forged, 401, "a forged token")
    for method, path, body in job_only + job_or_admin + admin_on_job:
        refused(method, path, body, tok_b, 403, "another job's token")
    for method, path, body in admin_only + admin_on_job:
        refused(method, path, body, tok_a, 403, "a job's token")
    for method, path, body in job_only:
        refused(method, path, body, admin, 403, "the admin token")
    # Only the admin learns that a job id is unknown; a job's token gets the same 403 as for another job.
    refused("GET", "/v1/jobs/auth-nobody", None, admin, 404, "the admin token, unknown job")
    refused("GET", "/v1/jobs/auth-nobody", None, tok_a, 403, "a job's token, unknown job")
    refused("DELETE", "/v1/jobs/auth-nobody", None, tok_a, 403, "a job's token, unknown job")


def _dashboard_refusals(refusals: _Refusals, tok_a: str, admin: str) -> None:
    """The dashboard: only a login session opens it; a job's token does not log in (a counted refusal)."""
    run = refusals.run
    for token, who in ((None, "no token"), (tok_a, "a job's token"), (admin, "the admin token as a bearer")):
        r = run.http("GET", "/", token)
        run.check(r.status_code == 303 and r.headers.get("location", "").startswith("/login"),
                  f"GET / with {who}: {r.status_code} (wanted 303 to /login)")
    r = httpx.post(f"{run.url}/login", data={"token": tok_a}, timeout=30)
    refusals.counted += 1
    run.check(r.status_code == 303 and "failed" in r.headers.get("location", "") and "set-cookie" not in r.headers,
              f"POST /login with a job's token: {r.status_code} to {r.headers.get('location')}, "
              f"cookie {'set' if 'set-cookie' in r.headers else 'not set'} (wanted 303 to /login?failed=1, no cookie)")


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
        st, last_holding = _until_not_running(run, hung)
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


def _until_not_running(run: Run, job_id: str) -> tuple[dict, float | None]:
    """Poll the status (at most WAIT_S) until `job_id` is no longer running: the last status, and when the
    last status that still showed it holding its rollout was asked for (None: none did)."""
    deadline, last_holding, st = time.monotonic() + WAIT_S, None, None
    while time.monotonic() < deadline:
        sent = time.monotonic()
        st = run.status()
        h = st["jobs"][job_id]
        if h["status"] == "running" and h["held"] == ["rollout"]:
            last_holding = sent
        elif h["status"] != "running":
            break
        time.sleep(0.05)
    return st, last_holding


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
    last = _tear_last_record(path)
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
    _check_repaired(run, path, last.seq, repaired.stdout)
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


def _tear_last_record(path: Path) -> Record:
    """Cut the SQLite journal's last record's payload in half (a torn write); that record as it was."""
    store = open_store(str(path), readonly=True)
    last = store.records()[-1]
    store.close()
    with sqlite3.connect(path) as db:  # a torn write: half of the last record's payload
        db.execute("UPDATE records SET payload = substr(payload, 1, length(payload) / 2) WHERE seq = ?", (last.seq,))
    return last


def _check_repaired(run: Run, path: Path, torn_seq: int, said: str) -> None:
    """After `rollmux journal repair` (which printed `said`): one backup holding every record, the torn one
    included, and the journal holding the records before the torn one."""
    backups = sorted(path.parent.glob(f"{path.name}.bak-*"))
    if run.check(len(backups) == 1, f"journal repair left {len(backups)} backups: {said.strip()}"):
        with sqlite3.connect(f"{backups[0].as_uri()}?mode=ro", uri=True) as db:
            kept = db.execute("SELECT count(*), max(seq) FROM records").fetchone()
        run.check(kept == (torn_seq, torn_seq), f"the backup holds {kept[0]} records up to {kept[1]}, wanted all "
                                                 f"{torn_seq} (the torn one included)")
    store = open_store(str(path), readonly=True)
    try:
        n = len(store.records())
    finally:
        store.close()
    run.check(n == torn_seq - 1, f"after the repair the journal holds {n} records, wanted {torn_seq - 1}")
