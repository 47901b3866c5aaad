"""The live scheduler's state machine: every change is a journal record applied here (DESIGN §8).

The service decides (placement policy, the group controllers' turn order), journals what it
decided as a typed record (core/records.py), then calls `apply_record` with it; a restarted
service replays the journal through `apply`, which reads each line back into its record
(older versions upgraded) and applies it the same way. Nothing here reads the clock for a
decision or calls the placement policy, so a replay rebuilds exactly the state that was
journaled: groups, pins, each controller's turn order and held permits, each job's
iterations, status and measured profile.

`apply_record` dispatches through one explicit table. The live-only records (`submit`,
`grant`, `release`, `tail`, `observe`, `memory`, `turn`) change the jobs here; the scheduling
decisions (`place`, `movers`, `compact`, `move_out`, `leave`) are carried out by the shared
`ClusterState.apply`, as in the simulator, with the jobs' side around them. A job's status
moves only by `set_status` (core/lifecycle.py's table). An `observe` runs the simulator's
drift repair: replayed, its re-plan is redone (a function of the measurements) and its
decisions are not, since they are the journal's next `movers` and `compact` records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from pydantic import ValidationError

from rollmux.core.config import SchedulerConfig
from rollmux.core.env import Environment
from rollmux.core.group import Group, Member
from rollmux.core.lifecycle import IllegalTransition, set_status
from rollmux.core.placement import build_policy
from rollmux.core.records import (
    Bind,
    Compact,
    FirstCall,
    Grant,
    Leave,
    Memory,
    MoveOut,
    Movers,
    MoversV1,
    Node,
    Observe,
    Place,
    Profiled,
    Release,
    Submit,
    Tail,
    Turn,
    parse,
)
from rollmux.core.spec import ClusterSpec, HostGB, JobSpec
from rollmux.core.state import ClusterState
from rollmux.core.vocabulary import JobStatus, Phase, Pool
from rollmux.live.codec import dump_state, load_state
from rollmux.live.nodemap import POOLS, Binding, NodeMap

EWMA = 0.3  # weight of the newest phase measurement in a job's profile
WINDOW = 5  # iterations in a job's recent iteration time (beside its whole-run mean; live/views.py)
QUEUED, RUNNING, MOVING = JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.MOVING


class ReplayError(RuntimeError):
    """A journal record does not apply to the state rebuilt so far."""


class _Journaled(Exception):
    """Replay of an `observe`: what it decided is the journal's next `movers` and `compact` records."""


def _replayed(_decision) -> None:
    raise _Journaled


@dataclass
class LiveJob:
    """What the service knows of one submitted job."""

    spec: JobSpec
    token_hash: str
    started_at: float                 # wall-clock (epoch) seconds of submission
    group_id: int | None = None       # None while queued or moving
    status: JobStatus = QUEUED        # moves only by `set_status` (core/lifecycle.py)
    iterations: int = 0
    epoch: int = 0                    # placements so far: a move or re-admission bumps it
    migrate: bool = False             # leave the group at the next iteration boundary
    held: dict[str, dict] = field(default_factory=dict)      # phase -> the permit, until released
    profile: dict[str, float] = field(default_factory=dict)  # phase -> EWMA of measured run seconds
    reason: str | None = None
    case: str | None = None           # how its latest placement was found (a core/vocabulary.py Case)
    why: str | None = None            # isolated: why no group took it (core/placement/why.py's reason)
    last_run: dict[str, float] = field(default_factory=dict)      # phase -> its last measured run seconds
    host_measured: dict[str, float] = field(default_factory=dict)  # pool -> most host GB per node measured
    last_factor: float = 1.0          # the elastic factor its last rollout ran at (core/elastic.py)
    inited: int = 0                   # the epoch (placement) its init was last granted in
    first_phase_at: float | None = None  # wall-clock seconds of its first permit: its iterations are timed from there
    timed_from: int = 0               # iterations it had then (an older snapshot's job: some untimed)
    iteration_ends: list[float] = field(default_factory=list)  # wall-clock ends of its last WINDOW + 1 iterations
    first_call_at: float | None = None  # wall-clock seconds of its first call (a `first_call` record)
    # Submitted without phase times: the record fields it was measured to have (a `profiled` record;
    # kept when it ends, unlike the scheduler's planned profile)
    profiled: dict | None = None

    @property
    def job_id(self) -> str:
        """The job's id (its spec's)."""
        return self.spec.job_id

    @property
    def over_memory(self) -> bool:
        """Measured to hold more host memory than it declared (on either pool)."""
        return any(gb > getattr(self.spec.host_gb, pool) + 1e-9 for pool, gb in self.host_measured.items())

    @property
    def called(self) -> bool:
        """It made its first call: its heartbeat deadline applies, no longer its start-up one. A granted
        permit is a call the journal holds; any other first call is a `first_call` record."""
        return self.first_call_at is not None or self.first_phase_at is not None

    @property
    def active(self) -> bool:
        """Still scheduled (not done, failed or cancelled)."""
        return self.status in (QUEUED, RUNNING, MOVING)


