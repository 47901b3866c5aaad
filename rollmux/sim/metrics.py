"""Per-policy results (DESIGN §7) and their JSON form."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rollmux.core.accounting import POOLS, Ledger
from rollmux.core.placement import Case


@dataclass(frozen=True)
class JobOutcome:
    """How one job fared: its co-execution time vs solo on the same draws."""

    job_id: str
    iterations: int    # iterations completed
    start_s: float
    finish_s: float    # when its last completed iteration ended
    solo_s: float      # the same iterations run solo (same sampled rollouts)
    slo: float
    solo_iter_s: float  # the profile's expected solo iteration time
    arrival_s: float | None = None  # when the job was submitted (None: it started on arrival)
    # When it left, where that is not finish_s: under the paper accounting (sim/accounting.py) a
    # job leaves at its trace departure, an iteration in flight abandoned.
    left_s: float | None = None

    @property
    def queued_s(self) -> float:
        """Seconds from submission to first placement (0 without node caps)."""
        return 0.0 if self.arrival_s is None else max(0.0, self.start_s - self.arrival_s)

    @property
    def slowdown(self) -> float:
        """Mean iteration time under the policy / mean iteration time solo (NaN: none completed)."""
        return (self.finish_s - self.start_s) / self.solo_s if self.iterations else float("nan")

    @property
    def mean_iter_s(self) -> float:
        """Mean iteration time under the policy; with none completed, how long its first ran before it left."""
        if not self.iterations:  # (a lower bound of that iteration's time)
            return (self.finish_s if self.left_s is None else self.left_s) - self.start_s
        return (self.finish_s - self.start_s) / self.iterations

    @property
    def _solo_mean_s(self) -> float:
        """The solo iteration time the SLO multiplies (see slo_met)."""
        return max(self.solo_iter_s, self.solo_s / self.iterations) if self.iterations else self.solo_iter_s

    @property
    def slo_met(self) -> bool:
        """Mean iteration time within slo x solo iteration time (DESIGN §7).

        The solo iteration time is the profile's expectation (solo_iter_s) or,
        when the job's own draws were slower, its realized solo mean: a job is
        never charged for its own rollout lengths, only for sharing.
        """
        return self.mean_iter_s <= self.slo * self._solo_mean_s * (1 + 1e-9)

    @property
    def jct_s(self) -> float:
        """Job completion time: submission to finish, queueing included."""
        return self.finish_s - self._submitted_s

    @property
    def _submitted_s(self) -> float:
        return self.start_s if self.arrival_s is None else min(self.arrival_s, self.start_s)

    @property
    def slo_met_with_queueing(self) -> bool:
        """slo_met with the queueing delay counted: JCT / iterations within slo x solo iteration time."""
        if not self.iterations:  # its whole stay went on a first iteration it never completed
            per_iter = (self.finish_s if self.left_s is None else self.left_s) - self._submitted_s
        else:
            per_iter = self.jct_s / self.iterations
        return per_iter <= self.slo * self._solo_mean_s * (1 + 1e-9)


@dataclass
class PolicyResult:
    """Everything measured for one policy on one trace."""

    policy: str
    cost_usd: float
    span_s: float
    jobs_total: int
    outcomes: list[JobOutcome]
    idle_share: dict[str, float]
    peak_gpus: dict[str, int]
    placements: dict[str, int] | None = None
    # Policy time (ms) per decision, by kind: "arrival" (one placement) and "departure"
    # (every policy call of one departure's repairs together); empty for closed-form baselines.
    decision_ms: dict[str, list[float]] = field(default_factory=dict)
    cost_timeline: list[tuple[float, float]] = field(default_factory=list)
    # Group policies that move jobs between groups: {"count", "stall_hours", "cost_usd"}.
    migrations: dict[str, float] | None = None
    # Policies that explain isolated placements (core/placement/why.py): WhyTally.to_json(), i.e.
    # {"placements": {reason: isolated placements}, "groups": {reason: groups refused}}.
    placements_why: dict[str, dict[str, int]] | None = None
    # Rollout nodes given back by rollout compaction (core/repair/compaction.py); None: not a policy that compacts.
    compactions: int | None = None
    # GPU-hours held per pool (what idle_share is a share of); not in the JSON.
    held_gpu_hours: dict[str, float] = field(default_factory=dict)

    def idle_gpu_hours(self, pool: str) -> float:
        """GPU-hours of `pool` held but doing no work (the dependency bubbles and empty slots)."""
        return self.held_gpu_hours.get(pool, 0.0) * self.idle_share[pool]

    @classmethod
    def from_ledger(cls, policy: str, ledger: Ledger, jobs_total: int, outcomes: list[JobOutcome],
                    **extra) -> "PolicyResult":
        """Collect a result from a closed ledger."""
        return cls(policy=policy, cost_usd=ledger.cost_usd(), span_s=ledger.span_s(),
                   jobs_total=jobs_total, outcomes=outcomes,
                   idle_share={p: ledger.idle_share(p) for p in POOLS},
                   peak_gpus={p: ledger.peak_gpus(p) for p in POOLS},
                   held_gpu_hours={p: ledger.node_seconds[p] * getattr(ledger.cluster.pools, p).gpus_per_node / 3600
                                   for p in POOLS},
                   cost_timeline=list(ledger.rate_changes), **extra)

    @property
    def cost_per_hour(self) -> float:
        """Mean cost rate over the span the policy held nodes."""
        return self.cost_usd / (self.span_s / 3600) if self.span_s > 0 else 0.0

    @property
    def slo_attainment(self) -> float:
        """Share of all jobs that finished within their SLO (unfinished jobs count as misses)."""
        return sum(o.slo_met for o in self.outcomes) / self.jobs_total if self.jobs_total else 1.0

    @property
    def slowdowns(self) -> np.ndarray:
        """Per-job slowdowns of the jobs that completed an iteration."""
        return np.array([o.slowdown for o in self.outcomes if o.iterations])

    def placement_shares(self) -> dict[str, float] | None:
        """Share of placements won by each case of Algorithm 1."""
        if self.placements is None:
            return None
        total = sum(self.placements.values()) or 1
        # Co-located placements (core/placement/options/colocated.py) are listed where the mode was on (the executor
        # then counts them, if only as 0), training scaling (core/placement/options/) and pairings
        # (core/repair/pairing.py) where they placed a job, so a run without them keeps its JSON.
        return {c.value: self.placements.get(c.value, 0) / total for c in Case
                if c not in (Case.COLOCATED, Case.TRAIN_SCALING, Case.PAIRED) or c.value in self.placements}

    def decision_percentiles(self) -> dict[str, dict[str, float]]:
        """p50/p99 (ms) of the decisions of each kind that has any."""
        return {kind: {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99))}
                for kind, ms in self.decision_ms.items() if ms}

    def to_json(self) -> dict:
        """The JSON form required by `rollmux simulate --json`."""
        s = self.slowdowns
        out = {
            "cost_usd": self.cost_usd,
            "cost_per_hour": self.cost_per_hour,
            "slo_attainment": self.slo_attainment,
            "jobs_finished": len(self.outcomes),
            "mean_slowdown": float(s.mean()) if len(s) else None,
            "max_slowdown": float(s.max()) if len(s) else None,
            "idle_share": dict(self.idle_share),
            "peak_gpus": dict(self.peak_gpus),
        }
        if self.placements is not None:
            out["placements"] = self.placement_shares()
        if self.decision_ms:
            out["decision_ms"] = self.decision_percentiles()
        if self.migrations is not None:
            out["migrations"] = dict(self.migrations)
        if self.compactions is not None:
            out["compactions"] = self.compactions
        if self.placements_why is not None:
            why = self.placements_why
            out["isolated_placements"] = sum(why["placements"].values())
            out["placements_why"] = dict(why["placements"])  # one reason per isolated placement
            out["refusals_why"] = dict(why["groups"])        # every refused group, summed over them
        return out


def group_charge_per_hour(rate_per_hour: float, members: list[JobOutcome]) -> float:
    """The paper's charge for one group: its rate, × its worst member slowdown if a member breaks its SLO.

    Slowdown is JobOutcome.slowdown (mean iteration time over the solo mean on the same
    draws). A member that breaks its SLO has a slowdown above its slo >= 1, so a breaking
    group is never charged less than its rate.
    """
    if all(o.slo_met for o in members):
        return rate_per_hour
    return rate_per_hour * max(o.slowdown for o in members)


def paper_cost_per_hour(groups: list[tuple[float, list[JobOutcome]]]) -> float:
    """The paper's cost ($/h) of a static grouping: the sum of group_charge_per_hour over (rate, members)."""
    return sum(group_charge_per_hour(rate, members) for rate, members in groups)
