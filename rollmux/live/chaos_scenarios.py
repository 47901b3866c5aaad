"""The scenarios of `rollmux chaos` (see `rollmux.live.chaos`), each a body run on a `Run`."""

from __future__ import annotations

import secrets
import threading
import time
from typing import Callable

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

from rollmux.live.chaos_checks import read_log, settled_state
from rollmux.live.chaos_job import PhaseLog, load_checkpoint
from rollmux.live.chaos_run import HEARTBEAT_TIMEOUT_S, ITERATIONS, PHASE_S, RESTART_GRACE_S, TIMINGS, WAIT_S, Run
from rollmux.live.service import AuthError, ServiceError
from rollmux.shim import PHASES

MIDPHASE_KILLS = 2         # service kills, back to back, while a job holds a permit
FLOW_KILLS = 3             # then service kills while the jobs flow


def _phase(run: Run, job_id: str, phase: str, token: str, log: PhaseLog, it: int,
           inside: Callable[[], None] | None = None) -> None:
    """Run one phase by hand: acquire, log, work (and `inside()`), release."""
    asked = time.monotonic()
    grant = run.ctx.call("acquire", job_id, phase, token, timeout_s=WAIT_S)
    seq = log.start(grant, it, time.monotonic() - asked)
    time.sleep(PHASE_S)
    if inside is not None:
        inside()
    log.end(seq)
    run.ctx.call("release", job_id, phase, TIMINGS, token)


def _release_again(run: Run, job_id: str, phase: str, token: str) -> tuple[dict, dict]:
    """Release a phase a second time (it must be refused); returns the statuses before and after."""
    before = run.ctx.status()
    run.refused("release", (job_id, phase, TIMINGS, token), ServiceError, "double release",
                f"{job_id}: second release of {phase}")
    return before, run.ctx.status()


def double_release(run: Run) -> None:
    """A second release of a phase, and a release of a phase not held, are refused and change nothing."""
    # A job alone in its group (SLO 1.0): the whole service is at rest around the second release.
    client, _ = run.submit("dr-lone", slo=1.0)
    tok = client.tokens["dr-lone"]
    log = PhaseLog(run.log_dir, "dr-lone")
    attempts = 0

    def release_not_held() -> None:  # while holding train
        nonlocal attempts
        before = run.ctx.status()
        run.refused("release", ("dr-lone", "rollout", TIMINGS, tok), ServiceError, "holds no",
                    "release of rollout while holding train")
        attempts += 1
        run.unchanged(before, run.ctx.status(), "the refused release")
    for phase in PHASES:
        _phase(run, "dr-lone", phase, tok, log, 0, release_not_held if phase == "train" else None)
        before, after = _release_again(run, "dr-lone", phase, tok)
        attempts += 1
        run.unchanged(before, after, f"the second release of {phase}")
        run.check(after["refused"] == before["refused"] + 1, "the refusal was not counted")
    log.close()
    lone = run.thread_job(client, "dr-lone", lambda it: it < ITERATIONS, start_iter=1)
    # Two jobs in one group: A releases twice while B keeps iterating.
    ca, _ = run.submit("dr-a")
    cb, _ = run.submit("dr-b")
    run.same_group(["dr-a", "dr-b"])
    stop = threading.Event()
    b = run.thread_job(cb, "dr-b", lambda it: it < 3 or not stop.is_set())
    tok = ca.tokens["dr-a"]
    log = PhaseLog(run.log_dir, "dr-a")
    for it in range(2):
        for phase in PHASES:
            _phase(run, "dr-a", phase, tok, log, it)
            before, after = _release_again(run, "dr-a", phase, tok)
            attempts += 1
            was, now = settled_state(before)["jobs"]["dr-a"], settled_state(after)["jobs"]["dr-a"]
            run.check(was == now, f"dr-a: the second release of {phase} changed it: {was} -> {now}")
    log.close()
    a = run.thread_job(ca, "dr-a", lambda it: it < ITERATIONS, start_iter=2)
    run.join([lone, a])
    stop.set()
    run.join([b])
    run.extras["refused_releases"] = attempts


