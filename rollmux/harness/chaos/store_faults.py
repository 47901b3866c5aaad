"""Store faults as `rollmux chaos` scenarios: a failed journal append costs only its own call
(`append_failure_costs_one_call`), and a journal damaged at the page level is repaired with
every intact record, after which the service knows every job one names
(`damaged_journal_repaired`). Both run an in-process `SchedulerCore`; their figures go to
`run.extras`."""

from __future__ import annotations

import json
import sqlite3
import statistics
import threading
import time
from collections import Counter

import httpx

from rollmux.harness.chaos import run as chaos_run
from rollmux.harness.chaos.journal_faults import _log_to_file, _record
from rollmux.harness.chaos.run import Run, random_token
from rollmux.live.journal import FailingStore, open_store
from rollmux.live.journal.past_gap import named_jobs
from rollmux.live.journal.repair import repair_store
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore

TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01, "offload_s": 0.0}
JOBS = [f"sf-{i}" for i in range(8)]


def history(core: SchedulerCore, tok: dict, iterations: int) -> None:
    """Every job runs `iterations` iterations in turn, in process (a journal of thousands of records)."""
    for _ in range(iterations):
        for jid in tok:
            for phase in ("rollout", "train"):
                core.acquire(jid, phase, tok[jid])
                core.release(jid, phase, TIMINGS, tok[jid])


def _tenant(url: str, jid: str, token: str, stop: threading.Event, codes: Counter) -> None:
    """A co-tenant's GET and heartbeat, never retried, until `stop`."""
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, timeout=30) as http:
        while not stop.is_set():
            codes[http.get(f"/v1/jobs/{jid}", headers=auth).status_code] += 1
            codes[http.post(f"/v1/jobs/{jid}/heartbeat", json={}, headers=auth).status_code] += 1


def append_failure_costs_one_call(run: Run) -> None:
    """Eight jobs, a journal of thousands of records; sf-0's release fails to be journaled five
    times while seven co-tenants call without retrying: only sf-0's call fails (503), no co-tenant
    sees a 401 or a 503, and memory after each failure is memory before it."""
    _log_to_file(run, run.log_dir / "core.log")
    armed = threading.Event()
    store = FailingStore(open_store(str(run.log_dir / "journal.db")),
                         fail_on=lambda k, p: armed.is_set() and k == "release" and p.get("job_id") == "sf-0")
    admin = random_token(run.ctx.rng)
    core = SchedulerCore(chaos_run.CLUSTER, store=store, admin_token=admin, snapshot_every=0)
    tok = {j: core.submit(_record(j, 100, 100, 2.0))["token"] for j in JOBS}
    history(core, tok, 100)
    server = ThreadServer(core)
    run.cleanups.append(server.stop)
    stop, codes = threading.Event(), Counter()
    threads = [threading.Thread(target=_tenant, args=(server.url, j, tok[j], stop, codes), daemon=True)
               for j in JOBS[1:]]
    for t in threads:
        t.start()
    failed_ms, statuses, same = [], [], True
    auth = {"Authorization": f"Bearer {tok['sf-0']}"}
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for _ in range(5):
            g = http.post("/v1/jobs/sf-0/acquire", json={"phase": "rollout", "wait_s": 10}, headers=auth).json()
            before = core.dump()
            body = {"phase": "rollout", "grant_no": g["grant_no"], "timings": TIMINGS}
            armed.set()
            t0 = time.perf_counter()
            statuses.append(http.post("/v1/jobs/sf-0/release", json=body, headers=auth).status_code)
            failed_ms.append((time.perf_counter() - t0) * 1e3)
            armed.clear()
            same = same and core.dump() == before
            http.post("/v1/jobs/sf-0/release", json=body, headers=auth)
            core.acquire("sf-0", "train", tok["sf-0"])  # the rest of the round, so that sf-0's turn comes again
            core.release("sf-0", "train", TIMINGS, tok["sf-0"])
            history(core, {j: tok[j] for j in JOBS[1:]}, 1)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    run.extras.update(records=core._last_seq, failed_call_ms=round(statistics.median(failed_ms), 1),
                      rollback_ms_max=round(max(core.rollbacks), 1), co_tenant_codes=dict(codes))
    run.check(statuses == [503] * 5, f"sf-0's failed releases answered {statuses}, wanted 503 each")
    run.check(set(codes) == {200}, f"co-tenants got {dict(codes)} during the failures, wanted only 200")
    run.check(same, "memory after a failed append differs from memory before it")


def damaged_journal_repaired(run: Run) -> None:
    """A journal written by the service is damaged at the page level four ways (truncated, header
    and a leaf page overwritten, a page zeroed); each repair keeps a backup and every record it
    could read (replayed, or kept unreplayed past the gap), and the service starts on the
    repaired store knowing every job a record it kept names."""
    _log_to_file(run, run.log_dir / "core.log")
    path = run.log_dir / "journal.db"
    core = SchedulerCore(chaos_run.CLUSTER, store=str(path), snapshot_every=0)
    tok = {j: core.submit(_record(j, 100, 100, 2.0))["token"] for j in JOBS}
    history(core, tok, 10)
    core.shutdown()
    data = path.read_bytes()
    size = int.from_bytes(data[16:18], "big")
    damage = {"truncated": data[:len(data) // 2], "header": b"\xff" * 32 + data[32:],
              "leaf": data[:-3 * size + 700] + b"\x00" * 300 + data[-3 * size + 1000:],
              "zeroed": data[:5 * size] + bytes(size) + data[6 * size:]}
    for name, bad in damage.items():
        target = run.log_dir / f"{name}.db"
        target.write_bytes(bad)
        report = repair_store(str(target))
        started = SchedulerCore(None, store=str(target)) if report.kept else None
        jobs = set(started.state.jobs) if started else set()
        if started:
            started.shutdown()
        run.extras[f"repair_{name}"] = {"replayed": report.kept, "kept_unreplayed": report.salvaged,
                                        "lost": report.lost, "first_lost": report.first_lost}
        run.check((run.log_dir / f"{name}.db.damaged-1").exists(), f"{name}: no backup of the damaged file")
        named = _named_jobs(target) - set(report.unplaced)
        run.check(named <= jobs, f"{name}: jobs {sorted(named - jobs)} lost although a record of theirs survived")


def _named_jobs(path) -> set[str]:
    """Every job a record of the repaired journal names, replayed or kept unreplayed."""
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        texts = [t for (t,) in conn.execute("SELECT payload FROM records UNION ALL SELECT payload FROM salvaged")]
    finally:
        conn.close()
    return {job for text in texts for job in named_jobs(json.loads(text))}
