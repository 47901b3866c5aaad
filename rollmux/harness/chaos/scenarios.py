"""The job-level scenarios of `rollmux chaos` (see `rollmux.harness.chaos.command`), each a body run on a `Run`,
and the plan of every scenario (the server-level ones live in `faults` and `waiting`)."""

from __future__ import annotations

import signal
import threading
import time
from typing import Callable

from rollmux.harness.chaos import run as chaos_run
from rollmux.harness.chaos.checks import percentiles_ms, read_log, settled_state, state_diff, without
from rollmux.harness.chaos.job import PhaseLog, load_checkpoint
from rollmux.harness.chaos.run import Run, output_tail, random_token
from rollmux.live.client import HttpPermitClient
from rollmux.shim import ITERATION, PhaseTimings

MIDPHASE_KILLS = 2         # server kills, back to back, while a job holds a permit
FLOW_KILLS = 3             # then server kills while the jobs flow


def _phase(client: HttpPermitClient, job_id: str, phase: str, log: PhaseLog, it: int,
           inside: Callable[[dict], None] | None = None) -> dict:
    """Run one phase by hand: acquire, log, work (and `inside(grant)`), release; returns the grant."""
    asked = time.monotonic()
    grant = client.acquire_dict(job_id, phase)
    seq = log.start(grant, it, time.monotonic() - asked)
    time.sleep(chaos_run.PHASE_S)
    if inside is not None:
        inside(grant)
    log.end(seq)
    client.release(PhaseTimings(job_id, phase, 0.0, 0.0, chaos_run.PHASE_S, 0.0, grant["epoch"]))
    return grant


def _release_again(run: Run, job_id: str, phase: str, token: str, grant_no: int) -> tuple[dict, dict]:
    """Release a phase a second time (it must be refused); returns the statuses before and after."""
    before = run.status()
    run.refused("POST", f"/v1/jobs/{job_id}/release", token,
                {"phase": phase, "timings": chaos_run.TIMINGS, "grant_no": grant_no}, 409, "double release",
                f"{job_id}: second release of {phase}")
    return before, run.status()


def double_release(run: Run) -> None:
    """A second release of a phase, and a release of a phase not held, are refused and change nothing."""
    # A job alone in its group (SLO 1.0): the whole server is at rest around the second release.
    client, placed = run.submit("dr-lone", slo=1.0)
    tok = placed["token"]
    log = PhaseLog(run.log_dir, "dr-lone")
    attempts = 0

    def release_not_held(grant: dict) -> None:  # while holding train
        nonlocal attempts
        before = run.status()
        run.refused("POST", "/v1/jobs/dr-lone/release", tok, {"phase": "rollout", "timings": chaos_run.TIMINGS}, 409,
                    "holds no", "release of rollout while holding train")
        attempts += 1
        run.unchanged(before, run.status(), "the refused release")
    for phase in ITERATION:
        grant = _phase(client, "dr-lone", phase, log, 0, release_not_held if phase == "train" else None)
        before, after = _release_again(run, "dr-lone", phase, tok, grant["grant_no"])
        attempts += 1
        run.unchanged(before, after, f"the second release of {phase}")
        run.check(after["refused"] == before["refused"] + 1, "the refusal was not counted")
    log.close()
    lone = run.thread_job(client, "dr-lone", lambda it: it < chaos_run.ITERATIONS, start_iter=1)
    # Two jobs in one group: A releases twice while B keeps iterating.
    ca, pa = run.submit("dr-a")
    cb, _ = run.submit("dr-b")
    run.same_group(["dr-a", "dr-b"])
    stop = threading.Event()
    b = run.thread_job(cb, "dr-b", lambda it: it < 3 or not stop.is_set())
    tok = pa["token"]
    log = PhaseLog(run.log_dir, "dr-a")
    for it in range(2):
        for phase in ITERATION:
            grant = _phase(ca, "dr-a", phase, log, it)
            before, after = _release_again(run, "dr-a", phase, tok, grant["grant_no"])
            attempts += 1
            was, now = settled_state(before)["jobs"]["dr-a"], settled_state(after)["jobs"]["dr-a"]
            run.check(was == now, f"dr-a: the second release of {phase} changed it: {was} -> {now}")
    log.close()
    a = run.thread_job(ca, "dr-a", lambda it: it < chaos_run.ITERATIONS, start_iter=2)
    run.join([lone, a])
    stop.set()
    run.join([b])
    run.extras["refused_releases"] = attempts


