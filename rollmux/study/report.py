"""Markdown tables and PNG plots of `rollmux study`."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from rollmux.study.figures import NA, STYLES, Figures, identical_labels, write_csv  # noqa: E402
from rollmux.study.group_size_figure import plot_sizes, reference_label  # noqa: E402
from rollmux.study.part_a import PAPER, PLACEMENT_SEEDS  # noqa: E402


def _slo_label(slo: float | None) -> str:
    return "U(1,2)" if slo is None else f"{slo:g}"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _policies(cells: list) -> list[str]:
    """The policies measured in part A, in the study's order."""
    return list(cells[0].total_cost) if cells else []


# Part A's three numbers per run (rollmux.study.part_a): attribute, title, whether a percentage.
METRICS = (("paper_cost", "paper's cost / optimum's cost rate", False),
           ("total_cost", "total cost to finish / optimum's total cost", False),
           ("slo_attainment", "SLO attainment", True))


def mean_spread(values: list[float], pct: bool = False) -> str:
    """`mean ± std` over a cell's runs ("—" when the policy has no such number)."""
    if not values:
        return "—"
    m, sd = float(np.mean(values)), float(np.std(values))
    if pct:
        return f"{100 * m:.0f}% ± {100 * sd:.0f}" if len(values) > 1 else _pct(m)
    return f"{m:.2f}x ± {sd:.2f}" if len(values) > 1 else f"{m:.2f}x"


def _cells_table(rows: list, first: str, key: Callable, metric: str, pct: bool) -> str:
    """One row per cell: the `first` columns, then one metric's mean ± std per policy."""
    pols = _policies(rows)
    lines = [f"| {first} | " + " | ".join(pols) + " |",
             "|" + "---|" * (first.count("|") + 1 + len(pols))]
    for c in rows:
        vals = getattr(c, metric)
        lines.append(f"| {key(c)} | " + " | ".join(mean_spread(vals.get(p, []), pct) for p in pols) + " |")
    return "\n".join(lines)


def _metric_tables(rows: list, first: str, key: Callable) -> list[str]:
    """The three part-A tables (paper's cost, total cost, SLO) of the same rows."""
    out = []
    for metric, title, pct in METRICS:
        out += [f"**{title}**", "", _cells_table(rows, first, key, metric, pct), ""]
    return out


def small_tables(cells: list, size: int) -> list[str]:
    """Part A at one max group size: the three tables, one row per workload x SLO."""
    rows = [c for c in cells if c.group_size == size]
    return _metric_tables(rows, "workload | SLO", lambda c: f"{c.workload} | {_slo_label(c.slo)}")


def size_tables(cells: list) -> list[str]:
    """Part A's group-size sweep at SLO U(1,2): the three tables."""
    rows = sorted((c for c in cells if c.slo is None), key=lambda c: (c.workload, c.group_size))
    return _metric_tables(rows, "workload | max group size", lambda c: f"{c.workload} | {c.group_size}")


