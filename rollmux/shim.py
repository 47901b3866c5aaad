"""Runtime shim: how a real RL job marks its phases (DESIGN §8).

    shim = rollmux.shim.JobShim("job-7", client, onload=load, offload=unload)
    with shim.phase("rollout"):
        generate()                      # runs only while this job holds the permit
        shim.progress(done, total)      # lets the controller migrate a long tail
    @shim.phase("train")
    def train_step(batch): ...

or, the paper's form, with the job's context set once per process (or thread):

    rollmux.init("job-7", client, onload=load, offload=unload)
    @rollmux.phase("rollout")
    def generate(): ...

Entering a phase asks the group controller for a permit and blocks until it is
this job's turn on its nodes; then the job's `onload` hook restores its state
(warm start from host memory), the phase runs, `offload` moves the state back
to host memory (the process and its communicators stay alive), and the permit
is released with the measured timings. A job waiting for a permit has not
onloaded: it holds no accelerator state.

Phases (the controller's rules: rollmux.core.group_controller) and the pools whose state
their hooks move (`HOOK_POOLS`; every hook takes a pool, "rollout" or "train", never a phase:
a hook that needs the phase reads `shim.grant.phase`):
- `init`: the job builds its state on its nodes (both pools); it waits until
  the job is placed and its nodes are free. No onload (there is nothing to
  restore); `offload("rollout")` then `offload("train")` at its end, so the job
  then waits holding nothing.
- `rollout`, `train`: `onload(pool)`, run, `offload(pool)`, one turn per node.
- `sync`: the trainer's weights go to the rollout workers' host-resident copy;
  it holds no node (granted at once) and runs no hooks: its timings are
  measured and reported like any phase's.

**The job protocol** (`Job`): one object whose methods are the hooks (`onload(pool)`,
`offload(pool)`, `host_bytes()`, optionally `on_move(grant)`, `on_tail(grant)`) and the
phases' work (`init()` optional, `rollout(max_length)`, `train(batch)`, `sync()`).
`JobShim(job_id, client, job=obj)` (or `rollmux.init(job=obj)`) wires the hooks,
`run_init` and `run_iteration` run the phases, and `rollmux profile` measures the same
object (its module's `make_job` returns one). docs/job-protocol.md has the whole of it.

Long-tail migration: inside a rollout, `progress(done, total)` past
`tail_threshold` (when the permit allows migration, `Grant.tail_share > 0`)
calls the job's `on_tail(grant)` hook, which must stop the unfinished responses
on the worker slots it gives up (every slot but `grant.kept(i)` on node i) and
return; only then is the scheduler told, and it hands those slots to the next
member's rollout. The job recomputes the aborted responses on the slots it
kept. `progress` returns True that once, and `tail_migrated` stays set until
the next phase starts (for a loop that polls).

The shim talks to a `PermitClient`. `LocalPermitClient` serves permits from
an in-process `GroupController` driven by a `WallClockEnvironment`; the live
plane's client forwards the same calls to the scheduler service.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Protocol

from rollmux.core.env import WallClockEnvironment
from rollmux.core.group_controller import Grant, GroupController

PHASES = ("init", "rollout", "train", "sync")
ITERATION = ("rollout", "train")  # the phases that take turns on the nodes, in an iteration's order
POOLS = ("rollout", "train")      # what a hook is called with: the side of the job whose state moves
# Per phase: the pools onloaded at its start, and those offloaded at its end, in this order.
HOOK_POOLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "init": ((), POOLS), "rollout": (("rollout",), ("rollout",)), "train": (("train",), ("train",)),
    "sync": ((), ())}
log = logging.getLogger("rollmux.shim")


@dataclass(frozen=True)
class PhaseTimings:
    """What one phase cost, measured by the shim."""

    job_id: str
    phase: str
    wait_s: float      # from asking for the permit to getting it
    onload_s: float    # restoring state (warm start)
    run_s: float       # the phase itself
    offload_s: float   # moving state back to host memory
    epoch: int = 0     # placement epoch of the permit (a release from an older placement is stale)
    # Bytes the job's offloaded state holds in host memory per node, by pool ("rollout",
    # "train"), read from the job's `host_memory` hook right after offload; None: not measured.
    host_bytes: dict[str, int] | None = None


class PermitClient(Protocol):
    """The scheduler side of the shim."""

    def acquire(self, job_id: str, phase: str) -> Grant:
        """Block until `job_id` may run `phase`; return the permit."""

    def tail_started(self, job_id: str) -> None:
        """The job's rollout is tail-bound (long-tail migration may start)."""

    def release(self, timings: PhaseTimings) -> None:
        """The phase is over; free its nodes."""


