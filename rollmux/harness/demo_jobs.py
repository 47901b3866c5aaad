"""The demo's GRPO jobs on Ray: workers, the phase log, and one job's loop (DESIGN §8).

A job is W rollout workers (one per worker slot of its rollout node, W = the
scheduler's slots per node) and one trainer, each a Ray actor pinned to its
emulated node. An iteration runs four phases through the job's shim:

- rollout: the batch's responses (one per prompt, `GRPOJob.respond`, seeded
  per prompt) are dealt to the workers of the slots the permit covers, one at
  a time. When most are done the shim's `on_tail` hook (`_Rollout.give_up`)
  cancels the responses still running on the slots the job gives up (a worker
  checks `is_canceled()` between tokens), offloads those workers and only then
  lets the scheduler hand the slots on; the aborted responses are recomputed
  from scratch on the slots kept, to the same tokens. The cancellation is the
  worker's own (`Worker.abort`, served by a control thread of the actor while
  `respond` runs), not `ray.cancel`: Ray's cancellation of an actor task that
  has not started yet can leave a gap in the actor's task sequence, after
  which the actor refuses its queue (seen as a demo that never finished);
- train: the trainer assembles the batch from the responses (object refs,
  never fetched by the driver) and takes its GRPO step;
- sync: the trainer's weights go to every rollout worker through
  `rollmux.weightsync` (a torch.distributed group of the job's own: 1 training
  rank, W rollout ranks, Gloo), into the workers' host-resident copy;
- init (once, first): fresh state on every worker, then offloaded.

The same loop without a shim is the solo run (every slot, no permits, state
resident throughout), so both runs compute the same batches and weights.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import ray

from rollmux.shim import JobShim, slots_given_up

SYNC_STRATEGY = "topology"  # rollmux.weightsync: each training rank sends 1/N, rollout ranks all-gather
PROGRESS = "demo-progress:"  # a job's line per iteration in its log (the demo forwards it: demo_launch.Progress)


def progress_line(it: int, total: int, rollout_s: float, train_s: float) -> str:
    """The line a demo job prints when iteration `it` (from 1) of `total` is done, with its phases' seconds."""
    return f"{PROGRESS} it {it}/{total} rollout {rollout_s:.2f} s train {train_s:.2f} s"
SYNC_TIMEOUT_S = 300.0      # the weight-sync group's rendezvous and store timeout (SyncGroup's default)
# A worker's control thread (Ray concurrency group): `abort` reaches the actor while `respond` runs.
CONTROL = {"control": 1}


class Worker:
    """One side of a GRPO job on one emulated node: a rollout worker slot, or the trainer."""

    def __init__(self, size: str, seed: int, side: str, slot: int = 0, warm_up: bool = True,
                 sync_timeout_s: float = SYNC_TIMEOUT_S) -> None:
        from rollmux.jobs.grpo.job import GRPOJob, make_config, run_solo
        self.side, self.size, self.seed, self.slot = side, size, seed, slot
        self.sync_timeout_s = sync_timeout_s
        if warm_up:  # torch's first autograd and kernels, off the clock (a restart mid-run pays them)
            run_solo(GRPOJob(make_config(size, seed + 1)), 1)
        self.sync = None
        self._aborted: set[tuple[int, int]] = set()
        self.reset()

    def reset(self) -> None:
        """A fresh job (same config and seed); the other side never runs here, so it stays offloaded."""
        from rollmux.jobs.grpo.job import GRPOJob, make_config
        self._aborted.clear()
        self.job = GRPOJob(make_config(self.size, self.seed))
        self.job.offload("trainer" if self.side == "rollout" else "rollout")

    @ray.method(concurrency_group="control")
    def node_id(self) -> str:
        """The Ray node this worker runs on (the job's heartbeats carry it)."""
        return ray.get_runtime_context().get_node_id()

    def host_store(self, n_rollout: int) -> int:
        """The trainer hosts its job's weight-sync store on a port the OS picks; that port. (A
        port found free first and bound later could be taken in between: EADDRINUSE.)"""
        import torch.distributed as dist
        self._store = dist.TCPStore("127.0.0.1", 0, 1 + n_rollout, is_master=True, wait_for_workers=False,
                                    timeout=timedelta(seconds=self.sync_timeout_s))
        return self._store.port

    def join_sync(self, port: int, n_rollout: int) -> None:
        """Join the job's weight-sync group (the trainer, rank 0, hosts its store on `port`)."""
        from rollmux.weightsync import SyncGroup
        role = "train" if self.side == "trainer" else "rollout"
        store = getattr(self, "_store", None) if role == "train" else None
        self.sync = SyncGroup(role, 0 if role == "train" else self.slot, 1, n_rollout, master_port=port,
                              strategy=SYNC_STRATEGY, store=store, timeout_s=self.sync_timeout_s)

    def leave_sync(self) -> None:
        """Leave the weight-sync group (every member calls it)."""
        if self.sync is not None:
            self.sync.close()
            self.sync = None

    def cold_start(self, path: str) -> float:
        """Checkpoint to disk, then time a cold start (restore) from it."""
        self.job.checkpoint(path)
        t = time.perf_counter()
        self.job.restore(path)
        dt = time.perf_counter() - t
        self.job.offload("trainer" if self.side == "rollout" else "rollout")
        return dt

    def onload(self) -> float:
        t = time.perf_counter()
        self.job.onload(self.side)
        return time.perf_counter() - t

    def offload(self) -> float:
        t = time.perf_counter()
        self.job.offload(self.side)
        return time.perf_counter() - t

    def respond(self, it: int, index: int):
        """One prompt's responses; None if it was aborted (its tail migrated away)."""
        try:
            return self.job.respond(it, index, abort=lambda: (it, index) in self._aborted)
        finally:
            self._aborted.discard((it, index))

    @ray.method(concurrency_group="control")
    def abort(self, it: int, index: int) -> None:
        """Stop prompt `index` of iteration `it` between two tokens (or before it starts)."""
        self._aborted.add((it, index))

    def train(self, it: int, *responses) -> dict:
        return self.job.train(self.job.assemble(it, list(responses)), it)

    def send_weights(self) -> float:
        """Trainer: the weights to every rollout worker; the seconds the send took."""
        return self.sync.send(self.job.weights()).seconds

    def receive_weights(self) -> float:
        """Rollout worker: the trainer's weights into this worker's (host-resident) copy."""
        weights, stats = self.sync.receive()
        self.job.set_rollout_weights(weights)
        return stats.seconds

    def weights(self):
        return self.job.weights()

    def load_weights(self, weights) -> None:
        """Rollout worker: the policy a restarted worker starts from (the trainer's current weights)."""
        self.job.set_rollout_weights(weights)

    def export_state(self) -> bytes:
        """Trainer: everything needed to resume bit-exactly (a move carries it to the new node)."""
        import io
        buf = io.BytesIO()
        self.job.checkpoint(buf)
        return buf.getvalue()

    def import_state(self, state: bytes) -> float:
        """Trainer: resume from `export_state`'s bytes (a cold start), offloaded (the phase's onload
        brings it in); the seconds the restore took."""
        import io
        t = time.perf_counter()
        self.job.restore(io.BytesIO(state))
        dt = time.perf_counter() - t
        self.job.offload("all")
        return dt


