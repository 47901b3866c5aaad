"""SLO-aware order inside a group (DESIGN §4; docs/decisions/slo-order.md): weighted round robin by SLO pressure.

Under plain round robin (`IntraConfig.order == "rr"`) every member runs once per
meta-iteration, so every member's iteration time is the group's period, and the
tightest member's budget bounds the whole group. Priority at contended
boundaries alone cannot change that: in steady state each member still runs once
per meta-iteration. What lets a tight member have a shorter iteration time than a
loose one is a higher *rate*: with `order == "slo"` member j runs `rates[j]`
iterations per meta-iteration (a weighted round robin), so its long-run iteration
time is P / rates[j], P the meta-iteration period of the weighted cyclic order,
while the loose members (rate 1) run once per P and absorb the slack.

Definitions (planning durations, `group_planning_times`, no migration credit):

* A member's budget b_j is `period_budget` (core/placement/admission.py) of a fresh job,
  slo * solo_iter_s * iterations / (iterations + 1). Rates depend only on the
  group (members, order, static budgets), never on progress, so every replan of
  the same group (a departure, the live plane's journal) gives the same rates.
  Admission then checks each member's own planned iteration time against its
  progress-aware budget (core/placement/admission.py `group_fits`).
* Its slack s_j = b_j - c_j, c_j its planned own cycle (rollout + train + sync):
  what its budget leaves beyond running alone. s_j <= 0: no order can help it.
* Its pressure is p_j = (P / rates[j]) / b_j; it misses its budget when p_j > 1.

The rule (`choose_slots`): start at round robin (all rates 1). While some member
misses its budget, raise the rate of the member under the most pressure (ties:
the least slack first, then the earlier member), unless its slack is <= 0, its
rate is at `IntraConfig.max_rate`, or it is the last member at rate 1 (some member
always runs once per meta-iteration, so P itself is a member's iteration time).
Keep the rates with the least maximum pressure seen. Deterministic.

Slots: a meta-iteration is the sequence `spread(rates)` of member indices (kept in
`GroupShape.slots`), each member's occurrences spread evenly over it. Each node
serves its members' phases in increasing (meta-iteration, slot) key: the exact
schedule (`intra_group.schedule`) and the runtime controller (`group_controller`)
apply the same key, and a property test checks they give identical timings.

When it equals round robin: whenever round robin already fits every member's
budget, in particular under the paper's Theorem 1 (an unsaturated group whose best
cyclic order reaches T_cycle, the slowest member's own cycle, with every budget
>= T_cycle), the SLO order *is* round robin (all rates 1; same plan, same grants).
Rates come in only where round robin makes a tight member miss its budget: a
member that runs faster than the group's slowest member (T_cycle > its budget,
which no cyclic order can fix) or that shares a loaded node with loose members.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from rollmux.core.config import IntraConfig
from rollmux.core.group import Member
from rollmux.core.spec import JobSpec

ORDERS = ("rr", "slo")


def fresh_budget(job: JobSpec) -> float:
    """A fresh job's period budget (core/placement/admission.py `period_budget` with no progress)."""
    return job.slo_budget_s / (job.iterations + 1)


def spread(rates: Sequence[int]) -> tuple[int, ...]:
    """One meta-iteration's slots: member j `rates[j]` times, each member's occurrences as evenly
    spaced as the free slots allow (highest rate placed first, ties by index); all ones:
    each member once, in order (round robin)."""
    total = sum(rates)
    seq: list[int | None] = [None] * total
    for j in sorted(range(len(rates)), key=lambda i: (-rates[i], i)):
        start = seq.index(None)
        for k in range(rates[j]):
            p = start + (k * total) // rates[j]
            while seq[p % total] is not None:  # the next free slot (one exists: counts add up)
                p += 1
            seq[p % total] = j
    return tuple(int(j) for j in seq if j is not None)


class Cycle(Protocol):
    """A member's planned phase seconds (core/intra_group.py `PhaseTimes`)."""

    rollout: float
    train: float
    sync: float


def choose_slots(members: Sequence[Member], times: Sequence[Cycle], cfg: IntraConfig, rr_period: float,
                 period_of: Callable[[tuple[int, ...]], float]) -> tuple[tuple[int, ...], float]:
    """The SLO order's slots of one meta-iteration (module docstring) and its period; () and
    `rr_period` (round robin) when round robin fits every budget or nothing beats it.
    `period_of(slots)`: the group's exact planned period in that sequence (the planner's
    schedule, core/intra_group.py, which calls this module: it is passed in, not imported)."""
    n = len(members)
    if n < 2:
        return (), rr_period
    budgets = [fresh_budget(m.job) for m in members]
    slack = [b - (t.rollout + t.train + t.sync) for b, t in zip(budgets, times)]
    rates, per = [1] * n, rr_period
    best: tuple[tuple[int, ...], float] = ((), rr_period)
    best_worst = max(per / b for b in budgets)
    while True:
        pressure = [per / r / b for r, b in zip(rates, budgets)]
        if max(pressure) <= 1.0 + 1e-9:
            break
        j = max(range(n), key=lambda i: (pressure[i], -slack[i], -i))
        if slack[j] <= 0 or rates[j] >= cfg.max_rate or (rates[j] == 1 and rates.count(1) == 1):
            break
        rates[j] += 1
        slots = spread(rates)
        per = period_of(slots)
        worst = max(per / r / b for r, b in zip(rates, budgets))
        if worst < best_worst - 1e-12:
            best, best_worst = (slots, per), worst
    return best
