"""The job shim against an in-process group controller on the wall clock."""

from __future__ import annotations

import threading
import time

import pytest
from factories import make_group, make_job, most_running_at_once, run_threads

from rollmux.core.env import WallClockEnvironment
from rollmux.core.group_controller import GroupController
from rollmux.core.intra_group import IntraConfig
from rollmux.shim import JobShim, LocalPermitClient


@pytest.fixture
def plane():
    """Two jobs sharing one rollout node and one training node, served on a wall clock."""
    env = WallClockEnvironment()
    group = make_group([(make_job("a", tail_frac=0.3), (0,)), (make_job("b", tail_frac=0.3), (0,))], 1)
    ctl = GroupController(env, group, IntraConfig(warm_switch_s=0.0))
    client = LocalPermitClient(env, {"a": ctl, "b": ctl})
    thread = threading.Thread(target=env.serve, daemon=True)
    thread.start()
    yield client
    env.stop()
    thread.join(timeout=5)


def _run_job(shim: JobShim, log: list, iterations: int, lock: threading.Lock) -> None:
    for _ in range(iterations):
        for phase in ("rollout", "train"):
            with shim.phase(phase):
                with lock:
                    log.append(("start", shim.job_id, phase, time.perf_counter()))
                time.sleep(0.01)
                with lock:
                    log.append(("end", shim.job_id, phase, time.perf_counter()))


def test_phases_of_two_jobs_never_overlap_on_shared_nodes(plane):
    log, lock = [], threading.Lock()
    run_threads([(_run_job, (JobShim(j, plane), log, 4, lock)) for j in "ab"])
    for phase in ("rollout", "train"):
        assert most_running_at_once([(t, kind) for kind, _, ph, t in log if ph == phase]) == 1
    assert len(log) == 2 * 2 * 2 * 4


def test_round_robin_order_is_kept_on_the_shared_node(plane):
    log, lock = [], threading.Lock()
    run_threads([(_run_job, (JobShim(j, plane), log, 3, lock)) for j in "ab"])
    rollouts = [g.job_id for g in plane.grants if g.phase == "rollout"]
    assert rollouts == ["a", "b"] * 3


def test_waiting_job_has_not_onloaded(plane):
    events = []
    release_a = threading.Event()

    def hooks(job):
        return (lambda phase: events.append(("onload", job, phase)),
                lambda phase: events.append(("offload", job, phase)))

    a = JobShim("a", plane, *hooks("a"))
    b = JobShim("b", plane, *hooks("b"))

    def run_a():
        with a.phase("rollout"):
            release_a.wait(5)

    ta = threading.Thread(target=run_a)
    ta.start()
    while not any(e[:2] == ("onload", "a") for e in events):
        time.sleep(0.001)
    tb = threading.Thread(target=lambda: b.phase("rollout").__enter__() and None)
    tb.start()
    time.sleep(0.05)
    assert ("onload", "b", "rollout") not in events  # b is blocked and holds no state
    release_a.set()
    ta.join(5)
    tb.join(5)
    assert events.index(("offload", "a", "rollout")) < events.index(("onload", "b", "rollout"))


def test_decorator_form_runs_the_function_inside_a_permit(plane):
    shim = JobShim("a", plane)

    @shim.phase("train")
    def step(x):
        return x + 1

    with shim.phase("rollout"):
        pass
    assert step(1) == 2
    assert [t.phase for t in shim.history] == ["rollout", "train"]
    assert all(t.wait_s >= 0 and t.run_s >= 0 for t in shim.history)


def test_progress_past_the_threshold_migrates_the_tail_once(plane):
    a, b = JobShim("a", plane), JobShim("b", plane)
    ctl = plane.controllers["a"]
    with a.phase("rollout") as grant:
        assert grant.tail_share > 0  # b shares the node, so a's tail may migrate
        a.progress(50, 100)
        a.progress(85, 100)
        a.progress(90, 100)
        deadline = time.time() + 5
        while not ctl.tails_on(0) and time.time() < deadline:
            time.sleep(0.001)
        assert ctl.tails_on(0) == {"a": ctl.cfg.tail_worker_frac}
        b_in = threading.Event()
        tb = threading.Thread(target=lambda: (b.phase("rollout").__enter__(), b_in.set()))
        tb.start()
        assert b_in.wait(5)  # b starts beside a's migrated tail
    tb.join(5)


def test_unknown_phase_is_refused(plane):
    with pytest.raises(ValueError, match="unknown phase"):
        with JobShim("a", plane).phase("eval"):
            pass


class _Recorder:
    """A permit client that grants at once and records releases."""

    def __init__(self) -> None:
        self.released = []

    def acquire(self, job_id, phase):
        from rollmux.core.group_controller import Grant
        return Grant(0, job_id, phase, "rollout" if phase == "rollout" else "train", (0,), 0.0, 0.0, 0.0)

    def tail_started(self, job_id):
        pass

    def release(self, timings):
        self.released.append(timings)


def _boom(phase):
    raise OSError(f"cannot load {phase}")


def test_failed_onload_releases_the_permit_and_reraises():
    client = _Recorder()
    shim = JobShim("a", client, onload=lambda phase: phase == "rollout" and _boom(phase))
    with pytest.raises(OSError, match="cannot load rollout"):
        with shim.phase("rollout"):
            pytest.fail("the phase body must not run after a failed onload")
    assert [t.phase for t in client.released] == ["rollout"] and client.released[0].run_s == 0.0
    with shim.phase("train"):  # not "entered inside phase": the failed phase was left
        pass
    assert [t.phase for t in client.released] == ["rollout", "train"]


def test_failed_offload_still_releases_and_reraises():
    client = _Recorder()
    shim = JobShim("a", client, offload=_boom)
    with pytest.raises(OSError, match="cannot load train"):
        with shim.phase("train"):
            pass
    assert [t.phase for t in client.released] == ["train"]