def forged_token(run: Run) -> None:
    """Calls for a job with a forged token (401), another job's token (403) or none (401) are refused,
    counted, and change nothing."""
    cv, pv = run.submit("forge-victim")
    co, po = run.submit("forge-other")
    run.same_group(["forge-victim", "forge-other"])
    holding, resume = threading.Event(), threading.Event()

    def hold(it: int, phase: str) -> None:
        if it == 1 and phase == "rollout":
            holding.set()
            resume.wait(chaos_run.WAIT_S)
    jobs = [run.thread_job(cv, "forge-victim", lambda it: it < chaos_run.ITERATIONS, hold),
            run.thread_job(co, "forge-other", lambda it: it < chaos_run.ITERATIONS)]
    try:
        if not run.check(holding.wait(chaos_run.WAIT_S), "the victim never got its rollout permit"):
            return
        before = run.quiesce(["forge-other"], "rollout")
        if before is None:
            return
        forged, other = "forged-" + random_token(run.ctx.rng), po["token"]
        attempts = 0
        for label, tok, status in (("a forged token", forged, 401), ("another job's token", other, 403),
                                   ("no token", None, 401)):
            for route, body in (("acquire", {"phase": "train", "wait_s": 0}),
                                ("release", {"phase": "rollout", "timings": chaos_run.TIMINGS}),
                                ("heartbeat", {}), ("finish", {})):
                run.refused("POST", f"/v1/jobs/forge-victim/{route}", tok, body, status, None, f"{route} with {label}")
                attempts += 1
        after = run.status()
        run.unchanged(before, after, "the refused calls")
        run.check(after["refused"] - before["refused"] == attempts,
                  f"status counts {after['refused'] - before['refused']} refusals, wanted {attempts}")
        run.check(after["jobs"]["forge-victim"]["held"] == ["rollout"], "the victim lost its permit")
        run.extras["refused_calls"] = attempts
    finally:
        resume.set()
        run.join(jobs)


def killed(phase: str) -> Callable[[Run], None]:
    """A job process SIGKILLed while it holds `phase`: failed on missed heartbeats, its permit
    reclaimed, its group mate iterating; restarted and resubmitted, it resumes from its checkpoint
    and finishes."""
    hold_iter = 3

    def body(run: Run) -> None:
        victim, other = f"kill-{phase}-victim", f"kill-{phase}-other"
        co, _ = run.submit(other)
        stop = threading.Event()
        mate = run.thread_job(co, other, lambda it: it < 3 or not stop.is_set())
        try:
            proc = run.process_job(victim, chaos_run.ITERATIONS, hold_phase=phase, hold_iter=hold_iter)
            if proc is None or run.wait_event(proc, victim, "holding") is None:
                return
            run.same_group([victim, other])
            held = run.status()["jobs"][victim]["held"]  # mid-phase: it logged `holding` inside the phase
            run.check(held == [phase], f"the victim holds {held} at the kill, wanted [{phase!r}]")
            t_kill = run.kill(proc, victim)
            st, ok = run.wait_status(lambda s: s["jobs"][victim]["status"] != "running",
                                     chaos_run.HEARTBEAT_TIMEOUT_S + 15)
            detected = time.monotonic() - t_kill
            v = st["jobs"][victim]
            if not run.check(ok and v["status"] == "failed" and "heartbeat" in (v["reason"] or ""),
                             f"the killed job is {v['status']} ({v['reason']}) {detected:.1f} s after the kill"):
                return
            run.killed[victim] = v["reason"]
            run.extras["detected_after_s"] = round(detected, 2)
            run.check(v["held"] == [] and not any(victim in g["members"] for g in st["groups"]),
                      f"the failed job still holds {v['held']} or is still a group member")
            it0 = st["jobs"][other]["iterations"]
            _, ok = run.wait_status(lambda s: s["jobs"][other]["iterations"] >= it0 + 2, 15)
            run.check(ok, f"{other} stopped iterating after the kill (at {it0})")
            # The job's launcher restarts it: it submits it again and it resumes from its checkpoint.
            ckpt = load_checkpoint(run.checkpoint(victim))
            run.check(ckpt == hold_iter, f"checkpoint at the kill: {ckpt}, wanted {hold_iter}")
            again = run.process_job(victim, chaos_run.ITERATIONS)
            if again is None:
                return
            sub = run.wait_event(again, victim, "submitted")
            fin = run.wait_event(again, victim, "finished")
            if sub is None or fin is None:
                return
            run.check(sub["resumed_from"] == ckpt, f"resumed from {sub['resumed_from']}, checkpoint {ckpt}")
            run.check(again.wait(chaos_run.WAIT_S) == 0, f"the restarted job exited with {again.returncode}")
            run.check(fin["iterations"] == chaos_run.ITERATIONS, f"the restarted job ended at {fin['iterations']}")
            counted = run.status()["jobs"][victim]["iterations"]
            run.check(counted == chaos_run.ITERATIONS - ckpt,
                      f"the server counted {counted} iterations of the resubmitted job, it did {chaos_run.ITERATIONS - ckpt}")
            run.extras.update(resumed_from=sub["resumed_from"], replaced_case=sub["case"])
        finally:
            stop.set()
            run.join([mate])
    return body


