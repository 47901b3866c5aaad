"""Trace-driven discrete-event simulator of a disaggregated RL cluster (DESIGN §5).

The simulator is one executor of the scheduler: it owns a `SimEnvironment`,
feeds arrivals and departures to the shared `ClusterState` (placement through
a pure policy, validated plans, one `GroupController` per group — the same
classes the live plane uses) and plays each job as a simulated process that
asks for permits, runs its sampled phase durations and releases them. With
node caps, arrivals queue FIFO.

It carries out every decision as the live service does, through the records
`ClusterState.apply` takes (core/records.py): a placement is decided, then its
records applied (`ClusterState.place`); a mover's boundary is a `MoveOut`, a
departure a `Leave`; the repairs' own decisions are applied as they are made.
The simulator's journal is a null one: nothing is written.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from rollmux.core.config import SchedulerConfig
from rollmux.core.elastic import member_rollout_gpus
from rollmux.core.env import SimEnvironment
from rollmux.core.grant import Grant
from rollmux.core.group_controller import ROLLOUT, TRAIN
from rollmux.core.intra_group import head_finish
from rollmux.core.placement import PlacementPolicy, build_policy
from rollmux.core.records import Leave, MoveOut
from rollmux.core.repair.moves import slice_rate
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.state import ClusterState
from rollmux.core.vocabulary import JobStatus, Pool
from rollmux.errors import InputError
from rollmux.sim.accounting import WORK, Accounting, job_outcome
from rollmux.sim.colocated import colocated_iteration
from rollmux.sim.draws import drift_scales
from rollmux.sim.link import SharedLink
from rollmux.sim.metrics import JobOutcome, PolicyResult
from rollmux.sim.runs import JobRun, RunProgress

ROLLOUT_POOL, TRAIN_POOL = Pool.ROLLOUT.value, Pool.TRAIN.value  # (booked on every phase: vocabulary.py)


class SimulationStalled(RuntimeError):
    """The event queue emptied while jobs were unfinished (a scheduling deadlock)."""


@dataclass
class MigrationStats:
    """Every migration: how many, the job-hours they stalled, the node time they held."""

    count: int = 0
    stall_s: float = 0.0
    cost_usd: float = 0.0

    def to_json(self) -> dict[str, float]:
        """The `migrations` object of the JSON: count, stall_hours, cost_usd."""
        return {"count": self.count, "stall_hours": self.stall_s / 3600, "cost_usd": self.cost_usd}


class Simulation:
    """One policy on one trace, from the first arrival to the last departure."""

    lone_fast_path = True  # play a lone member's iteration in one step (off: every phase by permits)

    def __init__(self, jobs: list[JobSpec], cluster: ClusterSpec, config: SchedulerConfig | None = None,
                 policy: PlacementPolicy | None = None, *, seed: int = 0, flat_sync: bool = False,
                 accounting: Accounting = WORK) -> None:
        """`config`: the scheduler's settings (default: the shipped profile); `policy`: built from
        it unless given (a baseline); `seed`: every rollout draw; `flat_sync`: weight sync sends
        one copy per rollout node across the inter-pool link (ablation), not one per job;
        `accounting`: when a job leaves (sim/accounting.py)."""
        for job in jobs:
            reason = cluster.job_unplaceable_reason(job)
            if reason is not None:
                raise InputError(f"job {job.job_id}", f"can never be placed: {reason}")
        self.cfg = config or SchedulerConfig()
        self.jobs, self.cluster = jobs, cluster
        self.policy = policy or build_policy(self.cfg, cluster)
        self.seed, self.flat_sync, self.accounting = seed, flat_sync, accounting
        self._last_departure_s = 0.0
        self.env = SimEnvironment()
        self.state = ClusterState(self.env, cluster, self.policy, self.cfg)
        self.ledger = self.state.ledger
        self.runs: dict[str, JobRun] = {}
        self.tail_end: dict[str, float] = {}
        self.queue: deque[JobSpec] = deque()
        self.outcomes: list[JobOutcome] = []
        self._batch: list[JobSpec] = []
        self.moves = MigrationStats()
        gbps = cluster.inter_pool_gbps
        self.link = SharedLink(self.env, gbps) if gbps is not None else None

    @property
    def migrations(self) -> int:
        """Migrations carried out so far."""
        return self.moves.count

    # -- driver ---------------------------------------------------------------------
    def run(self, progress=None) -> PolicyResult:
        """Simulate the whole trace; `progress(done, total)` is called as jobs finish."""
        self._progress = progress
        for job in self.jobs:
            self.env.call_at(job.arrival_s, self._arrive, job)
            leave = self.accounting.departure_s(job)
            if leave is not None:  # it leaves then whatever its progress
                self.env.call_at(leave, self._leave_now, job)
        self.env.run()
        if len(self.outcomes) != len(self.jobs):
            stuck = sorted(set(j.job_id for j in self.jobs) - {o.job_id for o in self.outcomes})
            raise SimulationStalled(f"{self.policy.name}: {len(stuck)} jobs never finished, e.g. {stuck[:5]}")
        self.ledger.close(self.accounting.close_s(self.env.now(), self._last_departure_s))
        regroups = self.cfg.regroup.enabled and self.state.regroups
        why = self.state.why.to_json() if self.state.explains else None
        return PolicyResult.from_ledger(self.policy.name, self.ledger, len(self.jobs), self.outcomes,
                                        placements=dict(self.state.cases), decision_ms=self.state.decision_ms,
                                        migrations=self.moves.to_json() if regroups or self.moves.count else None,
                                        placements_why=why,
                                        compactions=self.state.compacted if self.state.compacts else None)

    # -- placement ------------------------------------------------------------------
    def progress(self) -> Mapping[str, tuple[int, float]]:
        """Each running job's (iterations done, seconds since it started), read on demand: a
        decision looks up a few jobs, and building every running job's entry per iteration
        dominated long traces."""
        return RunProgress(self.runs, self.env.now())

    def _arrive(self, job: JobSpec) -> None:
        if not self.cfg.placement.batch_order:
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
            plan = self.state.place(job, self.progress(), arrival=job.job_id not in self.runs)
            if plan is None:
                return  # FIFO: the head waits for nodes, and so does everyone behind it
            self.queue.popleft()
            self._start(job, plan.group.group_id)

    # -- simulated job process ------------------------------------------------------------
    def _start(self, job: JobSpec, gid: int) -> None:
        run = self.runs.get(job.job_id)
        if run is None:
            self.runs[job.job_id] = JobRun(job, gid, self.accounting.draws(job, self.seed), self.env.now())
        else:  # re-queued after a crash-free wait: it resumes where it stopped
            run.group_id = gid
        self._next_iteration(job.job_id)

    def _next_iteration(self, jid: str) -> None:
        """Start the job's next iteration: in one step if it is alone in its group, else by permits."""
        run = self.runs[jid]
        if run.group_id in self.state.colocated:
            colocated_iteration(self, run)  # its own training nodes, no permits (sim/colocated.py)
            return
        ctl = self.state.controllers[run.group_id]
        if (self.lone_fast_path and run.moving_since is None
                and (self.link is None or run.job.weights_gb is None) and ctl.solo_ready(jid)):
            self._fast_iteration(run, ctl)
        else:
            self._request(jid, ROLLOUT)

    # A lone member's permits are granted at once and nobody waits on its nodes, so its whole
    # iteration is known when it starts: one event instead of three, and no dispatch. If the
    # membership changes meanwhile, `_materialize` hands the controller the state the permit
    # path would have reached and the iteration goes on phase by phase (same times, same busy
    # time: on long traces most iterations are lone ones).
    def _fast_iteration(self, run: JobRun, ctl) -> None:
        jid, now = run.job.job_id, self.env.now()
        a, b = drift_scales(run.job, now - run.start_s)
        base = float(run.rollouts[run.done])
        run.rollout_s, run.train_s = a * base * self._rollout_shape(run, ctl.group), b * run.job.train_time(base)
        run.iter_solo_s = a * base + run.train_s + run.job.sync_s  # solo: on its nominal rollout nodes
        sw_t = ctl.switch_for(jid, TRAIN)
        t1 = (now + ctl.switch_for(jid, ROLLOUT)) + run.rollout_s
        t2 = t1 + (sw_t + run.train_s)
        t3 = t2 + run.job.sync_s
        run.fast, run.sync_from = (now, t1, t2, t3, sw_t), t2
        run.fast_token += 1
        ctl.before_change = lambda: self._materialize(jid)
        self.env.call_at(t3, self._fast_done, jid, run.fast_token)

    def _fast_done(self, jid: str, token: int) -> None:
        run = self.runs.get(jid)
        if run is None or run.fast is None or run.fast_token != token:
            return  # materialized: the permit path finishes this iteration
        t0, t1, _, _, sw_t = run.fast
        run.fast = None
        ctl = self.state.controllers[run.group_id]
        ctl.before_change = None
        ctl.advance(jid, ROLLOUT, holding=False)
        ctl.advance(jid, TRAIN, holding=False)
        self.ledger.busy(ROLLOUT_POOL, run.r_gpus, t1 - t0)
        self.ledger.busy(TRAIN_POOL, run.job.train_gpus, sw_t + run.train_s)
        self._sync_done(jid)

    def _materialize(self, jid: str) -> None:
        """The lone member's group is about to change: continue its iteration by permits."""
        run = self.runs[jid]
        t0, t1, t2, t3, sw_t = run.fast
        run.fast = None
        ctl, now = self.state.controllers[run.group_id], self.env.now()
        self.ledger.busy(ROLLOUT_POOL, run.r_gpus, t1 - t0)
        if now < t1:
            ctl.advance(jid, ROLLOUT, holding=True)
            self.env.call_at(t1, self._rollout_done, jid)
            return
        ctl.advance(jid, ROLLOUT, holding=False)
        self.ledger.busy(TRAIN_POOL, run.job.train_gpus, sw_t + run.train_s)
        if now < t2:
            ctl.advance(jid, TRAIN, holding=True)
            self.env.call_at(t2, self._train_done, jid)
            return
        ctl.advance(jid, TRAIN, holding=False)
        run.sync_parts = 1
        self.env.call_at(t3, self._sync_part_done, jid)

    def _rollout_shape(self, run: JobRun, group) -> float:
        """Note the member's rollout factor and GPUs (core/elastic.py) on `run`; return the factor."""
        m = group.member(run.job.job_id)
        run.r_factor = m.rollout_factor
        run.r_gpus = run.job.rollout_gpus if m.rollout_factor == 1.0 else member_rollout_gpus(m, self.cluster)
        return m.rollout_factor

    def _request(self, jid: str, phase: str) -> None:
        ctl = self.state.controllers[self.runs[jid].group_id]
        ctl.request(jid, phase, self._on_rollout_grant if phase == ROLLOUT else self._on_train_grant)

    def _on_rollout_grant(self, g: Grant) -> None:
        run, now = self.runs[g.job_id], self.env.now()
        a, b = drift_scales(run.job, now - run.start_s)
        base = float(run.rollouts[run.done])
        ctl = self.state.controllers[g.group_id]
        r = a * base * self._rollout_shape(run, ctl.group)
        run.rollout_s, run.train_s = r, b * run.job.train_time(base)
        run.iter_solo_s = a * base + run.train_s + run.job.sync_s  # solo: on its nominal rollout nodes
        work = (1.0 - g.tail_share) * r
        if ctl.any_tails(g.nodes):
            tails = [[(self.tail_end[j], f) for j, f in ctl.tails_on(n).items()] for n in g.nodes]
            head = head_finish(tails, now + g.switch_s, work)
        else:  # nobody's tail slows its head (head_finish's own answer, without the lists)
            head = now + g.switch_s + work if work > 0 else now + g.switch_s
        gpus = run.r_gpus
        idle = 0.0
        if run.moving_since is not None:  # this permit carried its migration: held, not working
            self.moves.stall_s += now + g.switch_s - run.moving_since
            self.moves.cost_usd += g.switch_s * slice_rate(run.job, self.cluster) / 3600
            run.moving_since, idle = None, g.switch_s
        self.ledger.busy(ROLLOUT_POOL, gpus, head - now - idle)
        end = head
        if g.tail_share > 0:
            end = head + g.tail_share * r + self.state.intra.migration_overhead_s
            self.tail_end[g.job_id] = end
            self.ledger.busy(ROLLOUT_POOL, gpus * self.state.intra.tail_worker_frac, end - head)
            self.env.call_at(head, self._tail_started, ctl, g.job_id)
        self.env.call_at(end, self._rollout_done, g.job_id)

    def _tail_started(self, ctl, jid: str) -> None:
        if jid in self.runs:  # (a job that left meanwhile has no tail)
            ctl.tail_started(jid)

    def _rollout_done(self, jid: str) -> None:
        if jid not in self.runs:
            return  # it left mid-iteration (the accounting's departure): the iteration is abandoned
        self.state.controllers[self.runs[jid].group_id].release(jid, ROLLOUT)
        self._request(jid, TRAIN)

    def _on_train_grant(self, g: Grant) -> None:
        run = self.runs[g.job_id]
        dur = g.switch_s + run.train_s
        self.ledger.busy(TRAIN_POOL, run.job.train_gpus, dur)
        self.env.call_later(dur, self._train_done, g.job_id)

    def _train_done(self, jid: str) -> None:
        run = self.runs.get(jid)
        if run is None:
            return  # it left mid-iteration
        self.state.controllers[run.group_id].release(jid, TRAIN)
        # The sync ends when its fixed part is over and, on a finite link, the weights crossed it.
        run.sync_parts, run.sync_from = 1, self.env.now()
        self.env.call_later(run.job.sync_s, self._sync_part_done, jid)
        if self.link is not None and run.job.weights_gb is not None:
            run.sync_parts += 1
            self.link.send(jid, 8 * run.job.weights_gb * self._sync_copies(run), lambda: self._sync_part_done(jid))

    def _sync_copies(self, run: JobRun) -> int:
        """Model copies one sync sends across the link: one (topology-aware: rollout nodes
        all-gather on their own network) or one per rollout node (flat)."""
        return self.cluster.pools.rollout.nodes_for(run.job.rollout_gpus) if self.flat_sync else 1

    def _sync_part_done(self, jid: str) -> None:
        run = self.runs.get(jid)
        if run is None:
            return  # it left mid-iteration
        run.sync_parts -= 1
        if run.sync_parts == 0:
            self._sync_done(jid)

    def _sync_done(self, jid: str) -> None:
        run = self.runs.get(jid)
        if run is None:
            return  # it left mid-iteration
        run.done += 1
        run.solo_s += run.iter_solo_s
        run.last_s = self.env.now()
        run.sync_s = run.last_s - run.sync_from
        if self.accounting.finished(run.job, run.done):
            self._depart(run)
            return
        self._observe(run)
        if jid in self.state.arriving:
            self._migrate(run)
        else:
            self._next_iteration(jid)

    def _observe(self, run: JobRun) -> None:
        """Hand the iteration's measured times to the scheduler (drift repair may evict members)."""
        rollout, train = run.rollout_s, run.train_s
        if run.colo is not None and run.group_id in self.state.colocated:  # measured where it ran
            rollout, train = rollout * run.colo[0], train * run.colo[1]
        self.state.observe(run.job.job_id, run.group_id, rollout, train, self.progress(),
                           rollout_factor=run.r_factor,  # (the factor it rolled out at: compaction may narrow it since)
                           sync_s=run.sync_s)

    def _migrate(self, run: JobRun) -> None:
        """At its boundary a mover leaves its old group and takes its reserved slot."""
        jid = run.job.job_id
        self.state.apply(MoveOut.of(jid))
        run.group_id = self.state.group_of[jid]
        run.moving_since = self.env.now()
        self.moves.count += 1
        run.colo = None  # (a co-located job's scales are its placement's)
        if run.group_id in self.state.colocated:  # a lone member folded (core/repair/fold.py)
            colocated_iteration(self, run)
            return
        self._request(jid, ROLLOUT)

    # -- departures ---------------------------------------------------------------------
    def _leave_now(self, job: JobSpec) -> None:
        """The accounting's departure time came: the job leaves whatever it is doing; an
        iteration in flight is abandoned (its pending events find it gone and do nothing)."""
        jid, run = job.job_id, self.runs.get(job.job_id)
        if run is None:  # never placed: it waited in the queue its whole stay
            self.queue = deque(j for j in self.queue if j is not job)
            now = self._last_departure_s = self.env.now()
            self.outcomes.append(job_outcome(job, np.empty(0), 0, now, now, now))
            if self._progress is not None:
                self._progress(len(self.outcomes), len(self.jobs))
            return
        ctl = self.state.controllers.get(run.group_id)
        if run.fast is not None:  # hand the controller the state the permit path reached
            ctl.before_change = None
            self._materialize(jid)
        if ctl is not None:
            ctl.withdraw(jid)  # its permits and pending requests go, as a crashed job's do
        if self.link is not None:
            self.link.cancel(jid)
        self._depart(run)

    def _depart(self, run: JobRun) -> None:
        job, now = run.job, self.env.now()
        # A drifted job is judged against the same iterations run solo: the same draws and
        # the same drift on each (the solo run would drift at another iteration, doing other work).
        solo = None if job.drift is None else run.solo_s
        self.outcomes.append(job_outcome(job, run.rollouts, run.done, run.start_s,
                                         run.start_s if run.last_s is None else run.last_s, now, solo))
        self._last_departure_s = now
        del self.runs[job.job_id]
        self.tail_end.pop(job.job_id, None)
        # It leaves its group (and a slot reserved for a planned move it did not make).
        rest = self.state.apply(Leave.of(job.job_id, JobStatus.DONE))
        self.state.after_departure(rest, self.progress())  # movers go at their next boundary
        if self._progress is not None:
            self._progress(len(self.outcomes), len(self.jobs))
        self._drain()


def simulate(jobs: list[JobSpec], cluster: ClusterSpec, config: SchedulerConfig | None = None,
             policy: PlacementPolicy | None = None, progress=None, *, seed: int = 0,
             flat_sync: bool = False, accounting: Accounting = WORK) -> PolicyResult:
    """Run one group-based policy (RollMux built from `config`, or `policy`) over a trace."""
    return Simulation(jobs, cluster, config, policy, seed=seed, flat_sync=flat_sync,
                      accounting=accounting).run(progress)
