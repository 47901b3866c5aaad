"""The live scheduler's state machine: every change is a journal record applied here.

The service decides (placement policy, the group controllers' turn order),
journals what it decided, then calls `apply` with the record; a restarted
service replays the journal through the same `apply`. Nothing here reads the
clock for a decision or calls the placement policy, so a replay rebuilds
exactly the state that was journaled: groups, pins, each controller's turn
order and held permits, each job's iterations and measured profile.

Record kinds (payloads are JSON-native):
  submit    {job, token_hash, at}               a job is known (not yet placed)
  place     {job_id, plan, arrival}             it joins a group (policy's validated plan)
  grant     {job_id, phase, group_id, ...}      a permit was granted
  release   {job_id, phase, timings}            a permit was released; train ends an iteration
  tail      {job_id}                            its rollout is tail-bound (long-tail migration)
  observe   {job_id, rollout_s, train_s, at,    an iteration's measured phase times (its rollout ran at
             rollout_factor}                    the elastic factor given; older journals: none, read
                                                as its member's now): the simulator's drift repair
                                                (`ClusterState.observe`) re-plans the group; the
                                                evictions it decides follow as `movers`, the rollout
                                                nodes its compaction gives back as `compact`
  compact   {group_id, node}                    rollout compaction (elastic rollout only): the group
                                                gives back its idle rollout node `node`, the members
                                                pinned there narrowed onto their other nodes
  memory    {job_id, host_gb}                   the most host memory (GB per node, by pool) the job's
                                                offloaded state was measured to hold; a node's
                                                residency counts max(declared, measured)
  movers    {group_id, dissolve, moves}         a regrouping: each mover's slot is reserved at once;
                                                (older journals: {job_ids, group_ids}, re-placed at the boundary)
  move_out  {job_id}                            a mover (or re-admitted job) leaves its group; a mover
                                                with a reserved slot takes it
  leave     {job_id, status, reason}            done or failed: permits reclaimed, group left
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from rollmux.core.cluster_state import ClusterState
from rollmux.core.config import SchedulerConfig
from rollmux.core.colo_controller import ColocatedController
from rollmux.core.env import Environment
from rollmux.core.estimates import PhaseEstimate
from rollmux.core.group import Group, Member
from rollmux.core.group_controller import GroupController
from rollmux.core.placement import build_policy
from rollmux.core.repair.moves import Regroup
from rollmux.core.spec import ClusterSpec, HostGB, JobSpec
from rollmux.core.placement.why import WhyTally
from rollmux.live.codec import (
    group_from_dict,
    group_to_dict,
    job_to_dict,
    move_from_dict,
    plan_from_dict,
    plan_to_dict,
    regroup_from_dict,
    regroup_to_dict,
)

EWMA = 0.3  # weight of the newest phase measurement in a job's profile


class ReplayError(RuntimeError):
    """A journal record does not apply to the state rebuilt so far."""


class _Journaled(Exception):
    """Replay of an `observe`: the evictions it decided are the journal's next `movers` records."""


def _replayed(*_decision) -> None:
    # Replayed: what an observe decided (a regrouping, a compaction) is carried out by the
    # journal's `movers` and `compact` records that follow it.
    raise _Journaled


@dataclass
class LiveJob:
    """What the service knows of one submitted job."""

    spec: JobSpec
    token_hash: str
    started_at: float                 # wall-clock (epoch) seconds of submission
    group_id: int | None = None       # None while queued or moving
    status: str = "queued"            # queued | running | moving | done | failed
    iterations: int = 0
    epoch: int = 0                    # placements so far: a move or re-admission bumps it
    migrate: bool = False             # leave the group at the next iteration boundary
    held: dict[str, dict] = field(default_factory=dict)      # phase -> the grant, until released
    profile: dict[str, float] = field(default_factory=dict)  # phase -> EWMA of measured run seconds
    reason: str | None = None
    case: str | None = None           # how its latest placement was found (Algorithm 1's case)
    why: str | None = None            # isolated: why no group took it (core/why.py's reason)
    last_run: dict[str, float] = field(default_factory=dict)      # phase -> its last measured run seconds
    host_measured: dict[str, float] = field(default_factory=dict)  # pool -> most host GB per node measured
    last_factor: float = 1.0          # the elastic factor its last rollout ran at (core/elastic.py)

    @property
    def over_memory(self) -> bool:
        """Measured to hold more host memory than it declared (on either pool)."""
        return any(gb > getattr(self.spec.host_gb, pool) + 1e-9 for pool, gb in self.host_measured.items())

    @property
    def active(self) -> bool:
        """Still scheduled (not done or failed)."""
        return self.status in ("queued", "running", "moving")