@dataclass
class JobActors:
    """A job's Ray actors: one rollout worker per slot, one trainer."""

    rollout: list[Any]
    trainer: Any

    def all(self) -> list[Any]:
        """Every actor of the job."""
        return [*self.rollout, self.trainer]


def spawn(size: str, seed: int, slots: int, rollout_opts: dict | None = None,
          train_opts: dict | None = None) -> JobActors:
    """The job's actors (Ray options per side: where they run), joined in their weight-sync group."""
    actor = ray.remote(concurrency_groups=CONTROL)(Worker)
    rollout = [actor.options(num_cpus=0, **(rollout_opts or {})).remote(size, seed, "rollout", s)
               for s in range(slots)]
    trainer = actor.options(num_cpus=0, **(train_opts or {})).remote(size, seed, "trainer")
    port = ray.get(trainer.host_store.remote(slots))  # the group's store, on a port the OS picked
    ray.get([trainer.join_sync.remote(port, slots)] + [w.join_sync.remote(port, slots) for w in rollout])
    return JobActors(rollout, trainer)


@dataclass
class PhaseLog:
    """Phase intervals on worker slots: {job, phase, pool, node, slots, iter, start, end} (thread-safe)."""

    rows: list[dict] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, job: str, phase: str, pool: str, node: str, slots, it: int, start: float, end: float,
            ran: str | None = None) -> None:
        """Record one interval (`ran`: the node the workers reported they ran on, where known)."""
        row = {"job": job, "phase": phase, "pool": pool, "node": node, "slots": list(slots), "iter": it,
               "start": start, "end": end}
        if ran is not None:
            row["ran"] = ran
        with self._lock:
            self.rows.append(row)


