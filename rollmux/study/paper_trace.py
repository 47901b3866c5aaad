"""Study section: the paper's production trace, run as the authors ran it and as we account it.

The authors' two-week, 200-job trace with their measured profiles (`rollmux workload
paper-trace`: measured disaggregated and co-located phase times, deterministic rollouts, SLO
U(1, 2) seeded, sync modelled over 20 Gbit/s) under both accountings (sim/accounting.py):
`work` (every job runs its iterations; a slowdown lengthens it) and `paper` (every job is present
for its trace duration; throughput reported), the latter also at the authors' prices. Policies, each a configuration the service can run
(DESIGN §10): Solo-D, veRL on the measured co-located profiles, heterogeneity-aware Gavel+, the
paper's static Weave (the `paper` profile: Algorithm 1, worst-case admission, static groups, no
co-location) and RollMux as shipped. Beside each: the placement mix against the paper's
60.5 / 15 / 24.5%, peak GPUs of each pool against the paper's 216 H20 / 152 H800 (Solo-D
328 / 328), and the dependency bubbles (idle GPU-hours of each pool) against Solo-D's, which the
paper reports down 24.4% (rollout) and 43.1% (training). `--quick` runs the first 40 jobs.
"""

from __future__ import annotations

from pathlib import Path

from rollmux.core.spec import ClusterSpec
from rollmux.sim.accounting import accounting_named, iterations_done, nominal_iterations
from rollmux.sim.metrics import PolicyResult
from rollmux.sim.runner import run_policy
from rollmux.study.config import StudyConfig
from rollmux.study.sections import pct, profile, regenerate
from rollmux.study.sweep import Pmap
from rollmux.workload.paper_trace import paper_trace_jobs

QUICK_JOBS = 40
# (row, policy, profile): the paper's static Weave and RollMux run the group policy.
POLICIES = (("Solo-D", "solo-d", "shipped"), ("veRL (measured co-located)", "verl", "shipped"),
            ("Gavel+", "gavel", "shipped"), ("static Weave (paper profile)", "rollmux", "paper"),
            ("RollMux as shipped", "rollmux", "shipped"))
PAPER = {"gain": {"static Weave (paper profile)": 936 / 510, "veRL (measured co-located)": 936 / 704},
         "mix": (60.5, 15.0, 24.5), "peak": {"rollout": 216, "train": 152}, "solo_peak": 328,
         "bubbles": {"rollout": 24.4, "train": 43.1}}


def authors_prices(cluster: ClusterSpec) -> ClusterSpec:
    """`cluster` priced as the authors' cost code prices it: a rollout node 1/3 of a training node."""
    pools = cluster.pools
    train = pools.train.model_copy(update={"price_per_gpu_hour": 3 * pools.rollout.price_per_gpu_hour})
    return cluster.model_copy(update={"pools": pools.model_copy(update={"train": train})})


# (label, accounting, the authors' prices?): the table's three blocks.
BLOCKS = (("work", "work", False), ("paper", "paper", False), ("paper, authors' prices", "paper", True))


def trace_run(row: str, policy: str, prof: str, block: tuple[str, str, bool], traces: Path, seed: int,
              n_jobs: int | None, cluster: ClusterSpec) -> dict:
    """One policy on the paper trace in one block (a sweep task): its picklable numbers."""
    name, accounting, authors = block
    jobs = paper_trace_jobs(traces / "paper", seed=seed)[:n_jobs]
    res = run_policy(policy, jobs, authors_prices(cluster) if authors else cluster, profile(prof), seed=seed,
                     accounting=accounting_named(accounting))
    return {"row": row, "accounting": name, "cost_usd": res.cost_usd, "cost_per_hour": res.cost_per_hour,
            "slo": res.slo_attainment, "mean_slowdown": float(res.slowdowns.mean()),
            "throughput": iterations_done(res) / nominal_iterations(jobs), "mix": _mix(res),
            "peak_gpus": dict(res.peak_gpus), "idle_gpu_h": {p: res.idle_gpu_hours(p) for p in ("rollout", "train")}}


def _mix(res: PolicyResult) -> dict[str, float] | None:
    shares = res.placement_shares()
    return None if shares is None else {k: v for k, v in shares.items() if v > 0}


def run(sc: StudyConfig, cluster: ClusterSpec, traces: Path, pmap: Pmap) -> dict:
    """Every policy of `POLICIES` in every block of `BLOCKS`."""
    n = QUICK_JOBS if sc.is_quick else None
    tasks = [(row, pol, prof, b, traces, sc.seed, n, cluster) for b in BLOCKS for row, pol, prof in POLICIES]
    return {"quick": sc.is_quick, "jobs": n or len(paper_trace_jobs(traces / "paper")), "seed": sc.seed,
            "runs": pmap(trace_run, tasks)}


