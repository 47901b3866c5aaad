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
  movers    {group_id, dissolve, moves}         a regrouping: each mover's slot is reserved at once;
                                                (older journals: {job_ids, group_ids}, re-placed at the boundary)
  move_out  {job_id}                            a mover (or re-admitted job) leaves its group; a mover
                                                with a reserved slot takes it
  leave     {job_id, status, reason}            done or failed: permits reclaimed, group left
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from rollmux.core.cluster_state import ClusterState, SchedulerConfig
from rollmux.core.env import Environment
from rollmux.core.group import Group
from rollmux.core.group_controller import GroupController
from rollmux.core.inter_group import RollMuxPlacement
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.live.codec import (
    group_from_dict,
    group_to_dict,
    job_to_dict,
    move_from_dict,
    plan_from_dict,
    plan_to_dict,
    regroup_from_dict,
)

EWMA = 0.3  # weight of the newest phase measurement in a job's profile


class ReplayError(RuntimeError):
    """A journal record does not apply to the state rebuilt so far."""


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

    @property
    def active(self) -> bool:
        """Still scheduled (not done or failed)."""
        return self.status in ("queued", "running", "moving")


class LiveState:
    """Jobs plus the shared `ClusterState`; changed only through `apply`."""

    def __init__(self, env: Environment, cluster: ClusterSpec, cfg: SchedulerConfig) -> None:
        self.cfg = cfg
        self.cluster = ClusterState(env, cluster, RollMuxPlacement(cfg.intra), cfg)
        self.jobs: dict[str, LiveJob] = {}
        self.grants = 0      # permits granted so far (for status)

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
        plan = plan_from_dict(p["plan"], self.cfg.intra)
        job = self.jobs[p["job_id"]]
        self.cluster.apply(plan, p["arrival"])
        job.group_id, job.status, job.migrate = plan.group.group_id, "running", False
        job.case = plan.case.value
        job.epoch += 1

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
        job.held.pop(phase)
        self.cluster.controllers[job.group_id].release(job.spec.job_id, phase)
        run_s = p["timings"]["run_s"]
        old = job.profile.get(phase)
        job.profile[phase] = run_s if old is None else (1 - EWMA) * old + EWMA * run_s
        if phase == "train":
            job.iterations += 1

    def _apply_tail(self, p: dict, replay: bool) -> None:
        job = self.jobs[p["job_id"]]
        self.cluster.controllers[job.group_id].tail_started(job.spec.job_id)

    def _apply_movers(self, p: dict, replay: bool) -> None:
        if "moves" not in p:  # a journal written before moves were reserved
            self.cluster.dissolving.update(p["group_ids"])
            for jid in p["job_ids"]:
                self.jobs[jid].migrate = True
            return
        r = regroup_from_dict(p, self.cfg.intra)
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
        return rest

    def _apply_leave(self, p: dict, replay: bool) -> Group | None:
        job = self.jobs[p["job_id"]]
        job.status, job.reason = p["status"], p.get("reason")
        self.cluster.cancel_arrival(p["job_id"])  # it leaves for good before a planned move
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
                "controllers": {str(g): c.export_state() for g, c in cs.controllers.items()},
                "dissolving": sorted(cs.dissolving), "next_gid": cs._next_gid, "cases": cs.cases,
                "arriving": {j: {"job_id": m.job_id, "from_group": m.from_group, "plan": plan_to_dict(m.plan),
                                 "migration_s": m.migration_s} for j, m in cs.arriving.items()},
                "nodes": cs.ledger.nodes}

    def load(self, d: dict) -> None:
        """Adopt a snapshot taken by `dump` (on a fresh state)."""
        cs = self.cluster
        for jid, r in d["jobs"].items():
            self.jobs[jid] = LiveJob(**{**r, "spec": JobSpec.model_validate(r["spec"])})
        self.grants = d["grants"]
        for gd in d["groups"]:
            g = group_from_dict(gd, self.cfg.intra)
            cs.groups[g.group_id] = g
            cs.controllers[g.group_id] = GroupController(cs.env, g, self.cfg.intra)
            cs.controllers[g.group_id].import_state(d["controllers"][str(g.group_id)])
        cs.dissolving = set(d["dissolving"])
        cs.arriving = {j: move_from_dict(m, self.cfg.intra) for j, m in d.get("arriving", {}).items()}
        cs._next_gid, cs.cases = d["next_gid"], dict(d["cases"])
        for pool, n in d["nodes"].items():
            cs.ledger.provision(pool, n, cs.env.now())

    # -- queries ----------------------------------------------------------------------
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
