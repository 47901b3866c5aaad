"""Trace-driven discrete-event simulator of a disaggregated RL cluster (DESIGN §5).

The simulator is one implementation of the execution seam: it owns a
`SimEnvironment`, feeds arrivals to a placement policy, applies validated
plans, runs one `GroupController` per group (the same class the live plane
uses) and plays each job as a simulated process that asks for permits,
runs its sampled phase durations and releases them. Departures re-plan the
group; an empty group releases its nodes. With node caps, arrivals queue FIFO.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from rollmux.accounting import Ledger
from rollmux.draws import rollout_draws, solo_seconds
from rollmux.env import SimEnvironment
from rollmux.errors import InputError
from rollmux.group import Group
from rollmux.group_controller import ROLLOUT, TRAIN, Grant, GroupController
from rollmux.intra_group import IntraConfig, head_finish, plan_group
from rollmux.metrics import JobOutcome, PolicyResult
from rollmux.placement import ClusterView, PlacementPlan, PlacementPolicy, validate_plan
from rollmux.regroup import replacement_saving, shrink
from rollmux.spec import ClusterSpec, JobSpec


@dataclass(frozen=True)
class SimConfig:
    """Simulation knobs shared by all group-based policies."""

    seed: int = 0
    max_group_size: int = 5
    intra: IntraConfig = field(default_factory=IntraConfig)
    shrink: bool = True           # release nodes no remaining member needs (beyond the paper)
    regroup: bool = True          # dissolve a group whose members fit elsewhere for less (beyond the paper)
    migration_stall_s: float = 300.0  # a migrating job's pause: state moved, cold start on new nodes
    batch_order: bool = True      # jobs arriving together are placed shortest cycle first (beyond the paper)
    consolidate: int = 2          # on any departure, also try to dissolve groups of at most this many members


class SimulationStalled(RuntimeError):
    """The event queue emptied while jobs were unfinished (a scheduling deadlock)."""


@dataclass
class _JobRun:
    job: JobSpec
    group_id: int
    rollouts: np.ndarray
    start_s: float
    done: int = 0
    migrate: bool = False  # leave the group at the next iteration boundary and be re-placed


class Simulation:
    """One policy on one trace, from the first arrival to the last departure."""

    def __init__(self, jobs: list[JobSpec], cluster: ClusterSpec, policy: PlacementPolicy,
                 cfg: SimConfig | None = None) -> None:
        for job in jobs:
            reason = cluster.job_unplaceable_reason(job)
            if reason is not None:
                raise InputError(f"job {job.job_id}", f"can never be placed: {reason}")
        self.jobs, self.cluster, self.policy = jobs, cluster, policy
        self.cfg = cfg or SimConfig()
        self.env = SimEnvironment()
        self.ledger = Ledger(cluster)
        self.groups: dict[int, Group] = {}
        self.controllers: dict[int, GroupController] = {}
        self.runs: dict[str, _JobRun] = {}
        self.tail_end: dict[str, float] = {}
        self.queue: deque[JobSpec] = deque()
        self.outcomes: list[JobOutcome] = []
        self.cases: dict[str, int] = {}
        self.decision_ms: list[float] = []
        self.dissolving: set[int] = set()
        self._batch: list[JobSpec] = []
        self.migrations = 0
        self._next_gid = 0

    # -- driver ---------------------------------------------------------------------
    def run(self, progress=None) -> PolicyResult:
        """Simulate the whole trace; `progress(done, total)` is called as jobs finish."""
        self._progress = progress
        for job in self.jobs:
            self.env.call_at(job.arrival_s, self._arrive, job)
        self.env.run()
        if len(self.outcomes) != len(self.jobs):
            stuck = sorted(set(j.job_id for j in self.jobs) - {o.job_id for o in self.outcomes})
            raise SimulationStalled(f"{self.policy.name}: {len(stuck)} jobs never finished, e.g. {stuck[:5]}")
        self.ledger.close(self.env.now())
        return PolicyResult.from_ledger(self.policy.name, self.ledger, len(self.jobs), self.outcomes,
                                        placements=dict(self.cases), decision_ms=self.decision_ms)

    # -- placement ------------------------------------------------------------------
    def view(self) -> ClusterView:
        """A frozen snapshot for the policy (groups being dissolved are not offered)."""
        pools = self.cluster.pools
        free = {p: (None if getattr(pools, p).max_nodes is None
                    else getattr(pools, p).max_nodes - self.ledger.nodes[p]) for p in ("rollout", "train")}
        now = self.env.now()
        progress = {jid: (run.done, now - run.start_s) for jid, run in self.runs.items()}
        groups = tuple(g for g in self.groups.values() if g.group_id not in self.dissolving)
        return ClusterView(self.cluster, groups, free["rollout"], free["train"],
                           self.cfg.max_group_size, self._next_gid, progress)

    def _arrive(self, job: JobSpec) -> None:
        if not self.cfg.batch_order:
            self.queue.append(job)
            self._drain()
            return
        # Collect every arrival of this instant, then place them together: shortest
        # cycle first packs like first-fit bin packing instead of file order.
        if not self._batch:
            self.env.call_at(self.env.now(), self._flush_batch)
        self._batch.append(job)

    def _flush_batch(self) -> None:
        self.queue.extend(sorted(self._batch, key=lambda j: j.solo_iter_s))
        self._batch = []
        self._drain()

    def _drain(self) -> None:
        while self.queue:
            job = self.queue[0]
            view = self.view()
            t0 = time.perf_counter()
            plan = self.policy.place(job, view)
            self.decision_ms.append((time.perf_counter() - t0) * 1e3)
            if plan is None:
                return  # FIFO: the head waits for nodes, and so does everyone behind it
            validate_plan(plan, job, view)
            self.queue.popleft()
            self._apply(plan)
            self._start(job, plan.group.group_id)

    def _apply(self, plan: PlacementPlan) -> None:
        g, now = plan.group, self.env.now()
        self.ledger.provision("rollout", plan.added_rollout_nodes, now)
        self.ledger.provision("train", plan.added_train_nodes, now)
        if plan.job_id not in self.runs:  # arrivals only: a migrating job was counted when it arrived
            self.cases[plan.case.value] = self.cases.get(plan.case.value, 0) + 1
        self.groups[g.group_id] = g
        if g.group_id >= self._next_gid:
            self._next_gid = g.group_id + 1
        if g.group_id in self.controllers:
            self.controllers[g.group_id].update_group(g)
        else:
            self.controllers[g.group_id] = GroupController(self.env, g, self.cfg.intra)

    # -- simulated job process ------------------------------------------------------------
    def _start(self, job: JobSpec, gid: int) -> None:
        run = self.runs.get(job.job_id)
        if run is None:
            self.runs[job.job_id] = _JobRun(job, gid, rollout_draws(job, self.cfg.seed), self.env.now())
        else:  # a migrated job resumes where it stopped
            run.group_id, run.migrate = gid, False
        self._request(job.job_id, ROLLOUT)

    def _request(self, jid: str, phase: str) -> None:
        ctl = self.controllers[self.runs[jid].group_id]
        ctl.request(jid, phase, self._on_rollout_grant if phase == ROLLOUT else self._on_train_grant)

    def _on_rollout_grant(self, g: Grant) -> None:
        run, now = self.runs[g.job_id], self.env.now()
        r = float(run.rollouts[run.done])
        ctl = self.controllers[g.group_id]
        tails = [[(self.tail_end[j], f) for j, f in ctl.tails_on(n).items()] for n in g.nodes]
        head = head_finish(tails, now + g.switch_s, (1.0 - g.tail_share) * r)
        gpus = run.job.rollout_gpus
        self.ledger.busy("rollout", gpus, head - now)
        end = head
        if g.tail_share > 0:
            end = head + g.tail_share * r + self.cfg.intra.migration_overhead_s
            self.tail_end[g.job_id] = end
            self.ledger.busy("rollout", gpus * self.cfg.intra.tail_worker_frac, end - head)
            self.env.call_at(head, ctl.tail_started, g.job_id)
        self.env.call_at(end, self._rollout_done, g.job_id)

    def _rollout_done(self, jid: str) -> None:
        self.controllers[self.runs[jid].group_id].release(jid, ROLLOUT)
        self._request(jid, TRAIN)

    def _on_train_grant(self, g: Grant) -> None:
        run = self.runs[g.job_id]
        dur = g.switch_s + run.job.train_time(float(run.rollouts[run.done]))
        self.ledger.busy("train", run.job.train_gpus, dur)
        self.env.call_later(dur, self._train_done, g.job_id)

    def _train_done(self, jid: str) -> None:
        self.controllers[self.runs[jid].group_id].release(jid, TRAIN)
        self.env.call_later(self.runs[jid].job.sync_s, self._sync_done, jid)

    def _sync_done(self, jid: str) -> None:
        run = self.runs[jid]
        run.done += 1
        if run.done >= run.job.iterations:
            self._depart(run)
        elif run.migrate:
            self.migrations += 1
            self._leave(run)
            self.env.call_later(self.cfg.migration_stall_s, self._rearrive, run.job)
        else:
            self._request(jid, ROLLOUT)

    def _rearrive(self, job: JobSpec) -> None:
        self.queue.appendleft(job)  # it was admitted before: it does not queue behind new arrivals
        self._drain()

    # -- departures ---------------------------------------------------------------------
    def _depart(self, run: _JobRun) -> None:
        job, now = run.job, self.env.now()
        self.outcomes.append(JobOutcome(job.job_id, job.iterations, run.start_s, now,
                                        solo_seconds(job, run.rollouts), job.slo, job.solo_iter_s))
        del self.runs[job.job_id]
        self.tail_end.pop(job.job_id, None)
        rest = self._leave(run)
        if self.cfg.regroup and getattr(self.policy, "regroups", False):
            if rest is not None:
                self._consider_dissolving(rest)
            if self.cfg.consolidate:
                # The departure freed room: small groups elsewhere may now fit into others.
                for g in sorted(self.groups.values(), key=lambda g: g.size):
                    if g.size <= self.cfg.consolidate and g.group_id in self.groups:
                        self._consider_dissolving(self.groups[g.group_id])
        if self._progress is not None:
            self._progress(len(self.outcomes), len(self.jobs))
        self._drain()

    def _leave(self, run: _JobRun) -> Group | None:
        """Remove the job from its group; return what is left (None if the group is gone)."""
        now, old = self.env.now(), self.groups[run.group_id]
        rest = Group(old.group_id, old.n_rollout, old.n_train,
                     tuple(m for m in old.members if m.job_id != run.job.job_id))
        if not rest.members:
            del self.groups[rest.group_id], self.controllers[rest.group_id]
            self.dissolving.discard(rest.group_id)
            self.ledger.release("rollout", rest.n_rollout, now)
            self.ledger.release("train", rest.n_train, now)
            return None
        remap = None
        if self.cfg.shrink:
            rest, remap, freed_r, freed_t = shrink(rest)
            self.ledger.release("rollout", freed_r, now)
            self.ledger.release("train", freed_t, now)
        # Keep the order: a departure can only shorten the period, and a
        # re-ordering would cost the remaining members a transient.
        rest = plan_group(rest, self.cfg.intra, reorder=False)
        self.groups[rest.group_id] = rest
        self.controllers[rest.group_id].update_group(rest, remap)
        return rest

    def _consider_dissolving(self, group: Group) -> None:
        """Dissolve the group if its members fit elsewhere for less (they migrate one by one)."""
        if group.group_id in self.dissolving:
            return
        self.dissolving.add(group.group_id)  # hides it from the view below
        saving = replacement_saving(group, self.view(), self.policy, self.cfg.migration_stall_s)
        if saving <= 1e-9:
            self.dissolving.discard(group.group_id)
            return
        for m in group.members:
            self.runs[m.job_id].migrate = True


def simulate(jobs: list[JobSpec], cluster: ClusterSpec, policy: PlacementPolicy,
             cfg: SimConfig | None = None, progress=None) -> PolicyResult:
    """Run one group-based policy over a trace."""
    return Simulation(jobs, cluster, policy, cfg).run(progress)