def _kill_server(run: Run) -> tuple[float, dict | None]:
    """`kill -9` the `rollmux serve` process, wherever the jobs are in their heartbeat cycle, and start it
    again on the same store and port (it replays the journal). Returns (when, the new instance's status)."""
    ctx = run.ctx
    old = ctx.server
    t = time.monotonic()
    rc = old.kill()
    run.check(rc == -signal.SIGKILL, f"the killed server exited with {rc}, wanted {-signal.SIGKILL} (SIGKILL)")
    try:
        ctx.start(port=old.port)
    except RuntimeError as exc:
        run.errors.append(f"the server did not come back on port {old.port}: {exc}")
        return t, None
    return t, ctx.status()


def service_restart(run: Run) -> None:
    """The server killed (-9) while a job holds a permit (back to back), then while jobs flow, and restarted
    on its store and port: after every restart the state is the one before, nobody else gets the held
    nodes, and every job finishes (its calls retried through the restarts)."""
    ids = [f"restart-{k}" for k in range(3)]
    clients = [run.submit(j)[0] for j in ids]
    run.same_group(ids)
    holder = ids[0]
    # A canary that beats until the last kill, then falls silent: its failure for missed heartbeats marks
    # the moment the last restart's grace period and one heartbeat timeout are over.
    canary_client, _ = run.submit("restart-canary", slo=1.0)
    run.jobs.remove("restart-canary")  # it is meant to fail
    # Its first call, now: a job that never called is judged by its start-up timeout, not its heartbeats
    # (its background beats may all fall between the kills).
    canary_client.heartbeat("restart-canary")
    holding, resume, stop = threading.Event(), threading.Event(), threading.Event()

    def hold(it: int, phase: str) -> None:
        if it == 2 and phase == "rollout" and not holding.is_set():
            holding.set()
            resume.wait(2 * chaos_run.WAIT_S)
    jobs = [run.thread_job(c, j, lambda it: it < 5 or not stop.is_set(), hold if j == holder else None)
            for c, j in zip(clients, ids)]
    try:
        if not run.check(holding.wait(chaos_run.WAIT_S), f"{holder} never got its rollout permit"):
            return
        before = run.quiesce(ids[1:], "rollout")
        if before is None:
            return
        run.check(before["jobs"][holder]["held"] == ["rollout"], f"{holder} holds {before['jobs'][holder]['held']}")
        after, restarts = _kills_mid_phase(run, before, canary_client)
        if after is None:
            return
        later = _past_the_grace_period(run, after, holder)
        if later is None:
            return
        resume.set()
        more = _kills_while_flowing(run, later)
        if more is None:
            return
        run.extras.update(restarts=restarts + more, client_retries=sum(c.retries for c in clients))
    finally:
        resume.set()
        stop.set()
        run.join(jobs, 2 * chaos_run.WAIT_S)
        if run.ctx.server.proc.poll() is not None:
            run.errors.append(f"the server is down: {output_tail(run.ctx.server.output())}")


def _kills_mid_phase(run: Run, before: dict, canary: HttpPermitClient) -> tuple[dict | None, int]:
    """Mid-phase: the holder runs its rollout and only sends heartbeats; the others wait for its node. Each
    kill comes as soon as the last restart is up, inside its grace period; the canary falls silent before
    the last one. Returns (the last restart's status, restarts), or (None, restarts) if the state changed
    or the server did not come back."""
    after, restarts = before, 0
    for k in range(MIDPHASE_KILLS):
        if k == MIDPHASE_KILLS - 1:
            canary.close()  # silent from now on
        t0, after = _kill_server(run)
        if after is None:
            return None, restarts
        restarts += 1
        run.extras.setdefault("restart_s", round(time.monotonic() - t0, 2))
        run.extras["recovered_records"] = after["recovered_records"]
        if not run.unchanged(before, after, f"restart {k + 1}"):
            return None, restarts
    return after, restarts