class _Rollout:
    """One rollout: responses dealt to slots; `give_up` is the shim's on_tail hook."""

    def __init__(self, job_id: str, it: int, actors: JobActors, slots, node: str, log: PhaseLog,
                 onloaded: set[int], n: int) -> None:
        self.job_id, self.it, self.actors, self.node, self.log = job_id, it, actors, node, log
        self.active, self.onloaded, self.n = list(slots), onloaded, n
        self.queue: deque[int] = deque(range(n))
        self.busy: dict[int, tuple[Any, int]] = {}  # slot -> (ref, prompt)
        self.done: dict[int, Any] = {}              # prompt -> ref of its responses
        self.aborted = 0
        self.ran: str | None = None  # the node the workers run on, where the caller knows it
        self.seg_start = time.perf_counter()

    def run(self, shim: JobShim | None) -> list[Any]:
        """Every prompt's responses (as object refs, in prompt order)."""
        while len(self.done) < self.n:
            for s in self.active:
                if s not in self.busy and self.queue:
                    b = self.queue.popleft()
                    self.busy[s] = (self.actors.rollout[s].respond.remote(self.it, b), b)
            ready, _ = ray.wait([r for r, _ in self.busy.values()], num_returns=1)
            slot = next(s for s, (r, _) in self.busy.items() if r == ready[0])
            ref, b = self.busy.pop(slot)
            self.done[b] = ref
            if shim is not None:
                shim.progress(len(self.done), self.n)  # may call give_up
        self._segment()
        return [self.done[b] for b in range(self.n)]

    def give_up(self, grant) -> None:
        """The tail migrates: stop the responses on the slots given up, offload them, keep the rest."""
        gone = slots_given_up(grant, self.active, self.job_id)
        for s in gone:
            if s in self.busy:
                self.actors.rollout[s].abort.remote(self.it, self.busy[s][1])
        for s in gone:
            if s in self.busy:
                ref, b = self.busy.pop(s)
                if _finished(ref):
                    self.done[b] = ref
                else:  # recomputed from scratch on a kept slot, to the same tokens
                    self.queue.appendleft(b)
                    self.aborted += 1
        ray.get([self.actors.rollout[s].offload.remote() for s in gone])
        self.onloaded.difference_update(gone)
        self._segment()
        self.active = [s for s in self.active if s not in gone]

    def _segment(self) -> None:
        """Log the interval the current slots ran since the last change."""
        now = time.perf_counter()
        self.log.add(self.job_id, "rollout", "rollout", self.node, self.active, self.it, self.seg_start, now, self.ran)
        self.seg_start = now


def _finished(ref) -> bool:
    """Whether an aborted response task had finished anyway (its result is then kept)."""
    return ray.get(ref) is not None


@dataclass
class JobRun:
    """What one run of a job measured."""

    rewards: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    iter_s: float = 0.0
    sync_s: list[float] = field(default_factory=list)
    aborted: int = 0
    weights: Any = None
    migrations: int = 0


class Hooks:
    """The shim's hooks for one job: onload and offload wait for the actors (a worker with a control
    thread runs its calls in arrival order, not submission order); `rollout` is the running rollout
    (its `give_up` is the tail hook)."""

    def __init__(self, actors: JobActors, warm: list) -> None:
        self.actors, self.warm = actors, warm
        self.onloaded: set[int] = set()
        self.rollout: _Rollout | None = None
        self.shim: JobShim | None = None

    def onload(self, pool: str) -> None:
        if pool == "rollout":
            slots = self.shim.grant.slots(0)
            self.warm.extend(ray.get([self.actors.rollout[s].onload.remote() for s in slots]))
            self.onloaded.update(slots)
        else:
            self.warm.append(ray.get(self.actors.trainer.onload.remote()))

    def offload(self, pool: str) -> None:
        if pool == "rollout":  # the init phase's offload: every slot (the workers start resident)
            init = self.shim.grant.phase == "init"
            ray.get([a.offload.remote() for s, a in enumerate(self.actors.rollout) if init or s in self.onloaded])
            self.onloaded.clear()
        else:
            ray.get(self.actors.trainer.offload.remote())

    def on_tail(self, grant) -> None:
        self.rollout.give_up(grant)


def drive(job_id: str, actors: JobActors, iterations: int, log: PhaseLog, nodes: tuple[str, str], n_prompts: int,
          shim: JobShim | None = None, hooks: Hooks | None = None) -> JobRun:
    """init (with a shim), then rollout -> train -> sync `iterations` times; phases go to `log`."""
    run = JobRun()
    slots = range(len(actors.rollout))
    phase = (lambda name: shim.phase(name)) if shim else (lambda name: contextlib.nullcontext())
    if shim is not None:
        with phase("init"):
            ray.get([a.reset.remote() for a in actors.all()])
    t_start = time.perf_counter()
    for it in range(iterations):
        t_it = time.perf_counter()
        with phase("rollout") as grant:
            ro = _Rollout(job_id, it, actors, grant.slots(0) if shim else slots, nodes[0], log,
                          hooks.onloaded if hooks else set(), n_prompts)
            if hooks is not None:
                hooks.rollout = ro
            parts = ro.run(shim)
            run.aborted += ro.aborted
        with phase("train"):
            s = time.perf_counter()
            metrics = ray.get(actors.trainer.train.remote(it, *parts))
            run.rewards.append(metrics["mean_reward"])
            run.losses.append(metrics["loss"])
            log.add(job_id, "train", "train", nodes[1], (0,), it, s, time.perf_counter())
        print(progress_line(it + 1, iterations, s - t_it, time.perf_counter() - s), flush=True)
        with phase("sync"):
            s = time.perf_counter()
            ray.get([actors.trainer.send_weights.remote()] + [w.receive_weights.remote() for w in actors.rollout])
            run.sync_s.append(time.perf_counter() - s)
    run.iter_s = (time.perf_counter() - t_start) / iterations
    run.weights = ray.get(actors.trainer.weights.remote())
    run.migrations = shim.migrations if shim is not None else 0
    return run


def make_shim(job_id: str, client, hooks: Hooks, tail_threshold: float) -> JobShim:
    """The job's shim wired to its hooks."""
    shim = JobShim(job_id, client, onload=hooks.onload, offload=hooks.offload, on_tail=hooks.on_tail,
                   tail_threshold=tail_threshold)
    hooks.shim = shim
    return shim
