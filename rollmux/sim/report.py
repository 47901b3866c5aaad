"""Human-readable reports (rich tables) of policy comparisons."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.sim.baselines import solo_d_cost
from rollmux.sim.metrics import PolicyResult
from rollmux.sim.runner import Comparison


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _fixed(x: float | None) -> str:
    """Three decimals; '-' where nothing was measured (no job completed an iteration)."""
    return "-" if x is None else f"{x:.3f}"


def _ms(x: float) -> str:
    """Milliseconds, one decimal below 10."""
    return f"{x:.1f}" if x < 10 else f"{x:.0f}"


def _latency(r: PolicyResult) -> str:
    """Decision latency cell: arrival p50/p99 · departure p50/p99 (ms)."""
    ps = r.decision_percentiles()
    if not ps:
        return "-"
    return " · ".join("-" if (p := ps.get(k)) is None else f"{_ms(p['p50'])}/{_ms(p['p99'])}"
                      for k in ("arrival", "departure"))


def _moves(r: PolicyResult) -> str:
    """Migrations cell: count and job-hours stalled ('-' for policies that never move jobs)."""
    m = r.migrations
    return "-" if m is None else f"{m['count']:,} ({m['stall_hours']:.1f} h)"


def why_lines(cmp: Comparison) -> list[str]:
    """One line per policy that explains its isolated placements (core/placement/why.py): placements per
    reason (each placement's nearest miss), then groups refused per reason; zero counts left out."""
    lines = []
    for name, r in cmp.results.items():
        why = r.placements_why
        if why is None:
            continue
        places, groups = why["placements"], why["groups"]
        n, total = sum(places.values()), sum((r.placements or {}).values())

        def cells(counts: dict[str, int]) -> str:
            return " · ".join(f"{k} {v:,}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v) or "-"
        lines.append(f"why isolated, {name}: {n:,} of {total:,} placements, by nearest miss: {cells(places)}; "
                     f"groups refused: {cells(groups)}")
    return lines


def comparison_table(cmp: Comparison, jobs: list[JobSpec], cluster: ClusterSpec, source: str) -> RenderableType:
    """What `rollmux simulate` prints: the table, one row per policy, then why the explaining
    policies isolated jobs (`why_lines`)."""
    solo = cmp.results.get("solo-d")
    solo_cost = solo.cost_usd if solo else solo_d_cost(jobs, cluster)
    basis = "simulated" if solo else "closed form"
    span_d = max((j.arrival_s for j in jobs), default=0) / 86400
    acc, nominal = cmp.accounting, cmp.nominal_iterations
    t = Table(title=f"{len(jobs)} jobs from {source} (arrivals over {span_d:.1f} days)",
              caption=f"{acc.caption(nominal)}gain = Solo-D cost ({basis}) / policy cost; slowdown = mean iteration time vs "
                      f"solo, mean and max over jobs; R / T = rollout / training pool; peaks in GPUs; "
                      f"placements = direct packing / "
                      f"rollout scaling / isolated (+ co-located + paired); migrations = jobs moved between groups (job-hours they stalled); decide ms = policy time per arrival (one placement) · per departure (all its re-placement checks), p50/p99 each; busy-time bound ${cmp.busy_time_bound_usd:,.0f}")
    for col in ("policy", "cost $", "$/h", "gain", *acc.columns, "SLO met", "slowdown", "max", "idle R",
                "idle T", "peak R", "peak T", "placements", "migrations", "decide ms"):
        # The text cells wrap on a narrow console (140 columns when not a terminal) so that the
        # numbers and the headers are never cut to an ellipsis.
        t.add_column(col, justify="left" if col in ("policy", "placements") else "right",
                     no_wrap=col not in ("placements", "migrations", "decide ms"))
    for name, r in cmp.results.items():
        j = r.to_json()
        p = j.get("placements")
        places = "-" if p is None else " / ".join(f"{100 * p[k]:.0f}%" for k in
                                                  ("direct_packing", "rollout_scaling", "isolated"))
        if p is not None and "colocated" in p:  # the co-located mode was on (core/placement/options/colocated.py)
            places += f" + {100 * p['colocated']:.0f}% colo"
        if p is not None and "paired" in p:  # arrivals that founded a group with a co-located job (core/repair/pairing.py)
            places += f" + {100 * p['paired']:.0f}% paired"
        if p is not None and "train_scaling" in p:  # joined by adding training nodes (core/placement/options/)
            places += f" + {100 * p['train_scaling']:.0f}% train-scaled"
        t.add_row(name, f"{r.cost_usd:,.0f}", f"{r.cost_per_hour:,.1f}",
                  f"{cmp.gain_vs_solo(name, solo_cost):.2f}x", *acc.cells(r, nominal), _pct(r.slo_attainment),
                  _fixed(j["mean_slowdown"]), _fixed(j["max_slowdown"]),
                  _pct(r.idle_share["rollout"]) if r.peak_gpus["rollout"] else "-",
                  _pct(r.idle_share["train"]), str(r.peak_gpus["rollout"]), str(r.peak_gpus["train"]),
                  places, _moves(r), _latency(r))
    lines = why_lines(cmp)
    return Group(t, *(Text(line) for line in lines)) if lines else t