def _past_the_grace_period(run: Run, after: dict, holder: str) -> dict | None:
    """Wait for the canary's failure: past the last restart's grace period and heartbeat timeout. By then
    the waiting jobs have retried on the new instance; the holder (alive, beating to it) must still hold
    its permit and nobody may have its node. The status then, or None if not so."""
    later, ok = run.wait_status(lambda s: s["jobs"]["restart-canary"]["status"] != "running", chaos_run.WAIT_S)
    c = later["jobs"]["restart-canary"]
    if not run.check(ok and c["status"] == "failed" and "heartbeat" in (c["reason"] or ""),
                     f"the silent canary is {c['status']} ({c['reason']}) after the restarts"):
        return None
    gone = {"restart-canary"}
    if not run.check(without(settled_state(after), gone) == without(settled_state(later), gone),
                     f"after {MIDPHASE_KILLS} restarts, with {holder} still in its rollout, the wait past the "
                     f"grace period changed the state: "
                     f"{state_diff(without(settled_state(after), gone), without(settled_state(later), gone))}"):
        return None
    return later


def _kills_while_flowing(run: Run, later: dict) -> int | None:
    """More kills while every job is flowing (releases and acquires in flight), each once the jobs made
    12 more grants. Returns the restarts, or None if the server did not come back."""
    prev, restarts = later, 0
    for k in range(FLOW_KILLS + 1):
        _, ok = run.wait_status(lambda s: s["grants"] >= prev["grants"] + 12, 20)
        if not run.check(ok, "the jobs did not resume after the last restart") or k == FLOW_KILLS:
            break
        _, prev = _kill_server(run)
        if prev is None:
            return None
        restarts += 1
    return restarts


def load(jobs: int, seconds: float) -> Callable[[Run], None]:
    """`jobs` jobs acquire and release for `seconds`: permit latency p50/p99 and throughput."""
    def body(run: Run) -> None:
        ids = [f"load-{k:03d}" for k in range(jobs)]
        clients = [run.submit(j)[0] for j in ids]
        barrier = threading.Barrier(jobs + 1)
        window: dict[str, float] = {}
        threads = [run.thread_job(c, j, lambda it: time.monotonic() < window["end"], barrier=barrier)
                   for c, j in zip(clients, ids)]
        window["start"] = time.monotonic() + 0.1
        window["end"] = window["start"] + seconds
        barrier.wait(chaos_run.WAIT_S)
        time.sleep(seconds / 2)
        st = run.status()
        groups = [g for g in st["groups"] if any(m in ids for m in g["members"])]
        run.extras["groups"] = len(groups)
        run.join(threads, seconds + chaos_run.WAIT_S)
        starts = [e for e in read_log(run.log_dir) if e["ev"] == "start"
                  and window["start"] <= e["t"] <= window["end"]]
        p50, p99 = percentiles_ms([e["wait_s"] for e in starts])
        run.extras.update(jobs=jobs, seconds=seconds, permits=len(starts),
                          permits_per_s=round(len(starts) / seconds, 1), permit_p50_ms=p50, permit_p99_ms=p99)
    return body


def plan(jobs: int, seconds: float, waiting: int,
         p99_limit_ms: float | None = 200.0) -> list[tuple[str, Callable[[Run], None]]]:
    """Every scenario, (name, body), in the order they run (the restart after the kills: its replay covers
    them; the second server and the route checks against the restarted one). `p99_limit_ms`: the waiting
    jobs' latency limit (None: measured, not judged)."""
    from rollmux.harness.chaos.door_faults import header_flood
    from rollmux.harness.chaos.faults import auth_routes, hung_job, second_server, torn_journal
    from rollmux.harness.chaos.input_faults import poisoned_timing
    from rollmux.harness.chaos.journal_faults import journal_failures
    from rollmux.harness.chaos.store_faults import append_failure_costs_one_call, damaged_journal_repaired
    from rollmux.harness.chaos.turn_faults import idle_member
    from rollmux.harness.chaos.waiting import waiting_jobs
    return [("double release", double_release), ("forged token", forged_token),
            ("job killed mid-rollout", killed("rollout")), ("job killed mid-training", killed("train")),
            ("service restart mid-phase", service_restart), ("second server on one store", second_server),
            ("auth on every route", auth_routes), ("hung job", hung_job),
            ("journal append failures", journal_failures), ("torn journal", torn_journal),
            ("header flood", header_flood), ("idle member", idle_member), ("poisoned timing", poisoned_timing),
            ("append failure costs one call", append_failure_costs_one_call),
            ("damaged journal repaired", damaged_journal_repaired),
            (f"{jobs} jobs for {seconds:g} s", load(jobs, seconds)),
            (f"{waiting} waiting jobs", waiting_jobs(waiting, p99_limit_ms))]