def render(data: dict) -> str:
    """The markdown section: the table under both accountings, the paper's figures beside ours."""
    lines = [
        "## The paper's production trace",
        "",
        f"The authors' trace ({data['jobs']} jobs, `paper/wild.trace`) with their measured profiles "
        f"(`rollmux workload paper-trace --seed {data['seed']}`): measured disaggregated and co-located "
        "phase times, every rollout its measured mean, SLO U(1, 2), weight sync modelled over 20 Gbit/s. "
        "Gain = Solo-D's cost / the row's under the same accounting; `work`: every job runs its iterations; "
        "`paper`: every job is present for its trace duration, throughput = iterations done / Solo-D's "
        "nominal iterations; \"authors' prices\": a rollout node costs 1/3 of a training node, as their cost "
        "code charges (here an H800 costs 2.85x an H20). Bubbles: idle GPU-hours of each pool against Solo-D's.",
        "",
        "| accounting | policy | cost $ | $/h | gain | paper's gain | SLO met | slowdown | throughput | "
        "direct / scaling / new group (+ co-located, paired) | peak GPUs R / T | bubbles R / T vs Solo-D |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for block, _, _ in BLOCKS:
        runs = [r for r in data["runs"] if r["accounting"] == block]
        solo = next(r for r in runs if r["row"] == "Solo-D")
        lines += [_row(r, solo) for r in runs]
    lines += ["", *_differences(data), "", regenerate(data, "paper_trace"), ""]
    return "\n".join(lines)


def _row(r: dict, solo: dict) -> str:
    mix = r["mix"]
    cases = "-" if mix is None else " / ".join(pct(mix.get(k, 0.0)) for k in ("direct_packing", "rollout_scaling",
                                                                             "isolated"))
    extra = "" if mix is None else "".join(f" + {pct(mix[k])} {k}" for k in ("colocated", "paired") if k in mix)
    bubbles = " / ".join("-" if solo["idle_gpu_h"][p] <= 0 or r is solo else
                         f"{100 * (r['idle_gpu_h'][p] / solo['idle_gpu_h'][p] - 1):+.1f}%" for p in ("rollout", "train"))
    paper = PAPER["gain"].get(r["row"])
    return (f"| {r['accounting']} | {r['row']} | {r['cost_usd']:,.0f} | {r['cost_per_hour']:.1f} | "
            f"{solo['cost_usd'] / r['cost_usd']:.2f}x | {'-' if paper is None else f'{paper:.2f}x'} | {pct(r['slo'])} | "
            f"{r['mean_slowdown']:.3f} | {r['throughput']:.3f} | {cases}{extra} | "
            f"{r['peak_gpus']['rollout']} / {r['peak_gpus']['train']} | {bubbles} |")


def _differences(data: dict) -> list[str]:
    """What differs from the paper's setting, each difference named with its direction."""
    weave = next(r for r in data["runs"] if r["row"].startswith("static Weave") and r["accounting"] == "work")
    mix = weave["mix"] or {}
    return [
        "Against the paper's figures: static Weave places "
        f"{pct(mix.get('direct_packing', 0))} / {pct(mix.get('rollout_scaling', 0))} / {pct(mix.get('isolated', 0))} "
        f"(paper {PAPER['mix'][0]:g} / {PAPER['mix'][1]:g} / {PAPER['mix'][2]:g}%); the paper's peaks are "
        f"{PAPER['peak']['rollout']} H20 / {PAPER['peak']['train']} H800 against Solo-D's "
        f"{PAPER['solo_peak']} / {PAPER['solo_peak']}, its bubbles {PAPER['bubbles']['rollout']:g}% / "
        f"{PAPER['bubbles']['train']:g}% fewer. Differences:",
        "",
        "* Prices: an H800 costs 2.85x an H20 here (a rollout node 0.351 of a training node); the authors' "
        "code charges 1/3. Solo-D / veRL under `paper` is then (1 + 1/2.85) = 1.351 here, 4/3 there.",
        "* 32B jobs hold two nodes of each pool in every policy here; the authors' baselines charge them "
        "twice, but their Weave cost function charges every group one training node, which flatters Weave.",
        "* Sync: the profile's iteration is rollout + training; we add the modelled weight sync (6-31 s) "
        "to every disaggregated iteration, which Solo-D pays in idle nodes and groups fill.",
        "* Equal work (`work`) charges a slowdown: a job slowed 1.2x holds its share of a group 1.2x as long. "
        "The paper's accounting (`paper`) does not, and reports throughput apart; its 1.84x is on that basis.",
        "* The paper's Weave is static; RollMux as shipped also co-locates, pairs, regroups, compacts and "
        "re-pins, each priced (docs/decisions/).",
    ]