class LiveState:
    """Jobs plus the shared `ClusterState`; changed only through `apply_record`."""

    def __init__(self, env: Environment, cluster: ClusterSpec, cfg: SchedulerConfig) -> None:
        self.cfg = cfg
        # The policy `rollmux simulate` runs with the same config (core/placement/builder.py). With the
        # co-located mode a job may be told to run co-located: its permits name its training
        # nodes for every phase (core/colo_controller.py), and the job must honour a rollout
        # permit on pool "train" (the veRL way). With elastic rollout a job may be placed on more
        # or fewer rollout nodes than it declared, and compaction may later narrow it: its
        # rollout permits name the nodes it has now.
        policy = build_policy(cfg, cluster)
        self.spec = cluster  # as configured; with a node inventory the pools' caps follow it
        self.cluster = ClusterState(env, cluster, policy, cfg)
        # Which machine each group node index is (live/nodemap.py), once nodes are reported.
        self.nodes = NodeMap()
        self.jobs: dict[str, LiveJob] = {}
        self.grants = 0      # permits granted so far (for status)
        # How a live `observe` carries out the decisions it makes (a `Movers`, a `Compact`): the
        # service journals each first. Without a service: applied at once.
        self.commit: Callable[[Movers | Compact], object] = self.apply_record
        self._table: dict[type, Callable] = {
            Submit: self._submit, Place: self._place, Grant: self._grant, Release: self._release,
            Tail: self._tail, Observe: self._observe, Compact: self._compact, Memory: self._memory,
            Movers: self._movers, MoversV1: self._movers_v1, MoveOut: self._move_out, Leave: self._leave,
            Node: self._node, Bind: self._bind, Turn: self._turn, Profiled: self._profiled,
            FirstCall: self._first_call,
        }

    def apply(self, kind: str, payload: dict, replay: bool = False) -> Group | None:
        """Apply one journal line (`kind`, `payload`): read back into its record (an older
        version upgraded), then `apply_record`. ReplayError if it is no record or does not apply."""
        try:
            record = parse(kind, payload, self.cluster.intra)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"][1:]) or "(record)"  # (loc[0]: the union's tag)
            raise ReplayError(f"journal record {kind!r} does not read: {where}: {first['msg']}") from None
        return self.apply_record(record, replay)

    def apply_record(self, record, replay: bool = False) -> Group | None:
        """Apply one record (live: after journaling it; replay: read from the journal).

        A departure (`move_out`, `leave`) returns what is left of the job's group, for the
        service's departure-time repairs; other records return None."""
        handler = self._table.get(type(record))
        if handler is None:
            raise ReplayError(f"a {record.kind!r} record is not a state change (the journal's first record only)")
        try:
            return handler(record, replay)
        except IllegalTransition as exc:
            raise ReplayError(f"{record.kind} record: {exc}") from None

    # -- the live-only records --------------------------------------------------------------
    def _submit(self, r: Submit, replay: bool) -> None:
        self.jobs[r.job.job_id] = LiveJob(r.job, r.token_hash, r.at)

    def _first_call(self, r: FirstCall, replay: bool) -> None:
        self.jobs[r.job_id].first_call_at = r.at

    def _grant(self, r: Grant, replay: bool) -> None:
        job = self.jobs[r.job_id]
        if replay:  # the controller re-grants it: its turn order is rebuilt by the same calls
            got: list = []
            ctl = self.cluster.controllers[job.group_id]
            ctl.request(r.job_id, r.phase, got.append)
            if not got:
                raise ReplayError(f"grant of {r.phase} to {r.job_id} does not replay")
        job.held[r.phase] = r.permit()
        self.grants += 1
        if job.first_phase_at is None:
            job.first_phase_at, job.timed_from = r.at, job.iterations
        if r.phase == Phase.INIT:
            job.inited = r.epoch

    def _turn(self, r: Turn, replay: bool) -> None:
        """A member lost its turn, or rejoined the rotation (core/turns.py)."""
        ctl = self.cluster.controllers[self.jobs[r.job_id].group_id]
        ctl.skip(r.job_id, r.phase) if r.absent else ctl.rejoin(r.job_id)

    def _release(self, r: Release, replay: bool) -> None:
        job, phase = self.jobs[r.job_id], r.phase
        grant = job.held.pop(phase)
        if phase == Phase.ROLLOUT:
            job.last_factor = float(grant.get("rollout_factor", 1.0))
        self.cluster.controllers[job.group_id].release(r.job_id, phase)
        run_s = r.timings["run_s"]
        job.last_run[phase] = run_s
        old = job.profile.get(phase)
        job.profile[phase] = run_s if old is None else (1 - EWMA) * old + EWMA * run_s
        if phase == Phase.TRAIN:
            job.iterations += 1
            # The iteration's end: its permit's grant, then the phase as the job measured it
            # (both journaled: a replay finds the same end).
            end = grant["at"] + sum(r.timings.get(k, 0.0) for k in ("onload_s", "run_s", "offload_s"))
            job.iteration_ends = [*job.iteration_ends[-WINDOW:], end]

    def _tail(self, r: Tail, replay: bool) -> None:
        self.cluster.controllers[self.jobs[r.job_id].group_id].tail_started(r.job_id)

    def _observe(self, r: Observe, replay: bool) -> None:
        """The simulator's drift repair, unchanged: measured times may re-plan the job's group
        and decide evictions and compactions (journaled by `commit`; replayed: not redone)."""
        job = self.jobs[r.job_id]
        try:
            self.cluster.observe(r.job_id, job.group_id, r.rollout_s, r.train_s, self.progress(r.at),
                                 commit=_replayed if replay else self.commit, rollout_factor=r.rollout_factor,
                                 sync_s=r.sync_s)
        except _Journaled:
            pass

    def _profiled(self, r: Profiled, replay: bool) -> None:
        """A job submitted without phase times was measured: planned with its measured profile
        from now on (its measured host memory counted too)."""
        self.cluster.apply(r)
        self.jobs[r.job_id].profiled = r.spec.phase_times()
        self._count_memory(r.job_id)

    def _node(self, r: Node, replay: bool) -> None:
        """The inventory changed: the pools' capacity is the live nodes' from now on."""
        if r.pool is None:
            self.nodes.lose(r.node_id)
        else:
            self.nodes.join(r.node_id, r.pool)
        if self.cluster.renumbered is None:  # (the map follows renumberings from now on)
            self.cluster.renumbered = {}
        self.cluster.set_capacity({p: self.nodes.capacity(p) for p in POOLS})

    def _bind(self, r: Bind, replay: bool) -> None:
        self.nodes.apply(Binding(r.group_id, r.pool, r.index, r.node_id))
        self.cluster.renumbered.pop(r.group_id, None)  # (the renumbering this binding follows is read)

    @property
    def inventory(self) -> bool:
        """Nodes were reported: placements are bound to them (live/nodemap.py)."""
        return self.cluster.renumbered is not None

    def node_ids(self, group_id: int, pool: str, indices) -> list[str | None]:
        """The node ids of a group's node indices of one pool (None where unbound)."""
        return self.nodes.nodes(group_id, pool, list(indices))

    def _memory(self, r: Memory, replay: bool) -> None:
        job = self.jobs[r.job_id]
        for pool, gb in r.host_gb.items():
            job.host_measured[pool] = max(job.host_measured.get(pool, 0.0), float(gb))
        self._count_memory(r.job_id)

    # -- the scheduling decisions, carried out by the shared ClusterState ------------------------
    def _place(self, r: Place, replay: bool) -> None:
        job, plan = self.jobs[r.job_id], r.plan
        set_status(job, RUNNING)
        self.cluster.apply(r)
        job.group_id, job.migrate = plan.group.group_id, False
        job.case = plan.case
        job.why = None if plan.why is None else plan.why.reason.value
        job.epoch += 1
        self._count_memory(r.job_id)

    def _compact(self, r: Compact, replay: bool) -> None:
        self.cluster.apply(r)

    def _movers(self, r: Movers, replay: bool) -> None:
        self.cluster.apply(r)
        for mv in r.moves:
            self.jobs[mv.job_id].migrate = True

    def _movers_v1(self, r: MoversV1, replay: bool) -> None:
        self.cluster.apply(r)
        for jid in r.job_ids:
            self.jobs[jid].migrate = True

    def _move_out(self, r: MoveOut, replay: bool) -> Group | None:
        job = self.jobs[r.job_id]
        set_status(job, MOVING)
        rest = self._out_of_group(job, r)
        if job.group_id is not None:  # its slot was reserved when the move was decided: it took it
            set_status(job, RUNNING)
            job.epoch += 1
            self._count_memory(r.job_id)
        return rest

    def _leave(self, r: Leave, replay: bool) -> Group | None:
        job = self.jobs[r.job_id]
        set_status(job, r.status)
        job.reason = r.reason
        return self._out_of_group(job, r)

    def _out_of_group(self, job: LiveJob, r: MoveOut | Leave) -> Group | None:
        """Reclaim the job's permits, then the departure (`ClusterState.apply`); what is left of
        its group. The job is then where the cluster state has it (a reserved slot, or none)."""
        if job.group_id is not None:
            self.cluster.controllers[job.group_id].withdraw(job.job_id)
        rest = self.cluster.apply(r)
        job.group_id, job.held, job.migrate = self.cluster.group_of.get(job.job_id), {}, False
        return rest

    # -- host memory as the planner counts it ----------------------------------------------------
    def counted(self, spec: JobSpec) -> JobSpec:
        """`spec` with the host memory a node's residency budget counts for its job: per pool,
        the larger of what it declared and the most it was measured to hold."""
        job = self.jobs[spec.job_id]
        declared, seen = job.spec.host_gb, job.host_measured
        host = HostGB(rollout=max(declared.rollout, seen.get(Pool.ROLLOUT, 0.0)),
                      train=max(declared.train, seen.get(Pool.TRAIN, 0.0)))
        # Only host_gb changes: the copy's cached phase-time figures stay right.
        return spec if host == spec.host_gb else spec.model_copy(update={"host_gb": host})

    def planning_spec(self, job_id: str) -> JobSpec:
        """The profile the scheduler plans the job with: measured times (drift repair) if any,
        and counted host memory."""
        return self.counted(self.cluster.planned.get(job_id, self.jobs[job_id].spec))

    def _count_memory(self, job_id: str) -> None:
        """Make every profile the planner reads for this job count its measured host memory."""
        cs = self.cluster
        est = cs.estimates.get(job_id)
        if est is not None:
            est.job = self.counted(est.job)
        if job_id in cs.planned:
            cs.planned[job_id] = self.counted(cs.planned[job_id])
        gid = self.jobs[job_id].group_id
        if gid is None or gid not in cs.groups:
            return
        g = cs.groups[gid]
        member = g.member(job_id)
        spec = self.counted(member.job)
        if spec is not member.job:
            g = replace(g, members=tuple(Member(spec, m.rollout_nodes, m.train_nodes, m.rollout_factor)
                                         if m.job_id == job_id else m for m in g.members))
            cs.groups[gid] = g
            cs.controllers[gid].update_group(g)

    # -- snapshots ---------------------------------------------------------------------------
    def dump(self) -> dict:
        """The whole state as JSON-native data (a journal snapshot)."""
        return dump_state(self)

    def load(self, d: dict) -> None:
        """Adopt a snapshot taken by `dump` (on a fresh state)."""
        load_state(self, d, LiveJob)

    # -- queries -------------------------------------------------------------------------------
    def progress(self, now: float) -> Mapping[str, tuple[int, float]]:
        """(iterations done, seconds since submission) of every active job, for the policy.

        Computed per job on lookup: a decision reads the members of a few groups, and
        building the whole map for every decision made each submission O(all jobs)."""
        return _Progress(self.jobs, now)


class _Progress(Mapping):
    """A read-only view of the active jobs' progress at one instant."""

    def __init__(self, jobs: dict[str, LiveJob], now: float) -> None:
        self._jobs, self._now = jobs, now

    def __getitem__(self, job_id: str) -> tuple[int, float]:
        r = self._jobs.get(job_id)
        if r is None or not r.active:
            raise KeyError(job_id)
        return r.iterations, self._now - r.started_at

    def __iter__(self) -> Iterator[str]:
        return (j for j, r in self._jobs.items() if r.active)

    def __len__(self) -> int:
        return sum(1 for r in self._jobs.values() if r.active)
