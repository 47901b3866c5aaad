"""Scenarios of `rollmux chaos` on a group's turns (core/turns.py): a member that stops asking for its turn
while its heartbeats go on (a deadlocked driver whose heartbeat thread lives on)."""

from __future__ import annotations

import threading
import time

from rollmux.harness.chaos.run import SERVE_ARGS, WAIT_S, Run

TURN_GRACE_S = 1.0  # the scenario's server: --turn-grace (phases of 5 ms: the grace is this)
WINDOW_S = 4.0      # each measured window


def _peer_iterations(run: Run, job_id: str, window_s: float) -> int:
    """The iterations `job_id` completes in the next `window_s` seconds (read from the server's status)."""
    before = run.status()["jobs"][job_id]["iterations"]
    time.sleep(window_s)  # the measuring window itself
    return run.status()["jobs"][job_id]["iterations"] - before


def idle_member(run: Run) -> None:
    """One member of a 2-member group stops asking for its turn, its heartbeats going on: its peer's
    iterations in a window while it is idle against a window of the same length while both behave (the
    peer must keep iterating: it waits at most the grace, once); the idle member asks again and iterates."""
    run.own_server("idle-member", SERVE_ARGS + ["--turn-grace", f"{TURN_GRACE_S:g}"])
    idle, peer = "idle-member", "idle-peer"
    ci, _ = run.submit(idle)
    cp, _ = run.submit(peer)
    if not run.same_group([idle, peer]):
        return
    parked, resume, done = threading.Event(), threading.Event(), threading.Event()

    def idle_goes_on(it: int) -> bool:
        if parked.is_set():  # between iterations: it holds nothing and asks for nothing; it beats
            resume.wait(WAIT_S)
        return not done.is_set()

    jobs = [run.thread_job(ci, idle, idle_goes_on), run.thread_job(cp, peer, lambda it: not done.is_set())]
    try:
        both = _peer_iterations(run, peer, WINDOW_S)
        parked.set()
        alone = _peer_iterations(run, peer, WINDOW_S)
        st = run.status()
        run.check(st["jobs"][idle]["status"] == "running", f"the idle member is {st['jobs'][idle]['status']} "
                  f"({st['jobs'][idle]['reason']}) within its lease: wanted running")
        idle_it = st["jobs"][idle]["iterations"]
        parked.clear()
        resume.set()  # it asks again: it rejoins its group's turns
        _, back = run.wait_status(lambda s: s["jobs"][idle]["iterations"] >= idle_it + 2, WAIT_S)
    finally:
        done.set()
        resume.set()
    run.join(jobs)
    run.extras.update(turn_grace_s=TURN_GRACE_S, window_s=WINDOW_S, peer_iterations_both_behave=both,
                      peer_iterations_member_idle=alone, idle_member_iterated_again=back)
    run.check(alone >= 2, f"the peer iterated {alone} times in {WINDOW_S:g}s while its group mate was idle "
                          f"({both} while both behaved): it was held hostage")
    run.check(back, f"the idle member did not iterate again after asking (it stayed at {idle_it})")
