"""The job shim against an in-process group controller on the wall clock."""

from __future__ import annotations

import threading
import time

import pytest
from factories import GrantAtOnce, intra, make_group, make_job, most_running_at_once, run_threads

from rollmux.core.config import IntraConfig
from rollmux.core.env import WallClockEnvironment
from rollmux.core.group_controller import GroupController
from rollmux.shim import JobShim, LocalPermitClient, run_init, run_iteration


@pytest.fixture
def plane():
    """Two jobs sharing one rollout node and one training node, served on a wall clock."""
    env = WallClockEnvironment()
    group = make_group([(make_job("a", tail_frac=0.3), (0,)), (make_job("b", tail_frac=0.3), (0,))], 1)
    ctl = GroupController(env, group, intra(warm_switch_s=0.0))
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


def _boom(phase):
    raise OSError(f"cannot load {phase}")


def test_failed_onload_releases_the_permit_and_reraises():
    client = GrantAtOnce()
    shim = JobShim("a", client, onload=lambda phase: phase == "rollout" and _boom(phase))
    with pytest.raises(OSError, match="cannot load rollout"):
        with shim.phase("rollout"):
            pytest.fail("the phase body must not run after a failed onload")
    assert [t.phase for t in client.released] == ["rollout"] and client.released[0].run_s == 0.0
    with shim.phase("train"):  # not "entered inside phase": the failed phase was left
        pass
    assert [t.phase for t in client.released] == ["rollout", "train"]


def test_failed_offload_still_releases_and_reraises():
    client = GrantAtOnce()
    shim = JobShim("a", client, offload=_boom)
    with pytest.raises(OSError, match="cannot load train"):
        with shim.phase("train"):
            pass
    assert [t.phase for t in client.released] == ["train"]


# -- long-tail migration, init, sync and the decorator form -------------------------------------

def _serve(cfg: IntraConfig, tail: float = 0.3):
    """a and b sharing one rollout and one training node, on a wall clock (stop with env.stop)."""
    env = WallClockEnvironment()
    group = make_group([(make_job("a", tail_frac=tail), (0,)), (make_job("b", tail_frac=tail), (0,))], 1)
    ctl = GroupController(env, group, cfg)
    threading.Thread(target=env.serve, daemon=True).start()
    return env, ctl, LocalPermitClient(env, {"a": ctl, "b": ctl})


def test_the_tail_hook_runs_before_the_scheduler_hands_the_slots_on():
    env, ctl, client = _serve(intra(warm_switch_s=0.0, tail_worker_frac=0.25))
    seen = []
    a = JobShim("a", client, on_tail=lambda g: seen.append((g.kept(0), ctl.tails_on(0))))
    b = JobShim("b", client)
    got_b, b_in = [], threading.Event()
    try:
        with a.phase("rollout"):
            tb = threading.Thread(target=lambda: (got_b.append(b.phase("rollout").__enter__()), b_in.set()))
            tb.start()
            assert not a.progress(3, 10) and not a.tail_migrated
            assert a.progress(8, 10) and a.tail_migrated
            assert not a.progress(9, 10)           # once per rollout
            assert seen == [((0,), {})]            # the hook ran while a still held every slot
            assert b_in.wait(5)                    # b starts beside a's tail ...
            assert got_b[0].slots(0) == (1, 2, 3)  # ... on the slots a gave up
        assert a.migrations == 1
    finally:
        env.stop()
        tb.join(5)


def _stuck_then_respond(job, stop: threading.Event):
    """A straggler: does nothing until its slot is told to stop (`stop`, set when the tail gives the
    slot up), then (aborted at once) returns None."""
    def respond(it, b, abort):
        stop.wait(30)
        return job.respond(it, b, abort=abort)
    return respond


