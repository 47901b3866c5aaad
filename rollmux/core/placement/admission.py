"""SLO admission (DESIGN §3, §5): the one test of whether a planned group keeps every SLO.

The search (placement/trial.py) admits a job into a group by it, and the repair side
(core/repair/: compaction, drift repair's evictions) keeps a group by the same test, so a
group the scheduler admitted is one it keeps.

* `period_budget`: the longest meta-iteration a job can accept from now on and still meet
  its SLO (its past counts; a membership change may cost one extra meta-iteration).
* `joining_budget`: the newcomer's budget in a group that still owes migration stalls.
* `group_fits`: the test of a planned group: "worst" (the paper), its planned period within
  every member's budget (per member under the SLO order); "mean", every member's confident
  mean period over its remaining iterations within its budget (`admits`, from the planner's
  seeded sample, core/period_sample.py; docs/decisions/admission-by-mean.md).
* `admits_planned`: what a search asks beyond the planned period, which it checks itself.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from rollmux.core.config import IntraConfig
from rollmux.core.group import Group
from rollmux.core.intra_group import group_period_stats
from rollmux.core.period_sample import PeriodStats
from rollmux.core.placement.model import ClusterView
from rollmux.core.spec import JobSpec


def period_budget(job: JobSpec, progress: Mapping[str, tuple[int, float]], transient: int = 1) -> float:
    """Longest meta-iteration a job can accept from now on and still meet its SLO.

    Its mean iteration time must stay within slo * solo_iter_s over its whole
    life: what it already spent counts, and a membership change may cost up to
    one extra meta-iteration of transient, so the remaining iterations plus one
    must fit in what is left of its time budget. Under the SLO order a member that
    runs `transient` times per meta-iteration counts that many iterations for it.
    """
    done, elapsed = progress.get(job.job_id, (0, 0.0))
    budget = job.slo_budget_s - elapsed
    # A live job may run past its declared iterations: it then has one to go, whatever its count.
    return budget / (max(job.iterations - done, 0) + transient)


def joining_budget(job: JobSpec, view: ClusterView, group_id: int, slack_new: float) -> float:
    """The newcomer's period budget (`slack_new`, uncharged) in the group: charged with the
    migration stall the group's members still owe (`view.owed_s`), which it waits for too."""
    owed = view.owed_s.get(group_id, 0.0) if view.owed_s else 0.0
    if owed <= 0:
        return slack_new
    done = view.progress.get(job.job_id, (0, 0.0))[0]
    return slack_new - owed / (max(job.iterations - done, 0) + 1)


def admits(stats: PeriodStats, budgets: Sequence[float], remaining: Sequence[float], z: float) -> bool:
    """Every member's confident mean period (`PeriodStats.upper`) is within its period budget."""
    return all(stats.upper(n, z) <= b * (1 + 1e-9) for b, n in zip(budgets, remaining))


def group_fits(g: Group, progress: Mapping[str, tuple[int, float]], cfg: IntraConfig) -> bool:
    """The SLO admission test of a planned group: its planned period within every member's
    period budget ("worst"), or every member's confident mean period within its budget over
    its remaining iterations ("mean")."""
    if cfg.plan == "worst":  # each member's own planned period (they differ under the SLO order)
        slots = g.shape.slots  # (SLO order: a meta-iteration's transient is `rate` of its iterations)
        return all(g.shape.member_period(i) <= period_budget(m.job, progress, slots.count(i) or 1) * (1 + 1e-9)
                   for i, m in enumerate(g.members))
    budgets, remaining = [], []
    for m in g.members:
        budgets.append(period_budget(m.job, progress))
        remaining.append(max(m.job.iterations - progress.get(m.job_id, (0, 0.0))[0], 0) + 1)
    stats = group_period_stats(g.members, g.n_rollout, g.n_train, cfg)
    return admits(stats, budgets, remaining, cfg.plan_z)


def admits_planned(g: Group, view: ClusterView, cfg: IntraConfig) -> bool:
    """The admission a search asks of a planned group beyond its planned period (which it
    checks itself against the tightest budget): the "mean" plan's and the SLO order's
    per-member test (`group_fits`); nothing more under the worst case in round robin."""
    if cfg.plan != "mean" and cfg.order != "slo":
        return True
    return group_fits(g, view.progress, cfg)