def philly_table(run: dict, key: str) -> str:
    """Parts B/C: cost / busy-time bound, gain vs Solo-D, SLO attainment, jobs finished."""
    solo = run["policies"]["solo-d"].cost_usd
    labels = run.get("labels", {})  # a RollMux row's label names its configuration
    lines = ["| policy | cost $ | cost / busy-time bound | gain vs Solo-D | SLO met | jobs finished | mean slowdown "
             "| migrations (stall h, $) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in run[key].items():
        s, m = r.slowdowns, r.migrations
        moves = "-" if m is None else f"{m['count']} ({m['stall_hours']:.1f} h, ${m['cost_usd']:,.0f})"
        lines.append(f"| {labels.get(name, name)} | {r.cost_usd:,.0f} | {r.cost_usd / run['bound']:.2f}x | "
                     f"{solo / r.cost_usd:.2f}x | {_pct(r.slo_attainment)} | {len(r.outcomes)}/{r.jobs_total} | "
                     f"{s.mean():.3f} | {moves} |")
    return "\n".join(lines)


def plot_small(cells: list, size: int, path: Path) -> None:
    """Bars (mean, whiskers ± std): paper's cost, total cost and SLO per workload at SLO U(1,2); a
    policy without the number (gavel's paper's cost) is marked n/a, not drawn as a zero bar. The
    plotted numbers go to the CSV beside `path`."""
    rows = [c for c in cells if c.group_size == size and c.slo is None]
    x = np.arange(len(rows))
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    pols = _policies(rows)
    width = 0.8 / len(pols)
    table = []
    for ax, (metric, title, pct) in zip(axes, METRICS):
        scale = 100 if pct else 1
        for i, p in enumerate(pols):
            runs = [getattr(c, metric).get(p, []) for c in rows]
            have = [k for k, v in enumerate(runs) if v]
            ax.bar([x[k] + i * width for k in have], [scale * np.mean(runs[k]) for k in have], width,
                   yerr=[scale * np.std(runs[k]) for k in have], label=p, capsize=2, color=f"C{i}")
            for k in (k for k, v in enumerate(runs) if not v):
                ax.text(x[k] + i * width, 0, NA, rotation=90, ha="center", va="bottom", fontsize=7, color=f"C{i}")
            table += [(metric, c.workload, p, *((float(np.mean(v)), float(np.std(v))) if v else (None, None)),
                       len(v)) for c, v in zip(rows, runs)]
        ax.set_xticks(x + 0.4 - width / 2, [c.workload for c in rows])
        ax.set_title(title + (" (%)" if pct else ""), fontsize=9)
        if not pct:
            ax.axhline(1.0, color="k", lw=0.8)
    handles, labels = axes[1].get_legend_handles_labels()  # (total cost: every policy has one)
    fig.legend(handles, labels, loc="lower center", ncol=len(pols), fontsize=8, frameon=False)  # below: hides no bar
    fig.suptitle(f"small job sets, SLO U(1,2), max group size {size}")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    write_csv(path, ("metric", "workload", "policy", "mean", "std", "runs"), table)


def plot_cost_over_time(run: dict, path: Path) -> None:
    """Step plot of the provisioning cost rate over a Philly-driven trace, one line style per policy,
    earlier lines wider so that one a later line runs over still shows (a series equal to another's
    says so); the steps go to the CSV beside `path`."""
    fig, ax = plt.subplots(figsize=(9, 3.8))
    names = run.get("labels", {})  # (a RollMux row's label names its configuration)
    series = {names.get(n, n).replace("`", ""): run["policies"][n] for n in ("solo-d", "rollmux-static", "rollmux")}
    labels = identical_labels({k: list(r.cost_timeline) for k, r in series.items()})
    table = []
    for k, (label, r) in enumerate(series.items()):
        t = [0.0] + [x / 3600 for x, _ in r.cost_timeline]
        rate = [0.0] + [y for _, y in r.cost_timeline]
        ax.step(t, rate, where="post", label=f"{labels[label]} (${r.cost_usd:,.0f})", lw=3.0 - 0.9 * k,
                linestyle=STYLES[k % len(STYLES)][1])
        table += [(label, h, y) for h, y in zip(t, rate)]
    ax.set_xlabel("hours")
    ax.set_ylabel("$/h")
    ax.set_title(f"cost rate over a {run['jobs']}-job Philly-driven trace ({run['mode']} profiles)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    write_csv(path, ("policy", "hours", "dollars_per_hour"), table)


# What part A's numbers mean (kept next to the tables that show them).
PART_A_EXPLAINED = [
    "Every policy places the whole set at t=0 into static groups (no shrink, no re-placement) "
    "and runs it to the last job's end in the simulator, on the same rollout draws. "
    "RollMux's columns are named by their configuration, run at each cell's max group size "
    "(`--set placement.max_group_size=N`): `paper` is the paper's static groups (worst-case "
    "planning, as the optimum plans, arrivals placed together shortest cycle first); the second "
    "also places arrivals in file order and prunes saturated groups, as Algorithm 1 is published. "
    "random and greedy plan their groups with `paper`'s planner. "
    "The optimum is the cheapest partition into groups that meets residency and every SLO under "
    "worst-case planning (`optimal_partition`); its total cost comes from running that partition "
    "as static groups in the same simulator.",
    "",
    "- **paper's cost / optimum**: the paper's metric. Each group costs its $/h once every job "
    "is placed; a group in which a member broke its SLO is charged its $/h x its worst member "
    "slowdown (mean iteration time / solo mean on the same draws). Divided by the optimum's $/h. "
    "Group policies only (gavel: —).",
    "- **total cost / optimum**: $ paid for nodes until the set's last job ended, divided by the "
    "optimum's total $: the cost of finishing the same work. Below 1.00x a policy finished "
    "cheaper than the optimum, either by breaking SLOs (packing tighter, its jobs ran slower "
    "than promised; see the SLO table) or by a grouping that worst-case planning rejects but "
    "the realized draws happened to allow. The optimum minimizes $/h, not total $, so a "
    "policy meeting every SLO can also come out slightly below 1.00x here.",
    "- **SLO attainment**: share of jobs whose mean iteration time stayed within slo x solo.",
    "",
    "Max group size 1 runs every job alone (the optimum and the group policies alike); the group-size "
    "figure measures every size against the optimum at the smallest size swept.",
    "",
    "Each entry is the mean ± standard deviation over the cell's runs: one per instance, and "
    f"for random one per instance x placement seed ({PLACEMENT_SEEDS} seeds). random draws uniformly among the "
    "groups with room and a new group; greedy (Most-Idle) joins the group with room whose "
    "busiest node idles longest per cycle. Neither checks SLOs. A policy can beat the optimum "
    "with 100% SLO: the optimum admits a group only if it meets every SLO under worst-case "
    "rollouts, while the SLO columns judge the realized draws. The paper's cost charges a "
    "broken SLO only by the worst slowdown: a policy that packs tightly enough can stay below "
    "1.00x on it while breaking most SLOs. gavel (Gavel+) may co-locate a job on its training "
    "GPUs, which is outside the optimum's search space (disaggregated groups).",
]


def _figures(out: Path, sc, small: list, philly: list[dict], size: int) -> tuple[list[str], ...]:
    """Draw the three figures (each with its CSV) under `out`; their numbered captions as markdown."""
    figs = Figures()
    plot_small(small, size, out / "small_sets.png")
    fig1 = figs.markdown("small_sets.png", (
        f"Small job sets at max group size {size}, SLO U(1,2): per workload, each policy's paper's cost and "
        "total cost over the optimum's (1.00x: the optimum; lower is cheaper) and its SLO attainment. Bars: "
        "the mean over the cell's runs, whiskers ± one standard deviation; n/a: the policy has no such "
        "number (gavel forms no groups, so it has no paper's cost)."))
    if plot_sizes(small, out / "group_size.png"):
        ref = reference_label(min(sc.group_sizes))
        fig2 = figs.markdown("group_size.png", (
            f"Total cost to finish against the max group size, SLO U(1,2), one panel per workload: the "
            f"optimum and each policy (RollMux's `{PAPER}` profile first), divided by the cost of {ref} on "
            "the same instance (so every size is measured against one reference). Where a line stays flat, a "
            "larger max group size changed nothing for it (the SLO-aware lines, the optimum, both RollMux "
            "configurations and gavel, grow no group that worst-case planning says breaks an SLO); lines "
            "drawn over each other are named under their panel. Points: the mean over the cell's runs, "
            "whiskers ± one standard deviation."))
    else:
        fig2 = figs.omitted("Total cost against the max group size", (
            f"this run has one max group size ({sc.group_sizes[0]}): the table above holds its numbers "
            "(group_size.csv too)"))
    run = philly[0]
    plot_cost_over_time(run, out / "cost_over_time.png")
    fig3 = figs.markdown("cost_over_time.png", (
        f"Provisioning cost rate ($/h) over the {run['jobs']}-job Philly-driven trace ({run['mode']} "
        "profiles): Solo-D and two RollMux configurations, each legend entry with its total cost; a "
        "policy whose steps equal another's says so."))
    return fig1, fig2, fig3


def write_report(out: Path, sc, small: list, philly: list[dict], sections: list[str] = ()) -> Path:
    """Write study.md and its PNGs under `out`; return the markdown path. `sections`: rendered
    markdown of the study's further sections, appended in order."""
    size = max(sc.group_sizes)
    fig1, fig2, fig3 = _figures(out, sc, small, philly, size)
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
        *PART_A_EXPLAINED,
        "",
        f"### Max group size {size}",
        "",
        *small_tables(small, size),
        *fig1,
        "",
        "### Max group size (SLO U(1,2))",
        "",
        *size_tables(small),
        *fig2,
    ]
    for run in philly:
        parts += [
            "",
            f"## B. Philly-driven trace, {run['mode']} profiles ({run['jobs']} jobs, VC {sc.philly_vc}, "
            f"{sc.philly_days:g} days)",
            "",
            f"Busy-time bound ${run['bound']:,.0f}. Each RollMux row names its configuration, a profile "
            "plus overrides (`rollmux simulate --profile NAME --set SETTING=VALUE` runs it): `shipped` is "
            "what `rollmux simulate` runs (shrink, re-placement and consolidation of small groups, "
            "admission by the mean, elastic rollout with rollout compaction, the per-job co-located mode, "
            "stretch pricing); `paper` is the paper's static groups. The other policies plan their groups "
            "with `shipped`'s planner. Part C goes from `paper` to the `groups` profile (the co-execution "
            "groups with shrinking, re-placement, consolidation and drift repair, on the paper's "
            "admission, shapes and pricing, no co-located jobs) and changes one setting of `groups` per "
            "row; the mechanisms beyond `groups` are the mechanisms section's rows.",
            "",
            philly_table(run, "policies"),
            "",
            f"### C. What goes beyond the paper ({run['mode']} profiles)",
            "",
            philly_table(run, "variants"),
        ]
    parts += ["", *fig3]
    for section in sections:
        parts += ["", section]
    md = out / "study.md"
    md.write_text("\n".join(parts))
    return md