def forged_token(run: Run) -> None:
    """Calls for a job with a forged token, another job's token or none are refused, counted, and change nothing."""
    ctx = run.ctx
    cv, _ = run.submit("forge-victim")
    co, _ = run.submit("forge-other")
    run.same_group(["forge-victim", "forge-other"])
    holding, resume = threading.Event(), threading.Event()

    def hold(it: int, phase: str) -> None:
        if it == 1 and phase == "rollout":
            holding.set()
            resume.wait(WAIT_S)
    jobs = [run.thread_job(cv, "forge-victim", lambda it: it < ITERATIONS, hold),
            run.thread_job(co, "forge-other", lambda it: it < ITERATIONS)]
    try:
        if not run.check(holding.wait(WAIT_S), "the victim never got its rollout permit"):
            return
        before = run.quiesce(["forge-other"])
        if before is None:
            return
        forged, other = "forged-" + secrets.token_urlsafe(24), co.tokens["forge-other"]
        attempts = 0
        for label, tok in (("a forged token", forged), ("another job's token", other), ("no token", None)):
            for method, args in (("acquire", ("forge-victim", "train", tok)),
                                 ("release", ("forge-victim", "rollout", TIMINGS, tok)),
                                 ("heartbeat", ("forge-victim", tok)),
                                 ("finish", ("forge-victim", tok))):
                run.refused(method, args, AuthError, "wrong token", f"{method} with {label}")
                attempts += 1
        after = ctx.status()
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
    reclaimed, its group mate iterating; restarted, it resumes from its checkpoint and finishes."""
    hold_iter = 3

    def body(run: Run) -> None:
        ctx = run.ctx
        victim, other = f"kill-{phase}-victim", f"kill-{phase}-other"
        co, _ = run.submit(other)
        stop = threading.Event()
        mate = run.thread_job(co, other, lambda it: it < 3 or not stop.is_set())
        try:
            proc = run.process_job(victim, ITERATIONS, hold_phase=phase, hold_iter=hold_iter)
            if run.wait_event(proc, victim, "holding") is None:
                return
            run.same_group([victim, other])
            time.sleep(0.2)  # mid-phase
            held = ctx.status()["jobs"][victim]["held"]
            run.check(held == [phase], f"the victim holds {held} at the kill, wanted [{phase!r}]")
            t_kill = run.kill(proc, victim)
            st, ok = run.wait_status(lambda s: s["jobs"][victim]["status"] != "running",
                                     HEARTBEAT_TIMEOUT_S + 15)
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
            # The job's launcher restarts it: it submits again and resumes from its checkpoint.
            ckpt = load_checkpoint(run.checkpoint(victim))
            run.check(ckpt == hold_iter, f"checkpoint at the kill: {ckpt}, wanted {hold_iter}")
            again = run.process_job(victim, ITERATIONS)
            sub = run.wait_event(again, victim, "submitted")
            fin = run.wait_event(again, victim, "finished")
            if sub is None or fin is None:
                return
            run.check(sub["resumed_from"] == ckpt, f"resumed from {sub['resumed_from']}, checkpoint {ckpt}")
            run.check(again.wait(WAIT_S) == 0, f"the restarted job exited with {again.returncode}")
            run.check(fin["iterations"] == ITERATIONS, f"the restarted job ended at {fin['iterations']}")
            counted = ctx.status()["jobs"][victim]["iterations"]
            run.check(counted == ITERATIONS - ckpt,
                      f"the service counted {counted} iterations of the resubmitted job, it did {ITERATIONS - ckpt}")
            run.extras.update(resumed_from=sub["resumed_from"], replaced_case=sub["case"])
        finally:
            stop.set()
            run.join([mate])
    return body


def _kill_service(run: Run) -> tuple[float, dict | None]:
    """Kill the actor's process (Ray restarts it; the constructor replays the journal), wherever the
    jobs are in their heartbeat cycle. Returns (when, the new instance's status or None)."""
    old_pid = run.ctx.pid()
    t = time.monotonic()
    ray.kill(run.ctx.handle, no_restart=False)
    deadline = t + WAIT_S
    while time.monotonic() < deadline:
        try:
            if run.ctx.pid() != old_pid:
                return t, run.ctx.status()
        except (RayActorError, ActorUnavailableError, GetTimeoutError):
            pass
        time.sleep(0.05)
    run.errors.append(f"the service did not come back within {WAIT_S:.0f} s")
    return t, None


def service_restart(run: Run) -> None:
    """The service killed while a job holds a permit (back to back), then while jobs flow: after every
    restart the state is the one before, nobody else gets the held nodes, and every job finishes."""
    ctx = run.ctx
    ids = [f"restart-{k}" for k in range(3)]
    clients = [run.submit(j)[0] for j in ids]
    run.same_group(ids)
    holder = ids[0]
    holding, resume, stop = threading.Event(), threading.Event(), threading.Event()

    def hold(it: int, phase: str) -> None:
        if it == 2 and phase == "rollout" and not holding.is_set():
            holding.set()
            resume.wait(WAIT_S)
    jobs = [run.thread_job(c, j, lambda it: it < 5 or not stop.is_set(), hold if j == holder else None)
            for c, j in zip(clients, ids)]
    try:
        if not run.check(holding.wait(WAIT_S), f"{holder} never got its rollout permit"):
            return
        before = run.quiesce(ids[1:])
        if before is None:
            return
        run.check(before["jobs"][holder]["held"] == ["rollout"], f"{holder} holds {before['jobs'][holder]['held']}")
        # Mid-phase: the holder runs its rollout and only sends heartbeats; the others wait for its node.
        # Each kill comes as soon as the last restart is up, inside its grace period.
        for k in range(MIDPHASE_KILLS):
            t0, after = _kill_service(run)
            if after is None:
                return
            run.extras.setdefault("restart_s", round(time.monotonic() - t0, 2))
            run.extras["recovered_records"] = after["recovered_records"]
            if not run.unchanged(before, after, f"restart {k + 1}"):
                return
        # Past the last restart's grace period and heartbeat timeout: the waiting jobs have retried on the
        # new instance, the holder (alive, beating to it) must still hold its permit, nobody has its node.
        time.sleep(RESTART_GRACE_S + HEARTBEAT_TIMEOUT_S + 0.5)
        later = ctx.status()
        if not run.unchanged(after, later, f"after {MIDPHASE_KILLS} restarts, with {holder} still in its rollout, "
                                           f"the wait past the grace period"):
            return
        resume.set()
        # More kills while every job is flowing (releases and acquires in flight).
        prev = later
        for k in range(FLOW_KILLS + 1):
            _, ok = run.wait_status(lambda s: s["grants"] >= prev["grants"] + 12, 20)
            if not run.check(ok, "the jobs did not resume after the last restart") or k == FLOW_KILLS:
                break
            _, prev = _kill_service(run)
            if prev is None:
                return
        run.extras.update(restarts=MIDPHASE_KILLS + FLOW_KILLS, client_retries=sum(c.retries for c in clients))
    finally:
        resume.set()
        stop.set()
        run.join(jobs)


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
        barrier.wait(WAIT_S)
        time.sleep(seconds / 2)
        st = run.ctx.status()
        groups = [g for g in st["groups"] if any(m in ids for m in g["members"])]
        run.extras["groups"] = len(groups)
        run.join(threads, seconds + WAIT_S)
        starts = [e for e in read_log(run.log_dir) if e["ev"] == "start"
                  and window["start"] <= e["t"] <= window["end"]]
        import numpy as np
        lat = np.array([e["wait_s"] * 1e3 for e in starts])
        run.extras.update(jobs=jobs, seconds=seconds, permits=len(starts),
                          permits_per_s=round(len(starts) / seconds, 1),
                          permit_p50_ms=round(float(np.percentile(lat, 50)), 3) if lat.size else None,
                          permit_p99_ms=round(float(np.percentile(lat, 99)), 3) if lat.size else None)
    return body


def plan(jobs: int, seconds: float) -> list[tuple[str, Callable[[Run], None]]]:
    """Every scenario, (name, body), in the order they run (the restart after the kills: its replay covers them)."""
    return [("double release", double_release), ("forged token", forged_token),
            ("job killed mid-rollout", killed("rollout")), ("job killed mid-training", killed("train")),
            ("service restart mid-phase", service_restart), (f"{jobs} jobs for {seconds:g} s", load(jobs, seconds))]
