"""Study section: the mechanisms beyond the paper, each measured on its own (the ablation rows).

Six mechanisms can let more arrivals share, or run cheaper, than Algorithm 1 with
worst-case admission: admission by the SLO's own terms (`admission.plan`, core/placement/admission.py),
the SLO-aware order inside a group (`intra_group.order`, core/slo_order.py), training scaling
and elastic rollout parallelism (`shapes.*`, core/placement/options/, core/elastic.py), the per-job
co-located mode (`colocation.enabled`, core/placement/options/colocated.py) and stretch pricing
(`placement.pricing`, core/placement/pricing.py: a join is charged the members' stretch and placement
takes the option that adds least). Five more settings act through these: a co-located job
may later move into a group (`colocation.regroup`, core/repair/regroup.py), a group may give back
an idle rollout node by narrowing the members pinned there (`compaction.enabled`,
core/repair/compaction.py, through elastic rollout), a co-located job may run on its training GPUs'
nodes with its rollout narrowed (`colocation.narrow`, core/colo_model.py, through both the
co-located mode and elastic rollout), and an arrival may found a group with a co-located job
that moves in (`colocation.pair`, core/repair/pairing.py; the co-located margin follows it,
`ColocationConfig.effective_margin`), and a group's last member may move to co-location
(`colocation.fold`, core/repair/fold.py, through the co-located mode); each one's "only" row turns the settings it needs on
too. Every row is a configuration (DESIGN §10) run on the study's Philly-driven traces (paper
and catalog profiles) and on the same traces with 30% of the jobs drifting (moderate
severity, as in the drift section), its label naming it (`SchedulerConfig.describe`):

* "all off": the `shipped` profile with every switch off, i.e. the `groups` profile (the
  co-execution groups with priced migrations and drift repair) with compaction and narrowed
  co-location off too;
* "only X": all off but X, so each mechanism is measured alone against that row (co-located
  jobs regrouping, co-located pairing and folding: against "only co-located mode"; compaction: against
  "only elastic rollout"; narrowed co-location: against both);
* "shipped": the `shipped` profile, what `rollmux simulate` runs;
* "shipped without X" / "shipped with X": `shipped` with one switch flipped.

Columns: gain over Solo-D on the same trace, SLO attainment (undrifted and drifted),
cost over the busy-time bound, migrations, isolated placements and co-located jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rollmux.core.config import SchedulerConfig
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.sim.baselines import busy_time_bound
from rollmux.study.config import StudyConfig
from rollmux.study.drift import drifted
from rollmux.study.sections import MODES, pct, philly_jobs, profile, regenerate, run_config, simulate_command
from rollmux.study.sweep import Pmap

SHIPPED = "shipped"  # the profile the section starts from and flips one switch of


@dataclass(frozen=True)
class Mechanism:
    """One switch: a dotted setting of the scheduler's configuration and its on and off values."""

    name: str
    setting: str
    on: object
    off: object
    # Switches it acts only through (co-located jobs regroup only if there are any): its "only"
    # row turns those on too, so it reads against their "only" rows.
    needs: "tuple[Mechanism, ...]" = ()

    def value(self, cfg: SchedulerConfig) -> object:
        """The switch's value in `cfg`."""
        section, key = self.setting.split(".")
        return getattr(getattr(cfg, section), key)

    def set(self, cfg: SchedulerConfig, on: bool) -> SchedulerConfig:
        """`cfg` with the switch turned on or off (ConfigError where the combination is refused)."""
        return cfg.with_overrides({self.setting: self.on if on else self.off})


COLOCATED_MODE = Mechanism("co-located mode", "colocation.enabled", True, False)
ELASTIC_ROLLOUT = Mechanism("elastic rollout", "shapes.elastic_rollout", True, False)
PAIRING = Mechanism("co-located pairing", "colocation.pair", True, False, needs=(COLOCATED_MODE,))
MECHANISMS = (
    Mechanism("admission by the mean", "admission.plan", "mean", "worst"),
    Mechanism("SLO-aware order", "intra_group.order", "slo", "rr"),
    Mechanism("training scaling", "shapes.train_scaling", True, False),
    ELASTIC_ROLLOUT,
    Mechanism("rollout compaction", "compaction.enabled", True, False, needs=(ELASTIC_ROLLOUT,)),
    COLOCATED_MODE,
    Mechanism("co-located jobs regrouping", "colocation.regroup", True, False, needs=(COLOCATED_MODE,)),
    Mechanism("narrowed co-location", "colocation.narrow", True, False, needs=(COLOCATED_MODE, ELASTIC_ROLLOUT)),
    PAIRING,
    Mechanism("co-located folding", "colocation.fold", True, False, needs=(COLOCATED_MODE,)),
    Mechanism("stretch pricing", "placement.pricing", "stretch", "delta"),
)


def _flipped(cfg: SchedulerConfig | None, m: Mechanism, on: bool) -> SchedulerConfig | None:
    """`cfg` with one switch set; None where the configuration refuses the combination (the
    SLO order plans with the worst case) or `cfg` is None."""
    if cfg is None:
        return None
    try:
        return m.set(cfg, on)
    except ValueError:  # (ConfigError)
        return None