def _rollout(shim, respond, it: int, n: int, tails: list, hook: dict, stop: dict[int, threading.Event]) -> list:
    """The demo's rollout loop with threads as workers: responses dealt to the permit's slots;
    on a tail, the slots given up stop (their `stop` event is set) and their responses are
    recomputed on the kept slots."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
    active, queue, busy, done = list(shim.grant.slots(0)), list(range(n)), {}, {}
    pools = {s: ThreadPoolExecutor(1) for s in active}

    def give_up(grant):
        gone = [s for s in active if s not in grant.kept(0)]
        for s in gone:
            stop[s].set()
        for s in gone:
            if s in busy:
                fut, b = busy.pop(s)
                part = fut.result(timeout=30)
                if part is None:
                    queue.insert(0, b)
                    tails.append(b)
                else:
                    done[b] = part
        active[:] = [s for s in active if s in grant.kept(0)]
    hook["on_tail"] = give_up
    while len(done) < n:
        for s in active:
            if s not in busy and queue:
                b = queue.pop(0)
                busy[s] = (pools[s].submit(respond[s], it, b, stop[s].is_set), b)
        wait([f for f, _ in busy.values()], return_when=FIRST_COMPLETED, timeout=30)
        for s in [s for s, (f, _) in busy.items() if f.done()]:
            f, b = busy.pop(s)
            done[b] = f.result()
        shim.progress(len(done), n)
    for p in pools.values():
        p.shutdown()
    return [done[b] for b in range(n)]


def test_a_migrated_tail_is_recomputed_and_the_weights_match_a_solo_run():
    torch = pytest.importorskip("torch")
    from rollmux.jobs.grpo import GRPOJob, make_config, run_solo

    cfg = make_config("heavy", seed=2)
    env, ctl, client = _serve(intra(warm_switch_s=0.0, tail_worker_frac=0.5))
    trainer, workers = GRPOJob(cfg), [GRPOJob(cfg), GRPOJob(cfg)]
    hook: dict = {}
    shim, tails, b_slots = JobShim("a", client, on_tail=lambda g: hook["on_tail"](g)), [], []
    try:
        for it in range(2):
            stop = {0: threading.Event(), 1: threading.Event()}  # per worker slot
            respond = [workers[0].respond, _stuck_then_respond(workers[1], stop[1])]
            with shim.phase("rollout"):
                # slot 1 is stuck on its response until the tail migrates and stops it
                parts = _rollout(shim, respond, it, cfg.prompts_per_batch, tails, hook, stop)
                b = JobShim("b", client)
                with b.phase("rollout") as g:  # b runs beside a's tail, on the slot a gave up
                    b_slots.append(g.slots(0))
            with shim.phase("train"):
                trainer.train(trainer.assemble(it, parts), it)
            with shim.phase("sync"):
                for w in workers:
                    w.set_rollout_weights(trainer.sync())
            with b.phase("train"):
                pass
    finally:
        env.stop()
    solo = GRPOJob(cfg)
    run_solo(solo, 2)
    assert shim.migrations == 2 and len(tails) == 2  # one response aborted and recomputed per iteration
    assert b_slots == [(1,), (1,)]
    assert all(torch.equal(v, solo.weights()[k]) for k, v in trainer.weights().items())


def test_init_is_gated_and_offloads_but_never_onloads():
    env, ctl, client = _serve(intra(warm_switch_s=0.0))
    events = []
    hooks = dict(onload=lambda ph: events.append(("onload", ph)), offload=lambda ph: events.append(("offload", ph)))
    a, b = JobShim("a", client), JobShim("b", client, **hooks)
    b_done = threading.Event()

    def init_b():
        with b.phase("init") as g:
            events.append(("init", g.nodes, g.train_held))
        b_done.set()
    try:
        with a.phase("rollout"):
            tb = threading.Thread(target=init_b)
            tb.start()
            assert not b_done.wait(0.2)  # a holds a node of b's: b's init waits
        assert b_done.wait(5)
        assert events == [("init", (0,), (0,)), ("offload", "rollout"), ("offload", "train")]  # both pools
    finally:
        env.stop()
        tb.join(5)


def test_sync_is_granted_while_others_hold_the_nodes_and_is_measured():
    env, ctl, client = _serve(intra(warm_switch_s=0.0))
    events = []
    a = JobShim("a", client)
    b = JobShim("b", client, onload=lambda ph: events.append(ph), offload=lambda ph: events.append(ph))
    try:
        with a.phase("rollout"):
            with b.phase("sync") as g:  # a holds both shared nodes' turn: sync needs none
                assert g.nodes == () and g.pool == "link"
                time.sleep(0.01)
        assert events == []  # no hooks around a sync
        assert b.history[-1].phase == "sync" and b.history[-1].run_s >= 0.01
    finally:
        env.stop()


def test_the_decorator_form_acts_for_the_job_set_once(monkeypatch):
    import rollmux
    import rollmux.shim
    monkeypatch.setattr(rollmux.shim, "_process_shim", None)  # no context left by another test
    monkeypatch.setattr(rollmux.shim._current, "shim", None)
    env, ctl, client = _serve(intra(warm_switch_s=0.0))
    events = []

    @rollmux.phase("rollout")  # decorated before the job's context exists
    def generate(x):
        events.append(("rollout", rollmux.current().grant.phase))
        return x * 2

    @rollmux.phase("train")
    def step():
        events.append(("train", rollmux.current().grant.phase))
    try:
        with pytest.raises(RuntimeError, match="rollmux.init"):
            generate(1)
        shim = rollmux.init("a", client, offload=lambda ph: events.append(("offload", ph)))
        assert generate(3) == 6
        step()
        with rollmux.phase("sync"):
            pass
        assert [t.phase for t in shim.history] == ["rollout", "train", "sync"]
        assert events == [("rollout", "rollout"), ("offload", "rollout"), ("train", "train"), ("offload", "train")]
    finally:
        env.stop()
    with pytest.raises(ValueError, match="unknown phase"):
        rollmux.phase("eval")


# -- the job protocol: one object, hooks by pool -------------------------------------------------

class PoolJob:
    """A `rollmux.shim.Job` whose hooks index its state by pool (a phase name would be a KeyError)."""

    def __init__(self) -> None:
        self.live = {"rollout": True, "train": True}
        self.events: list = []

    def onload(self, pool):
        assert not self.live[pool], f"{pool} onloaded twice"
        self.live[pool] = True
        self.events.append(("onload", pool))

    def offload(self, pool):
        self.live[pool] = False
        self.events.append(("offload", pool))

    def host_bytes(self):
        return {"rollout": 3, "train": 4}

    def init(self):
        self.events.append(("init", dict(self.live)))

    def rollout(self, max_length=False):
        import rollmux
        self.events.append(("rollout", dict(self.live), rollmux.progress(1, 2)))
        return "batch"

    def train(self, batch):
        self.events.append(("train", batch, dict(self.live)))

    def sync(self):
        self.events.append(("sync", dict(self.live)))


def test_a_job_object_given_to_the_shim_runs_every_phase_with_its_hooks_by_pool():
    client, job = GrantAtOnce(), PoolJob()
    shim = JobShim("a", client, job=job)
    run_init(shim, job)
    timings = run_iteration(shim, job)
    both, none = {"rollout": True, "train": True}, {"rollout": False, "train": False}
    assert job.events == [
        ("init", both), ("offload", "rollout"), ("offload", "train"),
        ("onload", "rollout"), ("rollout", {"rollout": True, "train": False}, False), ("offload", "rollout"),
        ("onload", "train"), ("train", "batch", {"rollout": False, "train": True}), ("offload", "train"),
        ("sync", none)]
    assert [t.phase for t in timings] == ["rollout", "train", "sync"]
    assert [t.phase for t in client.released] == ["init", "rollout", "train", "sync"]
    assert client.released[0].host_bytes == {"rollout": 3, "train": 4}  # host_bytes is the host_memory hook


def test_a_callable_given_wins_over_the_job_objects_method():
    client, job, seen = GrantAtOnce(), PoolJob(), []
    shim = JobShim("a", client, job=job, offload=seen.append)
    with shim.phase("init"):
        pass
    assert seen == ["rollout", "train"] and job.events == []