class Job(Protocol):
    """The job-side protocol: the shim's hooks and each phase's work, on one object. Optional
    methods, used when present: `init()` (builds the state, inside the init phase),
    `on_move(grant)` (re-placed: restart the workers where the permit says) and
    `on_tail(grant)` (a rollout's tail migrates: stop the responses on the slots given up)."""

    def onload(self, pool: str) -> None:
        """The pool's state ("rollout" or "train") back from host memory onto its nodes."""

    def offload(self, pool: str) -> None:
        """The pool's state to host memory (the process and its communicators stay alive)."""

    def host_bytes(self) -> Mapping[str, int]:
        """Bytes the offloaded state holds in host memory, per node of each pool."""

    def rollout(self, max_length: bool = False) -> Any:
        """One rollout (`max_length`: every response runs to the maximum length); its batch."""

    def train(self, batch: Any) -> Any:
        """One training step on the batch."""

    def sync(self) -> Any:
        """The trainer's weights to the rollout side."""


HOOKS = {"onload": "onload", "offload": "offload", "host_memory": "host_bytes", "on_move": "on_move",
         "on_tail": "on_tail"}  # JobShim's hook argument -> the Job method it calls


def hooks_of(job: Any) -> dict[str, Callable]:
    """JobShim's hook arguments from a `Job`'s methods (those it has)."""
    return {arg: getattr(job, name) for arg, name in HOOKS.items() if callable(getattr(job, name, None))}