class LiveState:
    """Jobs plus the shared `ClusterState`; changed only through `apply`."""

    def __init__(self, env: Environment, cluster: ClusterSpec, cfg: SchedulerConfig) -> None:
        self.cfg = cfg
        # The policy `rollmux simulate` runs with the same config (core/policy.py). With the
        # co-located mode a job may be told to run co-located: its permits name its training
        # nodes for every phase (core/colo_controller.py), and the job must honour a rollout
        # permit on pool "train" (the veRL way). With elastic rollout a job may be placed on more
        # or fewer rollout nodes than it declared, and compaction may later narrow it: its
        # rollout permits name the nodes it has now.
        policy = build_policy(cfg, cluster)
        self.cluster = ClusterState(env, cluster, policy, cfg)
        self.jobs: dict[str, LiveJob] = {}
        self.grants = 0      # permits granted so far (for status)
        # How a live `observe` carries out the evictions it decides; the service journals each
        # first (a `movers` record). Without a service: applied as a movers record would be.
        self.regroup_commit: Callable[[Regroup], None] = lambda r: self.apply("movers", regroup_to_dict(r))
        # Likewise each rollout node a compaction gives back (a `compact` record).
        self.compact_commit: Callable[[int, int], None] = lambda g, n: self.apply("compact",
                                                                                  {"group_id": g, "node": n})

    def apply(self, kind: str, payload: dict, replay: bool = False) -> Group | None:
        """Apply one journal record (live: after journaling it; replay: from the journal).

        A departure (`move_out`, `leave`) returns what is left of the job's group, for the
        service's departure-time repairs; other records return None."""
        handler = getattr(self, f"_apply_{kind}", None)
        if handler is None:
            raise ReplayError(f"unknown journal record kind {kind!r}")
        return handler(payload, replay)

    # -- records ----------------------------------------------------------------------
    def _apply_submit(self, p: dict, replay: bool) -> None:
        job = JobSpec.model_validate(p["job"])
        self.jobs[job.job_id] = LiveJob(job, p["token_hash"], p["at"])

    def _apply_place(self, p: dict, replay: bool) -> None:
        plan = plan_from_dict(p["plan"], self.cluster.intra)
        job = self.jobs[p["job_id"]]
        self.cluster.apply(plan, p["arrival"])
        job.group_id, job.status, job.migrate = plan.group.group_id, "running", False
        job.case = plan.case.value
        job.why = None if plan.why is None else plan.why.reason.value
        job.epoch += 1
        self._count_memory(p["job_id"])

    def _apply_grant(self, p: dict, replay: bool) -> None:
        job = self.jobs[p["job_id"]]
        if replay:  # the controller re-grants it: its turn order is rebuilt by the same calls
            got: list = []
            ctl = self.cluster.controllers[job.group_id]
            ctl.request(p["job_id"], p["phase"], got.append)
            if not got:
                raise ReplayError(f"grant of {p['phase']} to {p['job_id']} does not replay")
        job.held[p["phase"]] = dict(p)
        self.grants += 1

    def _apply_release(self, p: dict, replay: bool) -> None:
        job = self.jobs[p["job_id"]]
        phase = p["phase"]
        grant = job.held.pop(phase)
        if phase == "rollout":
            job.last_factor = float(grant.get("rollout_factor", 1.0))
        self.cluster.controllers[job.group_id].release(job.spec.job_id, phase)
        run_s = p["timings"]["run_s"]
        job.last_run[phase] = run_s
        old = job.profile.get(phase)
        job.profile[phase] = run_s if old is None else (1 - EWMA) * old + EWMA * run_s
        if phase == "train":
            job.iterations += 1

    def _apply_tail(self, p: dict, replay: bool) -> None:
        job = self.jobs[p["job_id"]]
        self.cluster.controllers[job.group_id].tail_started(job.spec.job_id)

    def _apply_observe(self, p: dict, replay: bool) -> None:
        """The simulator's drift repair, unchanged: measured times may re-plan the job's group and
        evict members. Replayed, the re-plan is redone (it is a function of the measurements) and
        the evictions are not: they are the journaled `movers` records that follow."""
        job = self.jobs[p["job_id"]]
        commit = _replayed if replay else self.regroup_commit
        try:
            self.cluster.observe(p["job_id"], job.group_id, p["rollout_s"], p["train_s"], self.progress(p["at"]),
                                 commit=commit, rollout_factor=p.get("rollout_factor"),
                                 compact_commit=_replayed if replay else self.compact_commit)
        except _Journaled:
            pass

    def _apply_compact(self, p: dict, replay: bool) -> None:
        self.cluster.apply_compaction(p["group_id"], p["node"])

    def _apply_memory(self, p: dict, replay: bool) -> None:
        job = self.jobs[p["job_id"]]
        for pool, gb in p["host_gb"].items():
            job.host_measured[pool] = max(job.host_measured.get(pool, 0.0), float(gb))
        self._count_memory(p["job_id"])

    def counted(self, spec: JobSpec) -> JobSpec:
        """`spec` with the host memory a node's residency budget counts for its job: per pool,
        the larger of what it declared and the most it was measured to hold."""
        job = self.jobs[spec.job_id]
        declared, seen = job.spec.host_gb, job.host_measured
        host = HostGB(rollout=max(declared.rollout, seen.get("rollout", 0.0)),
                      train=max(declared.train, seen.get("train", 0.0)))
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
            g = replace(g, members=tuple(Member(spec, m.rollout_nodes, m.train_nodes, m.rollout_factor) if m.job_id == job_id else m
                                         for m in g.members))
            cs.groups[gid] = g
            cs.controllers[gid].update_group(g)

    def _apply_movers(self, p: dict, replay: bool) -> None:
        if "moves" not in p:  # a journal written before moves were reserved
            self.cluster.dissolving.update(p["group_ids"])
            for jid in p["job_ids"]:
                self.jobs[jid].migrate = True
            return
        r = regroup_from_dict(p, self.cluster.intra)
        self.cluster.apply_regroup(r)
        for mv in r.moves:
            self.jobs[mv.job_id].migrate = True

    def _apply_move_out(self, p: dict, replay: bool) -> Group | None:
        job_id = p["job_id"]
        self.jobs[job_id].status = "moving"
        rest = self._out_of_group(job_id)
        if job_id in self.cluster.arriving:  # its slot was reserved when the move was decided
            job = self.jobs[job_id]
            job.group_id, job.status = self.cluster.arrive(job_id), "running"
            job.epoch += 1
            self._count_memory(job_id)
        return rest

    def _apply_leave(self, p: dict, replay: bool) -> Group | None:
        job = self.jobs[p["job_id"]]
        job.status, job.reason = p["status"], p.get("reason")
        self.cluster.cancel_arrival(p["job_id"])  # it leaves for good before a planned move
        self.cluster.forget(p["job_id"])
        return self._out_of_group(p["job_id"])

    def _out_of_group(self, job_id: str) -> Group | None:
        """Reclaim the job's permits and take it out of its group; what is left of the group."""
        job = self.jobs[job_id]
        rest = None
        if job.group_id is not None:
            self.cluster.controllers[job.group_id].withdraw(job_id)
            rest = self.cluster.leave(job_id, job.group_id)
        job.group_id, job.held, job.migrate = None, {}, False
        return rest

    # -- snapshots --------------------------------------------------------------------
    def dump(self) -> dict:
        """The whole state as JSON-native data (a journal snapshot)."""
        cs = self.cluster
        jobs = {j: {**{k: v for k, v in vars(r).items() if k != "spec"}, "spec": job_to_dict(r.spec)}
                for j, r in self.jobs.items()}
        return {"jobs": jobs, "grants": self.grants,
                "groups": [group_to_dict(g) for g in cs.groups.values()],
                "colocated": [group_to_dict(g) for g in cs.colocated.values()],
                "controllers": {str(g): c.export_state() for g, c in cs.controllers.items()},
                "dissolving": sorted(cs.dissolving), "next_gid": cs._next_gid, "cases": cs.cases,
                "why": cs.why.to_json(),
                "arriving": {j: {"job_id": m.job_id, "from_group": m.from_group, "plan": plan_to_dict(m.plan),
                                 "migration_s": m.migration_s} for j, m in cs.arriving.items()},
                "nodes": cs.ledger.nodes,
                "estimates": {j: _estimate_to_dict(e) for j, e in cs.estimates.items()},
                "planned": {j: job_to_dict(s) for j, s in cs.planned.items()}, "compacted": cs.compacted}

    def load(self, d: dict) -> None:
        """Adopt a snapshot taken by `dump` (on a fresh state)."""
        cs = self.cluster
        for jid, r in d["jobs"].items():
            self.jobs[jid] = LiveJob(**{**r, "spec": JobSpec.model_validate(r["spec"])})
        self.grants = d["grants"]
        for gd in d["groups"]:
            g = group_from_dict(gd, self.cluster.intra)
            cs.groups[g.group_id] = g
            cs.controllers[g.group_id] = GroupController(cs.env, g, self.cluster.intra)
            cs.controllers[g.group_id].import_state(d["controllers"][str(g.group_id)])
        for gd in d.get("colocated", ()):  # (older snapshots: none; the service refused the mode)
            g = group_from_dict(gd, self.cluster.intra)
            cs.colocated[g.group_id] = g
            cs.controllers[g.group_id] = ColocatedController(cs.env, g, self.cluster.intra)
            cs.controllers[g.group_id].import_state(d["controllers"][str(g.group_id)])
        cs.dissolving = set(d["dissolving"])
        cs.arriving = {j: move_from_dict(m, self.cluster.intra) for j, m in d.get("arriving", {}).items()}
        cs._next_gid, cs.cases = d["next_gid"], dict(d["cases"])
        cs.why = WhyTally.from_json(d.get("why", {}))  # older snapshots: none counted
        for pool, n in d["nodes"].items():
            cs.ledger.provision(pool, n, cs.env.now())
        cs.estimates = {j: _estimate_from_dict(e) for j, e in d.get("estimates", {}).items()}
        cs.planned = {j: JobSpec.model_validate(s) for j, s in d.get("planned", {}).items()}
        cs.compacted = d.get("compacted", 0)

    # -- queries ----------------------------------------------------------------------
    def progress(self, now: float) -> Mapping[str, tuple[int, float]]:
        """(iterations done, seconds since submission) of every active job, for the policy.

        Computed per job on lookup: a decision reads the members of a few groups, and
        building the whole map for every decision made each submission O(all jobs)."""
        return _Progress(self.jobs, now)


_ESTIMATE_FIELDS = ("window", "z", "min_n", "train_ratio", "over_max", "count", "solo_done_s")


def _estimate_to_dict(e: PhaseEstimate) -> dict:
    """A job's measured-profile estimate as JSON-native data (a snapshot's)."""
    return {"job": job_to_dict(e.job), "logs": list(e.logs), **{k: getattr(e, k) for k in _ESTIMATE_FIELDS}}


def _estimate_from_dict(d: dict) -> PhaseEstimate:
    """Rebuild an estimate from `_estimate_to_dict`'s form."""
    return PhaseEstimate(JobSpec.model_validate(d["job"]), logs=deque(d["logs"]),
                         **{k: d[k] for k in _ESTIMATE_FIELDS})


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
