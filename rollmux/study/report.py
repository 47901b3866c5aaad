"""Markdown tables and PNG plots of `rollmux study`."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def _slo_label(slo: float | None) -> str:
    return "U(1,2)" if slo is None else f"{slo:g}"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _policies(cells: list) -> list[str]:
    """The policies measured in part A, in the study's order."""
    return list(cells[0].cost_vs_opt) if cells else []


def _cells_table(rows: list, first: str, key: Callable) -> str:
    """One row per cell: the `first` columns, then cost / optimum and SLO per policy."""
    pols = _policies(rows)
    lines = [f"| {first} | " + " | ".join(f"{p} cost/opt | {p} SLO" for p in pols) + " |",
             "|" + "---|" * (first.count("|") + 1 + 2 * len(pols))]
    for c in rows:
        vals = " | ".join(f"{c.cost_vs_opt[p]:.2f}x | {_pct(c.slo_attainment[p])}" for p in pols)
        lines.append(f"| {key(c)} | {vals} |")
    return "\n".join(lines)


def small_table(cells: list, size: int) -> str:
    """Part A at one max group size: cost / optimum and SLO attainment per policy."""
    rows = [c for c in cells if c.group_size == size]
    return _cells_table(rows, "workload | SLO", lambda c: f"{c.workload} | {_slo_label(c.slo)}")


def size_table(cells: list) -> str:
    """Part A's group-size sweep at SLO U(1,2)."""
    rows = sorted((c for c in cells if c.slo is None), key=lambda c: (c.workload, c.group_size))
    return _cells_table(rows, "workload | max group size", lambda c: f"{c.workload} | {c.group_size}")


def philly_table(run: dict, key: str) -> str:
    """Parts B/C: cost / busy-time bound, gain vs Solo-D, SLO attainment, jobs finished."""
    solo = run["policies"]["solo-d"].cost_usd
    lines = ["| policy | cost $ | cost / busy-time bound | gain vs Solo-D | SLO met | jobs finished | mean slowdown |",
             "|---|---|---|---|---|---|---|"]
    for name, r in run[key].items():
        s = r.slowdowns
        lines.append(f"| {name} | {r.cost_usd:,.0f} | {r.cost_usd / run['bound']:.2f}x | "
                     f"{solo / r.cost_usd:.2f}x | {_pct(r.slo_attainment)} | {len(r.outcomes)}/{r.jobs_total} | "
                     f"{s.mean():.3f} |")
    return "\n".join(lines)


def plot_small(cells: list, size: int, path: Path) -> None:
    """Bars: cost / optimum and SLO attainment per workload at SLO U(1,2)."""
    rows = [c for c in cells if c.group_size == size and c.slo is None]
    x = np.arange(len(rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    pols = _policies(rows)
    width = 0.8 / len(pols)
    for i, p in enumerate(pols):
        axes[0].bar(x + i * width, [c.cost_vs_opt[p] for c in rows], width, label=p)
        axes[1].bar(x + i * width, [100 * c.slo_attainment[p] for c in rows], width, label=p)
    for ax, title in ((axes[0], "cost rate / offline optimum"), (axes[1], "SLO attainment (%)")):
        ax.set_xticks(x + 0.4 - width / 2, [c.workload for c in rows])
        ax.set_title(title)
    axes[0].axhline(1.0, color="k", lw=0.8)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"small job sets, SLO U(1,2), max group size {size}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sizes(cells: list, path: Path) -> None:
    """Lines: rollmux cost / optimum against max group size, per workload."""
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for w in sorted({c.workload for c in cells}):
        pts = sorted((c.group_size, c.cost_vs_opt["rollmux"]) for c in cells if c.workload == w and c.slo is None)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=w)
    ax.set_xlabel("max group size")
    ax.set_ylabel("rollmux cost / optimum")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_cost_over_time(run: dict, path: Path) -> None:
    """Step plot of the provisioning cost rate over a Philly-driven trace."""
    fig, ax = plt.subplots(figsize=(9, 3.8))
    series = {"solo-d": run["policies"]["solo-d"], "rollmux (static groups)": run["policies"]["rollmux-static"],
              "rollmux": run["policies"]["rollmux"]}
    for label, r in series.items():
        t = [0.0] + [x / 3600 for x, _ in r.cost_timeline]
        rate = [0.0] + [y for _, y in r.cost_timeline]
        ax.step(t, rate, where="post", label=f"{label} (${r.cost_usd:,.0f})", lw=1)
    ax.set_xlabel("hours")
    ax.set_ylabel("$/h")
    ax.set_title(f"cost rate over a {run['jobs']}-job Philly-driven trace ({run['mode']} profiles)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out: Path, sc, small: list, philly: list[dict]) -> Path:
    """Write study.md and its PNGs under `out`; return the markdown path."""
    size = max(sc.group_sizes)
    plot_small(small, size, out / "small_sets.png")
    plot_sizes(small, out / "group_size.png")
    plot_cost_over_time(philly[0], out / "cost_over_time.png")
    exact = all(c.exact for c in small)
    parts = [
        "# RollMux scheduling study",
        "",
        f"Regenerate: `rollmux study{' --quick' if sc.is_quick else ''} --out {out}` "
        f"(fixed seeds; config: {sc}).",
        "",
        f"## A. Small job sets vs the offline optimum ({sc.small_jobs} jobs, {sc.instances} instance(s) "
        f"per cell, all arriving together; optimum {'exact' if exact else 'partly sampled'})",
        "",
        "Cost = the steady provisioning cost rate once every job is placed, divided by the optimum's "
        "(the cheapest partition into groups that meets residency and every SLO under worst-case "
        "planning). SLO = share of jobs whose mean iteration time stayed within slo x solo when the "
        "set ran to completion. A policy below 1.00x is cheaper than the optimum only because it "
        "breaks SLOs (random, greedy and gavel do not share RollMux's SLO admission).",
        "",
        f"### Max group size {size}",
        "",
        small_table(small, size),
        "",
        "![small sets](small_sets.png)",
        "",
        "### Max group size (SLO U(1,2))",
        "",
        size_table(small),
        "",
        "![group size](group_size.png)",
    ]
    for run in philly:
        parts += [
            "",
            f"## B. Philly-driven trace, {run['mode']} profiles ({run['jobs']} jobs, VC {sc.philly_vc}, "
            f"{sc.philly_days:g} days)",
            "",
            f"Busy-time bound ${run['bound']:,.0f}. `rollmux` runs the new defaults (shrink, re-placement and "
            "consolidation of small groups); `rollmux-static` is the paper's static groups.",
            "",
            philly_table(run, "policies"),
            "",
            f"### C. What goes beyond the paper ({run['mode']} profiles)",
            "",
            philly_table(run, "variants"),
        ]
    parts += ["", "![cost over time](cost_over_time.png)", ""]
    md = out / "study.md"
    md.write_text("\n".join(parts))
    return md
