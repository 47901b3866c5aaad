"""Part A's group-size figure: each policy's total cost to finish against the max group size, per
workload, relative to the optimum at the smallest size swept (1: every job alone).

A policy's cost over the optimum's at the same size hides what the size does (both move
together, and RollMux's `paper` profile plans as the optimum does, so it reads 1.00x at every
size); here every size is measured against one reference, instance by instance."""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from rollmux.study.figures import STYLES, integer_axis, same_lines, write_csv  # noqa: E402

OPTIMUM = "optimum"  # the optimum's own line (its partition run as static groups)
# One point of a curve: (max group size, mean, std, runs).
Point = tuple[int, float, float, int]


def _relative(cell, ref, policy: str) -> list[float]:
    """`policy`'s total cost in each run of `cell` over the reference cell's optimum on the same
    instance (a randomized policy has several runs per instance, instance by instance)."""
    opt, base = cell.optimum_usd, ref.optimum_usd
    if policy == OPTIMUM:
        return [o / b for o, b in zip(opt, base)]
    runs = cell.total_cost[policy]
    per = len(runs) // len(opt)
    return [x * opt[k // per] / base[k // per] for k, x in enumerate(runs)]


def size_curves(cells: list) -> dict[str, dict[str, list[Point]]]:
    """Per workload, per line (the optimum, then the policies): its points over the sizes swept at
    SLO U(1,2), relative to the optimum at the workload's smallest size."""
    sweep = [c for c in cells if c.slo is None]
    out: dict[str, dict[str, list[Point]]] = {}
    for w in dict.fromkeys(c.workload for c in sweep):
        by_size = {c.group_size: c for c in sweep if c.workload == w}
        ref = by_size[min(by_size)]
        lines = (OPTIMUM, *ref.total_cost)
        out[w] = {p: [(g, float(np.mean(v)), float(np.std(v)), len(v))
                      for g in sorted(by_size) for v in [_relative(by_size[g], ref, p)]] for p in lines}
    return out


def reference_label(size: int) -> str:
    """What the figure's costs are divided by."""
    return "every job alone" if size == 1 else f"the optimum at max group size {size}"


def _same_note(lines: dict[str, list[Point]]) -> str:
    """A panel's lines drawn over each other, as an x-label line ('' when none)."""
    groups = same_lines({p: [m for _, m, _, _ in pts] for p, pts in lines.items()})
    text = "; ".join(" = ".join(g) for g in groups)
    return "\n" + textwrap.fill("same line: " + text, 48) if groups else ""


def _panel(ax, workload: str, lines: dict[str, list[Point]], sizes: list[int]) -> None:
    """One workload's lines: the optimum a wide grey band underneath, then a marker, line style and
    colour per policy (figure 1's colours), earlier ones wider and larger so that a line equal to a
    later one still shows around it; coinciding lines named below the panel."""
    for k, (p, pts) in enumerate(lines.items()):
        xs, ys, err = [g for g, *_ in pts], [m for _, m, _, _ in pts], [s for _, _, s, _ in pts]
        if p == OPTIMUM:
            ax.plot(xs, ys, color="0.55", alpha=0.45, lw=8, solid_capstyle="round", label=p, zorder=1)
            continue
        marker, style = STYLES[(k - 1) % len(STYLES)]
        ax.errorbar(xs, ys, yerr=err, marker=marker, linestyle=style, color=f"C{k - 1}", label=p, capsize=2,
                    markersize=10 - 1.3 * k, lw=2.7 - 0.35 * k, zorder=2)
    integer_axis(ax.xaxis, sizes)
    ax.axhline(1.0, color="k", lw=0.6)
    ax.set_title(workload, fontsize=10)
    ax.set_xlabel("max group size" + _same_note(lines), fontsize=8)


def plot_sizes(cells: list, path) -> bool:
    """Per workload a panel, per policy and the optimum a line: total cost to finish over the
    reference (`reference_label`) against the max group size, on an integer axis; mean over the
    runs, whiskers ± std. The numbers go to the CSV beside `path`; no picture (False) with fewer
    than two sizes (a line of one point)."""
    curves = size_curves(cells)
    sizes = sorted({c.group_size for c in cells if c.slo is None})
    write_csv(path, ("workload", "line", "max_group_size", "mean", "std", "runs"),
              [(w, p, *pt) for w, lines in curves.items() for p, pts in lines.items() for pt in pts])
    if len(sizes) < 2:
        return False
    cols = min(len(curves), 2)  # two panels a row: legible in a docs page's column
    rows = -(-len(curves) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.4 * cols, 3.4 * rows + 1.0), sharey=True, squeeze=False)
    for ax, (w, lines) in zip(axes.flat, curves.items()):
        _panel(ax, w, lines, sizes)
    for ax in list(axes.flat)[len(curves):]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel(f"total cost / {reference_label(sizes[0])}'s", fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle(f"total cost to finish against the max group size, SLO U(1,2),\nrelative to "
                 f"{reference_label(sizes[0])}", fontsize=10)
    fig.tight_layout(rect=(0, 0.45 / (3.4 * rows + 1.0), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