class JobShim:
    """Phase markers for one job; its hooks are the callables given, else `job`'s methods."""

    def __init__(self, job_id: str, client: PermitClient,
                 onload: Callable[[str], None] | None = None,
                 offload: Callable[[str], None] | None = None,
                 tail_threshold: float = 0.8,
                 on_move: Callable[[Grant], None] | None = None,
                 host_memory: Callable[[], Mapping[str, int]] | None = None,
                 on_tail: Callable[[Grant], None] | None = None,
                 job: Job | None = None) -> None:
        if not 0 < tail_threshold <= 1:
            raise ValueError(f"JobShim: tail_threshold must be in (0, 1], not {tail_threshold!r}")
        found = hooks_of(job) if job is not None else {}
        onload, offload = onload or found.get("onload"), offload or found.get("offload")
        on_move, on_tail = on_move or found.get("on_move"), on_tail or found.get("on_tail")
        host_memory = host_memory or found.get("host_memory")
        self.job_id = job_id
        self._host_memory = host_memory  # measured after each offload (see PhaseTimings.host_bytes)
        self.client = client
        self._onload = onload or (lambda pool: None)
        self._offload = offload or (lambda pool: None)
        self._on_move = on_move or (lambda grant: None)
        self._on_tail = on_tail or (lambda grant: None)
        self.tail_migrated = False  # the running rollout's tail moved to the slots it kept
        self.migrations = 0         # tails migrated so far
        self.epoch: int | None = None  # placement epoch of the last permit
        self.tail_threshold = tail_threshold
        self.history: list[PhaseTimings] = []
        self._grant: Grant | None = None
        self._tail_sent = False

    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[Grant]:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; use one of {PHASES}")
        if self._grant is not None:
            raise RuntimeError(f"{self.job_id}: phase {name!r} entered inside phase {self._grant.phase!r}")
        t0 = time.perf_counter()
        grant = self.client.acquire(self.job_id, name)
        t1 = time.perf_counter()
        self._grant, self._tail_sent, self.tail_migrated = grant, False, False
        onload, offload = HOOK_POOLS[name]
        try:
            if self.epoch is not None and grant.epoch != self.epoch:
                self._on_move(grant)  # re-placed (regrouping or re-admission): restart workers on the new nodes
            self.epoch = grant.epoch
            for pool in onload:
                self._onload(pool)
        except BaseException:
            # A failed onload must not keep the nodes: release (nothing ran), then re-raise.
            now = time.perf_counter()
            self._release(PhaseTimings(self.job_id, name, t1 - t0, now - t1, 0.0, 0.0, grant.epoch))
            raise
        t2 = time.perf_counter()
        try:
            yield grant
        finally:
            t3 = time.perf_counter()
            try:
                for pool in offload:
                    self._offload(pool)
            finally:  # a failed offload still releases the permit; its error then propagates
                t4 = time.perf_counter()
                self._release(PhaseTimings(self.job_id, name, t1 - t0, t2 - t1, t3 - t2, t4 - t3, grant.epoch,
                                           self._held_bytes()))

    def _held_bytes(self) -> dict[str, int] | None:
        """What the job's `host_memory` hook says its offloaded state holds (None without a hook)."""
        if self._host_memory is None:
            return None
        try:
            return {pool: int(n) for pool, n in self._host_memory().items()}
        except Exception:  # noqa: BLE001 -- a broken measurement must not keep the permit
            log.warning("%s: host_memory hook failed; releasing without a measurement", self.job_id, exc_info=True)
            return None

    def _release(self, timings: PhaseTimings) -> None:
        """Leave the phase and hand its permit back with what it cost."""
        self._grant = None
        self.history.append(timings)
        self.client.release(timings)

    @property
    def grant(self) -> Grant | None:
        """The permit of the phase running now (None between phases); hooks read it."""
        return self._grant

    def node_strategies(self, held: bool = False) -> list:
        """Ray scheduling strategies that put a worker on each node the running phase's permit
        names, in its order (`held`: the training nodes an init holds too): `NodeAffinity`,
        not soft, so a worker never lands elsewhere. ValueError when the permit names no
        machines (the service has no node inventory: `rollmux serve --ray`)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        grant = self._grant
        if grant is None:
            raise RuntimeError(f"{self.job_id}: node_strategies() outside a phase")
        ids = grant.train_held_ids if held else grant.node_ids
        if len(ids) != len(grant.train_held if held else grant.nodes) or any(n is None for n in ids):
            raise ValueError(f"{self.job_id}: the {grant.phase} permit names no machine for every node "
                             "(the service needs a node inventory: rollmux serve --ray)")
        return [NodeAffinitySchedulingStrategy(node_id=n, soft=False) for n in ids]

    def phase(self, name: str):
        """Mark a phase: use as `with shim.phase(name):` or as a decorator `@shim.phase(name)`."""
        return _PhaseMarker(self, name)

    def progress(self, done: int, total: int) -> bool:
        """Report finished/total responses of the running rollout; True when its tail migrates now."""
        grant = self._grant
        if grant is None or grant.phase != "rollout" or self._tail_sent or total <= 0:
            return False
        if grant.tail_share > 0 and done / total >= self.tail_threshold:
            self._tail_sent = True
            self._on_tail(grant)  # the stragglers leave the slots given up before anyone gets them
            self.client.tail_started(self.job_id)
            self.tail_migrated = True
            self.migrations += 1
            return True
        return False


class _PhaseMarker:
    """Both a context manager and a decorator for one phase."""

    def __init__(self, shim: JobShim, name: str) -> None:
        self._shim, self._name = shim, name
        self._cm = None

    def __enter__(self) -> Grant:
        self._cm = self._shim._phase(self._name)
        return self._cm.__enter__()

    def __exit__(self, *exc) -> bool | None:
        cm, self._cm = self._cm, None
        return cm.__exit__(*exc)

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self._shim._phase(self._name):
                return fn(*args, **kwargs)
        return wrapped


class _CurrentJob(threading.local):
    shim: JobShim | None = None


_current = _CurrentJob()
_process_shim: JobShim | None = None


def init(job_id: str, client: PermitClient, **hooks) -> JobShim:
    """Set the job's context once: `phase` and `progress` below then act for this job.

    The context is the calling thread's, and the process's default (a job with
    several threads calls this once; jobs sharing a process call it in their own
    threads). `hooks` are JobShim's keyword arguments (onload, offload, on_tail, ...).
    `rollmux.init()` without arguments (rollmux/job.py) finds both in the environment
    `rollmux run` sets."""
    global _process_shim
    shim = JobShim(job_id, client, **hooks)
    _current.shim = _process_shim = shim
    return shim


def current() -> JobShim:
    """The job context `init` set (this thread's, else the process's)."""
    shim = _current.shim or _process_shim
    if shim is None:
        raise RuntimeError("no rollmux job context: call rollmux.init(job_id, client, ...) first")
    return shim


def phase(name: str) -> "_LazyMarker":
    """`@rollmux.phase("rollout")` or `with rollmux.phase("train"):` for the job `init` set (looked
    up when the phase runs, so decorating at import time, before `init`, works)."""
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r}; use one of {PHASES}")
    return _LazyMarker(name)


def progress(done: int, total: int) -> bool:
    """`JobShim.progress` for the job `init` set."""
    return current().progress(done, total)


@contextlib.contextmanager
def acting_for(shim: JobShim) -> Iterator[JobShim]:
    """This thread's job context is `shim` inside the block (`rollmux.progress` acts for it)."""
    before, _current.shim = _current.shim, shim
    try:
        yield shim
    finally:
        _current.shim = before