def rows(base: SchedulerConfig | None = None) -> dict[str, SchedulerConfig]:
    """The section's rows, label -> configuration (combinations the configuration refuses are
    left out); `base` defaults to the `shipped` profile."""
    default = base or profile(SHIPPED)
    off: SchedulerConfig | None = default
    for m in MECHANISMS:
        off = _flipped(off, m, False)
    out: dict[str, SchedulerConfig | None] = {"all off": off}
    for m in MECHANISMS:
        only = off
        for need in m.needs:
            only = _flipped(only, need, True)
        out[f"only {m.name}"] = _flipped(only, m, True)
    out[SHIPPED] = default
    for m in MECHANISMS:
        out[_flip_label(default, m)] = _flipped(default, m, m.value(default) != m.on)
    return {label: cfg for label, cfg in out.items() if cfg is not None}


def _flip_label(default: SchedulerConfig, m: Mechanism) -> str:
    """The label of the row that flips `m` in `default`."""
    return f"{SHIPPED} {'without' if m.value(default) == m.on else 'with'} {m.name}"


def refused_rows(base: SchedulerConfig | None = None) -> list[str]:
    """The default's flipped rows the configuration refuses (the SLO order plans with the worst
    case: no row turns it on over the mean plan), so the section can say why they are missing."""
    default = base or profile(SHIPPED)
    return [_flip_label(default, m) for m in MECHANISMS if _flipped(default, m, m.value(default) != m.on) is None]


def mechanisms_run(trace: str, label: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int) -> dict:
    """One row on one trace (Solo-D, planning with `shipped`, for the row label "solo-d")."""
    cfg = profile(SHIPPED) if label == "solo-d" else rows()[label]
    res = run_config(jobs, cluster, cfg, seed, solo=label == "solo-d")
    why = res.placements_why or {"placements": {}}
    mig = res.migrations or {"count": 0}
    return {"trace": trace, "row": label, "config": cfg.describe(), "jobs": len(jobs), "cost_usd": res.cost_usd,
            "slo": res.slo_attainment, "migrations": mig["count"],
            "isolated": sum(why["placements"].values()),
            "colocated": res.placements.get("colocated", 0)}


def run(sc: StudyConfig, cluster: ClusterSpec, traces: Path, pmap: Pmap) -> dict:
    """Solo-D and every row on both Philly-driven traces, undrifted and drifted."""
    tasks, bounds = [], {}
    for mode in MODES:
        jobs = philly_jobs(sc, traces, mode)
        for trace, js in ((f"philly {mode}", jobs), (f"philly {mode}, drifted", drifted(jobs, "moderate", sc.seed))):
            bounds[trace] = busy_time_bound(js, cluster)
            tasks += [(trace, label, js, cluster, sc.seed) for label in ("solo-d", *rows())]
    return {"quick": sc.is_quick, "vc": sc.philly_vc, "bounds": bounds, "runs": pmap(mechanisms_run, tasks),
            "refused": refused_rows()}


def render(data: dict) -> str:
    """The markdown section: one table per profile mode, drifted SLO alongside."""
    runs = {(r["trace"], r["row"]): r for r in data["runs"]}
    labels = list(dict.fromkeys(r["row"] for r in data["runs"] if r["row"] != "solo-d"))
    configs = {r["row"]: r["config"] for r in data["runs"]}
    lines = [
        "## Mechanisms beyond the paper, each on its own",
        "",
        f"RollMux on the study's Philly-driven traces (VC {data['vc']}), each row a configuration: "
        "its label names it, a profile plus overrides (`rollmux simulate --profile NAME --set "
        "SETTING=VALUE` runs it). \"only X\" turns one mechanism on over \"all off\" (`shipped` with "
        "every switch of the section off: the `groups` profile, the co-execution groups with priced "
        "migrations and drift repair, with compaction and narrowed co-location off too); `shipped` "
        "is what `rollmux simulate` runs; the last rows flip one switch of `shipped`. Gain is "
        "Solo-D's cost on the same trace over the row's; bound is the busy-time bound of that trace; "
        "*drifted* is the same trace with 30% of its jobs drifting (moderate).",
        "",
    ]
    missing = [m for m in data.get("refused", []) if m not in labels]
    if missing:
        lines += ["Left out because the configuration refuses the combination: "
                  + ", ".join(f"\"{m}\"" for m in missing)
                  + " (the SLO order plans with the worst case, `shipped` admits by the mean).", ""]
    for mode in MODES:
        plain, drift = f"philly {mode}", f"philly {mode}, drifted"
        solo, solo_d = runs[(plain, "solo-d")], runs[(drift, "solo-d")]
        lines += [f"**{mode} profiles** ({solo['jobs']} jobs)", "",
                  "| row | gain | cost / bound | SLO met | migrations | isolated | co-located "
                  "| gain, drifted | SLO met, drifted |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for label in labels:
            r, d = runs[(plain, label)], runs[(drift, label)]
            lines.append(
                f"| {label}: `{configs[label]}` | {solo['cost_usd'] / r['cost_usd']:.2f}× | "
                f"{r['cost_usd'] / data['bounds'][plain]:.2f}× | {pct(r['slo'])} | {r['migrations']} | "
                f"{r['isolated']} | {r['colocated']} | {solo_d['cost_usd'] / d['cost_usd']:.2f}× | {pct(d['slo'])} |")
        lines.append("")
    lines += [regenerate(data, "mechanisms", "one row on one trace: `rollmux simulate` with the row's "
                         f"configuration, e.g. `{simulate_command(PAIRING.set(profile(SHIPPED), False))}`."),
              ""]
    return "\n".join(lines)
