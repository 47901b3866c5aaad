"""Gavel+ baseline (DESIGN §6): job-level, phase-unaware allocation, simulated outside groups.

Gavel (Narayanan et al., OSDI'20) allocates accelerator time to whole jobs:
it computes each job's time fraction of each accelerator type with a policy
over heterogeneity-aware throughputs (here max-min fairness over normalized
throughput) and realizes the fractions with fixed-length rounds, preempting
and resuming jobs at round boundaries. Adapted to disaggregated RL jobs:

Heterogeneity (hetero=True, the default). A job's rollout may run on either
GPU type: disaggregated (H20 rollout nodes + H800 training nodes, its solo
shape) or co-located on H800 training nodes at veRL's calibrated co-located
speed (no H20 node held). Each job takes the kind that costs least per
iteration within its SLO (Gavel's cost-with-SLO policy; rollmux/sim/gavel_alloc.py
says which and why, and how caps make the choice load-aware). hetero=False is
the plain Gavel+ of before: every job disaggregated.

Gangs. A job runs on one gang: the nodes of its kind held together for whole
iterations. An iteration (rollout -> train -> sync, or co-located rollout ->
switch -> train -> switch) runs back to back on the gang, so in the
disaggregated kind each pool idles during the other pool's phase and during
sync, exactly as in Solo-D; nothing of another job is interleaved into those
bubbles.

Packed variant (packed=True): Gavel's space-sharing extension adapted to gangs.
Up to `max_pack` jobs of the same kind share one gang sized for the largest of them (it grows
when a larger job joins and shrinks to the largest remaining member when one
leaves) and take turns by whole iterations, round-robin; a gang that changes
job pays one warm switch (cluster.warm_switch_s, both pools load in parallel).
A job joins an existing gang only if, for every member, the planned period
sum_m (worst_iter_m + warm_switch) -- worst_iter = the kind's iteration at
rollout_s.max, the same worst-case planning as RollMux -- stays within
slo * solo_iter_s, the members' host_gb fit on every node (all members are
resident on the gang's first node; co-located members hold rollout and
training state on the same H800 node) and the grown gang fits the
node caps. Among valid gangs the one that adds the least node cost wins; ties
go to the first gang in creation order; otherwise the job gets its own gang.
A newcomer runs right after the iteration in progress, so its wait is part of
the period it was planned with. Time-multiplexing whole iterations saves no
node-time: packing lowers the hourly rate, never the work's node-hours.

Rounds (only when a pool has max_nodes). Each gang g gets a time fraction
X_g = min(1, t / rho_g), rho_g = min over members of solo_iter / expected gang
period (1 for a one-job disaggregated gang; above 1 for a co-located gang faster
than solo): max-min fairness over normalized throughput,
raised (water-filling) until a pool's node cap binds; every gang uses both
pools, so no gang can gain after that without another losing. Fractions are
recomputed when gangs or members change. Every round_s seconds (rounds are
aligned to the first arrival) the gangs are ranked by deficit (time entitled
by X_g so far minus time received; ties by creation order) and admitted
greedily while they fit the caps; a running gang left out is preempted.

Simplifications (documented, each mildly optimistic for Gavel):
- Preemption is exact: a preempted gang carries its partial iteration over
  (the elapsed part of the phase in progress is kept) and pays one warm switch
  when it resumes; its state is assumed resident in host DRAM (no cold start).
- Between round boundaries the scheduler is work-conserving: a new gang, or a
  waiting one when nodes free up, starts at once if it fits the free nodes
  (in priority order); nobody is preempted mid-round.
- A job's start_s is when its gang first runs after its arrival (like the
  simulator, which starts the clock when a queued job is placed); time spent
  preempted afterwards counts against its SLO.
Without caps every gang runs from its creation to its last member's end, so
unpacked plain Gavel+ is Solo-D: the same draws, event times and ledger, and
unpacked heterogeneity-aware Gavel+ is, job by job, the cheaper of Solo-D and
veRL that meets the SLO (no scheduling gain beyond the choice: no bubble of
one job is ever filled by another). Where no job's co-located kind is cheaper
it ties Solo-D. Plain Gavel+ (hetero=False) ties Solo-D to the dollar without caps, by
construction; with caps it time-slices and costs the same node-hours. Under node caps the H800
pool is the bottleneck of both kinds, and only interleaving the phases of different jobs (what
RollMux does) puts the H20 nodes to work. What it chooses on the study's traces is measured in
docs/study/study.md (the baselines' calibration section).

Accounting: the policy pays for the nodes of running gangs (provisioned when a
gang starts or grows, released when it is preempted, shrinks or empties), and
records busy GPU-seconds per pool (rollout gpus x (switch + rollout), train
gpus x (switch + train); co-located: G gpus x (switches + rollout), train gpus
x train on the training pool). Under the paper accounting (sim/accounting.py) a job leaves its
gang at its trace departure whatever its progress, an iteration in flight abandoned (its busy
time, booked when the iteration began, stays booked) and the gang's next member running.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollmux.core.accounting import POOLS, Ledger
from rollmux.core.env import SimEnvironment
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.errors import InputError
from rollmux.sim.accounting import WORK, Accounting, job_outcome
from rollmux.sim.baselines import check_colo_speed
from rollmux.sim.draws import Rollouts
from rollmux.sim.gavel_alloc import (
    choose_kind,
    expected_iter_s,
    host_fits,
    iteration_phases,
    job_nodes,
    packed_period_s,
    worst_iter_s,
)
from rollmux.sim.metrics import JobOutcome, PolicyResult
from rollmux.sim.simulator import SimulationStalled

__all__ = ["GavelSimulation", "packed_period_s", "simulate_gavel", "worst_iter_s"]

_EPS = 1e-9


@dataclass
class _Run:
    job: JobSpec
    rollouts: Rollouts
    kind: str = "disagg"
    done: int = 0
    start_s: float | None = None
    last_s: float | None = None  # when its last completed iteration ended


@dataclass
class _Gang:
    gid: int
    members: list[_Run]
    nodes: dict[str, int]
    kind: str = "disagg"
    cursor: int = 0                     # member running (or next to run)
    running: bool = False
    last: str | None = None             # job whose state the gang holds
    pending: list[float] | None = None  # remaining phase durations of the iteration in progress
    seg_start: float = 0.0              # when the current run segment of that iteration began
    epoch: int = 0                      # invalidates the end event of a preempted segment
    share: float = 1.0                  # X_g, the gang's time fraction
    entitled: float = 0.0
    received: float = 0.0

    def jobs(self) -> list[JobSpec]:
        return [m.job for m in self.members]


class GavelSimulation:
    """Gavel+ on one trace; `simulate_gavel` is the usual entry point."""

    def __init__(self, jobs: list[JobSpec], cluster: ClusterSpec, seed: int = 0,
                 round_s: float = 360.0, packed: bool = True, max_pack: int = 2,
                 hetero: bool = True, colo_speed: float = 1.0, accounting: Accounting = WORK) -> None:
        if round_s <= 0:
            raise InputError("round_s", f"must be > 0, got {round_s}")
        self.caps = {p: getattr(cluster.pools, p).max_nodes for p in POOLS}
        self.capped = any(c is not None for c in self.caps.values())
        if self.capped and round_s <= cluster.warm_switch_s:
            raise InputError("round_s", f"must exceed warm_switch_s ({cluster.warm_switch_s:g} s), "
                             "or a gang resumed every round would never progress")
        if max_pack < 1:
            raise InputError("max_pack", f"must be >= 1, got {max_pack}")
        check_colo_speed(colo_speed)
        for job in jobs:
            reason = cluster.job_unplaceable_reason(job)
            if reason is not None:
                raise InputError(f"job {job.job_id}", f"can never be placed: {reason}")
        self.jobs, self.cluster, self.seed = jobs, cluster, seed
        self.round_s, self.packed, self.max_pack = round_s, packed, max_pack
        self.hetero, self.speed, self.accounting = hetero, colo_speed, accounting
        self._last_departure_s = 0.0
        self.sw = cluster.warm_switch_s
        self.env = SimEnvironment()
        self.ledger = Ledger(cluster)
        self.gangs: list[_Gang] = []   # live gangs, in creation order
        self.outcomes: list[JobOutcome] = []
        self.joins = 0                 # arrivals that joined an existing gang
        self.preemptions = 0
        self.max_gang_size = 0
        self.kind_counts = {"disagg": 0, "colo": 0}  # jobs per chosen kind
        self._next_gid = 0
        self._last_accrue = 0.0
        self._origin: float | None = None
        self._tick_pending = False

    # -- driver -----------------------------------------------------------------------
    def run(self) -> PolicyResult:
        """Simulate the whole trace."""
        for job in self.jobs:
            self.env.call_at(job.arrival_s, self._arrive, job)
            leave = self.accounting.departure_s(job)
            if leave is not None:  # it leaves then whatever its progress
                self.env.call_at(leave, self._leave_now, job)
        self.env.run()
        if len(self.outcomes) != len(self.jobs):
            stuck = sorted({j.job_id for j in self.jobs} - {o.job_id for o in self.outcomes})
            raise SimulationStalled(f"gavel: {len(stuck)} jobs never finished, e.g. {stuck[:5]}")
        self.ledger.close(self.accounting.close_s(self.env.now(), self._last_departure_s))
        return PolicyResult.from_ledger("gavel", self.ledger, len(self.jobs), self.outcomes,
                                        placements=None)

    # -- arrivals and packing -----------------------------------------------------------
    def _arrive(self, job: JobSpec) -> None:
        now = self.env.now()
        self._accrue(now)
        kind = "disagg"
        if self.hetero:
            demand = {p: sum(g.nodes[p] for g in self.gangs) for p in POOLS} if self.capped else None
            kind = choose_kind(job, self.cluster, self.speed, demand)
        self.kind_counts[kind] += 1
        run = _Run(job, self.accounting.draws(job, self.seed), kind)
        gang = self._choose_gang(job, kind) if self.packed else None
        if gang is None:
            gang = _Gang(self._next_gid, [run], job_nodes(job, self.cluster, kind), kind)
            self._next_gid += 1
            self.gangs.append(gang)
        else:
            self.joins += 1
            # The newcomer runs right after the iteration in progress.
            at = gang.cursor + 1 if gang.pending is not None else gang.cursor
            gang.members.insert(at, run)
            self._resize(gang, now)
            if gang.running:
                run.start_s = now
        self.max_gang_size = max(self.max_gang_size, len(gang.members))
        self._reallocate()
        self._dispatch(now)
        if self.capped:
            if self._origin is None:
                self._origin = now
            self._arm_tick(now)

    def _choose_gang(self, job: JobSpec, kind: str) -> _Gang | None:
        """The valid gang of the job's kind that adds the least node cost (ties: first created), or None."""
        pools = self.cluster.pools
        need = job_nodes(job, self.cluster, kind)
        best, best_cost = None, None
        for g in self.gangs:
            if len(g.members) >= self.max_pack or g.kind != kind:
                continue
            jobs = g.jobs() + [job]
            period = packed_period_s(jobs, self.sw, self.cluster, kind, self.speed)
            if any(period > j.slo_iter_s * (1 + _EPS) for j in jobs):
                continue
            if not host_fits(jobs, self.cluster, kind):
                continue
            grown = {p: max(g.nodes[p], need[p]) for p in POOLS}
            if any(self.caps[p] is not None and grown[p] > self.caps[p] for p in POOLS):
                continue
            cost = sum((grown[p] - g.nodes[p]) * getattr(pools, p).node_price_per_hour for p in POOLS)
            if best_cost is None or cost < best_cost - _EPS:
                best, best_cost = g, cost
        return best

    def _resize(self, g: _Gang, now: float) -> None:
        """Size the gang for its largest member; a running gang that cannot grow is preempted."""
        want = {p: max(job_nodes(m.job, self.cluster, g.kind)[p] for m in g.members) for p in POOLS}
        if g.running:
            free = self._free()
            if any(free[p] is not None and want[p] - g.nodes[p] > free[p] for p in POOLS):
                self._stop(g, now)
            else:
                for p in POOLS:
                    if want[p] < g.nodes[p]:
                        self.ledger.release(p, g.nodes[p] - want[p], now)
                    elif want[p] > g.nodes[p]:
                        self.ledger.provision(p, want[p] - g.nodes[p], now)
        g.nodes = want

    # -- iterations -----------------------------------------------------------------------
    def _begin_iteration(self, g: _Gang, now: float) -> None:
        run = g.members[g.cursor]
        job = run.job
        phases = iteration_phases(job, self.cluster, g.kind, float(run.rollouts[run.done]), self.speed)
        sw = self.sw if g.last not in (None, job.job_id) else 0.0
        g.last = job.job_id
        if g.kind == "colo":  # rollout and both offload/onload switches on all G GPUs
            r, s1, tr, s2 = phases
            self.ledger.busy("train", max(job.rollout_gpus, job.train_gpus), sw + r + s1 + s2)
            self.ledger.busy("train", job.train_gpus, tr)
        else:
            r, tr, _ = phases
            self.ledger.busy("rollout", job.rollout_gpus, sw + r)
            self.ledger.busy("train", job.train_gpus, sw + tr)
        g.pending = [sw] + phases
        self._run_segment(g, now)

    def _run_segment(self, g: _Gang, now: float) -> None:
        # Chained additions, phase by phase: the same event times as the simulator's Solo-D.
        g.seg_start = t = now
        for d in g.pending:
            t = t + d
        g.epoch += 1
        self.env.call_at(t, self._iteration_done, g, g.epoch)

    def _iteration_done(self, g: _Gang, epoch: int) -> None:
        if epoch != g.epoch or not g.running:
            return  # the segment was preempted
        now = self.env.now()
        run = g.members[g.cursor]
        run.done += 1
        run.last_s = now
        g.pending = None
        if not self.accounting.finished(run.job, run.done):
            g.cursor = (g.cursor + 1) % len(g.members)
            self._begin_iteration(g, now)
            return
        self._accrue(now)  # shares and node use change only here: settle the deficits first
        self._depart(g, run, now)
        if g.members:
            self._begin_iteration(g, now)
        self._dispatch(now)

    def _leave_now(self, job: JobSpec) -> None:
        """The accounting's departure time came: the job leaves its gang whatever it is doing;
        an iteration of its in flight is abandoned and the gang's next member runs."""
        now = self.env.now()
        found = next(((g, m) for g in self.gangs for m in g.members if m.job is job), None)
        if found is None:
            return  # (already gone)
        g, run = found
        self._accrue(now)
        self._depart(g, run, now)
        if g.members and g.running and g.pending is None:
            self._begin_iteration(g, now)
        self._dispatch(now)

    def _depart(self, g: _Gang, run: _Run, now: float) -> None:
        start = now if run.start_s is None else run.start_s  # (never run: it waited its whole stay)
        self.outcomes.append(job_outcome(run.job, run.rollouts, run.done, start,
                                         start if run.last_s is None else run.last_s, now))
        self._last_departure_s = now
        at = next(i for i, m in enumerate(g.members) if m is run)
        if at == g.cursor and g.pending is not None:  # its iteration in flight is abandoned
            g.pending, g.epoch = None, g.epoch + 1
        g.members.pop(at)
        if at < g.cursor:
            g.cursor -= 1
        if g.members:
            g.cursor %= len(g.members)
            self._resize(g, now)
        else:
            if g.running:
                for p in POOLS:
                    self.ledger.release(p, g.nodes[p], now)
                g.running = False
            self.gangs.remove(g)
        self._reallocate()

    # -- running, preempting, resuming ------------------------------------------------------
    def _start(self, g: _Gang, now: float) -> None:
        for p in POOLS:
            self.ledger.provision(p, g.nodes[p], now)
        g.running = True
        for m in g.members:
            if m.start_s is None:
                m.start_s = now
        if g.pending is None:
            self._begin_iteration(g, now)
        else:  # resume the carried-over partial iteration after reloading its state
            job = g.members[g.cursor].job
            if g.kind == "colo":
                self.ledger.busy("train", max(job.rollout_gpus, job.train_gpus), self.sw)
            else:
                self.ledger.busy("rollout", job.rollout_gpus, self.sw)
                self.ledger.busy("train", job.train_gpus, self.sw)
            g.pending = [self.sw] + g.pending
            self._run_segment(g, now)

    def _stop(self, g: _Gang, now: float) -> None:
        t, rest = g.seg_start, [0.0]
        for i, d in enumerate(g.pending):
            end = t + d
            if end > now:
                rest = [end - now] + g.pending[i + 1:]
                break
            t = end
        g.pending = rest
        g.running = False
        g.epoch += 1
        self.preemptions += 1
        for p in POOLS:
            self.ledger.release(p, g.nodes[p], now)

    # -- Gavel's allocation: fractions, deficits, rounds ---------------------------------------
    def _free(self) -> dict[str, int | None]:
        return {p: None if self.caps[p] is None else self.caps[p] - self.ledger.nodes[p] for p in POOLS}

    def _accrue(self, now: float) -> None:
        dt = now - self._last_accrue
        if dt > 0:
            for g in self.gangs:
                g.entitled += g.share * dt
                if g.running:
                    g.received += dt
        self._last_accrue = now

    def _reallocate(self) -> None:
        """Max-min fair time fractions over normalized throughput (water-filling to the caps)."""
        if not self.capped:
            for g in self.gangs:
                g.share = 1.0
            return
        rho = []
        for g in self.gangs:
            jobs = g.jobs()
            period = sum(expected_iter_s(j, self.cluster, g.kind, self.speed)
                         + (self.sw if len(jobs) > 1 else 0.0) for j in jobs)
            rho.append(min(j.solo_iter_s for j in jobs) / period)

        def fits(t: float) -> bool:
            for p in POOLS:
                if self.caps[p] is not None:
                    demand = sum(g.nodes[p] * min(1.0, t / r) for g, r in zip(self.gangs, rho))
                    if demand > self.caps[p] + _EPS:
                        return False
            return True

        lo, hi = 0.0, 1.0
        if fits(hi):
            lo = hi
        else:
            for _ in range(60):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        for g, r in zip(self.gangs, rho):
            g.share = min(1.0, lo / r)

    def _ranked(self) -> list[_Gang]:
        return sorted(self.gangs, key=lambda g: (-(g.entitled - g.received), g.gid))

    def _dispatch(self, now: float) -> None:
        """Work-conserving: start waiting gangs that fit the free nodes, highest priority first."""
        if all(g.running for g in self.gangs):
            return
        for g in self._ranked():
            if g.running:
                continue
            free = self._free()
            if all(free[p] is None or g.nodes[p] <= free[p] for p in POOLS):
                self._start(g, now)

    def _arm_tick(self, now: float) -> None:
        if self._tick_pending or not self.gangs:
            return
        k = int((now - self._origin) // self.round_s) + 1
        while self._origin + k * self.round_s <= now:  # float rounding at a boundary
            k += 1
        self._tick_pending = True
        self.env.call_at(self._origin + k * self.round_s, self._tick)

    def _tick(self) -> None:
        """A round boundary: run the highest-priority gangs that fit, preempt the rest."""
        self._tick_pending = False
        now = self.env.now()
        self._accrue(now)
        left = {p: self.caps[p] for p in POOLS}
        chosen: set[int] = set()
        for g in self._ranked():
            if all(left[p] is None or g.nodes[p] <= left[p] for p in POOLS):
                chosen.add(g.gid)
                for p in POOLS:
                    if left[p] is not None:
                        left[p] -= g.nodes[p]
        for g in self.gangs:
            if g.running and g.gid not in chosen:
                self._stop(g, now)
        for g in list(self.gangs):
            if not g.running and g.gid in chosen:
                self._start(g, now)
        self._arm_tick(now)


def simulate_gavel(jobs: list[JobSpec], cluster: ClusterSpec, seed: int = 0, round_s: float = 360.0,
                   packed: bool = True, max_pack: int = 2, hetero: bool = True,
                   colo_speed: float = 1.0, accounting: Accounting = WORK) -> PolicyResult:
    """Run Gavel+ (policy "gavel") over the trace; `packed` adds phase-unaware gang sharing,
    `hetero` the choice of GPU type for each job's rollout."""
    return GavelSimulation(jobs, cluster, seed, round_s, packed, max_pack, hetero, colo_speed, accounting).run()