def run_init(shim: JobShim, job: Job) -> PhaseTimings:
    """The init phase: the job's `init()` (if it has one) under the permit, then both pools offloaded."""
    with acting_for(shim), shim.phase("init"):
        if callable(getattr(job, "init", None)):
            job.init()
    return shim.history[-1]


def run_iteration(shim: JobShim, job: Job, max_length: bool = False) -> tuple[PhaseTimings, ...]:
    """One iteration of a `Job` through the shim: rollout, train on its batch, sync; the three
    phases' timings (the profiler's measurement and a job's own loop are this one function)."""
    with acting_for(shim):
        with shim.phase("rollout"):
            batch = job.rollout(max_length=max_length)
        with shim.phase("train"):
            job.train(batch)
        with shim.phase("sync"):
            job.sync()
    return tuple(shim.history[-3:])


class _LazyMarker:
    """A phase marker that finds its job's shim when it runs."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._cms = threading.local()  # the open `with` of each thread

    def __enter__(self) -> Grant:
        cm = self._cms.cm = current().phase(self._name)
        return cm.__enter__()

    def __exit__(self, *exc) -> bool | None:
        cm, self._cms.cm = self._cms.cm, None
        return cm.__exit__(*exc)

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with current().phase(self._name):
                return fn(*args, **kwargs)
        return wrapped


class LocalPermitClient:
    """Permits from in-process group controllers on a wall-clock environment.

    Every controller call runs on the environment's thread (controllers are
    single-threaded); callers block on an event until their grant arrives.
    """

    def __init__(self, env: WallClockEnvironment, controllers: dict[str, GroupController]) -> None:
        self.env = env
        self.controllers = controllers  # job_id -> its group's controller
        self.grants: list[Grant] = []   # every permit, in grant order (for inspection)
        self._lock = threading.Lock()

    def acquire(self, job_id: str, phase: str) -> Grant:
        """Ask the job's controller for a permit and wait for it."""
        got: list[Grant] = []
        ready = threading.Event()

        def on_grant(grant: Grant) -> None:
            with self._lock:
                self.grants.append(grant)
            got.append(grant)
            ready.set()

        ctl = self.controllers[job_id]
        self.env.call_at(self.env.now(), ctl.request, job_id, phase, on_grant)
        ready.wait()
        return got[0]

    def tail_started(self, job_id: str) -> None:
        """Forward the tail signal to the controller."""
        self.env.call_at(self.env.now(), self.controllers[job_id].tail_started, job_id)

    def release(self, timings: PhaseTimings) -> None:
        """Forward the release to the controller."""
        self.env.call_at(self.env.now(), self.controllers[timings.job_id].release, timings.job_id, timings.phase)


def slots_given_up(grant: Grant, active: list[int], who: str) -> list[int]:
    """The worker slots (of the permit's first node) a migrating tail gives up, of those `active`;
    a tail that would keep none of them is a misconfiguration (RuntimeError naming `who`)."""
    keep = set(grant.kept(0))
    if not keep & set(active):
        raise RuntimeError(f"{who}: the tail would keep no worker slot (kept {sorted(keep)}, running on "
                           f"{active}); tail_worker_frac * slots must be >= 1")
    return [s for s in active if s not in keep]


def tensor_bytes(tree: Any) -> int:
    """Bytes of the tensors in a nested dict / list / tuple, each storage counted once."""
    seen: dict[int, int] = {}

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif hasattr(x, "untyped_storage"):  # a torch.Tensor, without importing torch here
            storage = x.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    walk(tree)
    return sum(seen.values())
