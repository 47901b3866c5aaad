"""Study section: issue 14's mechanisms, each measured on its own (the ablation rows).

Six mechanisms can let more arrivals share, or run cheaper, than Algorithm 1 with
worst-case admission: admission by the SLO's own terms (`--plan mean`, core/admission.py),
the SLO-aware order inside a group (`--order slo`, core/slo_order.py), training scaling and
elastic rollout parallelism (core/shapes.py, core/elastic.py), the per-job co-located
mode (core/colocate.py) and stretch pricing (core/marginal.py: a join is charged the
members' stretch and placement takes the option that adds least). Three more switches act
through these: a co-located job may later move into a group (`--colo-regroup`,
core/regroup.py), a group may give back an idle rollout node by narrowing the members
pinned there (`--compact`, core/compaction.py, through elastic rollout), a co-located job
may run on its training GPUs' nodes with its rollout narrowed (`--colo-narrow`,
core/colo_model.py, through both the co-located mode and elastic rollout), and an arrival may
found a group with a co-located job that moves in (`--colo-pair`, core/pairing.py; the
co-located margin follows it: 1 with pairing, 0.75 without, `colocation_margin`); each one's "only"
row turns the switches it needs on too. Each row runs RollMux with
priced migrations and drift repair on the study's Philly-driven traces (paper and catalog
profiles) and on the same traces with 30% of the jobs drifting (moderate severity, as in the
drift section):

* "all off": none of them (RollMux before issue 14);
* "only X": all off but X, so each mechanism is measured alone against that row (co-located
  jobs regrouping and co-located pairing: against "only co-located mode"; compaction: against
  "only elastic rollout"; narrowed co-location: against both);
* "default": the shipped defaults, whatever they turn on;
* "default without X" / "default with X": the default with one switch flipped.

Columns: gain over Solo-D on the same trace, SLO attainment (undrifted and drifted),
cost over the busy-time bound, migrations, isolated placements and co-located jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.sim.baselines import busy_time_bound
from rollmux.sim.runner import run_policy
from rollmux.sim.simulator import SimConfig
from rollmux.study.config import StudyConfig
from rollmux.study.drift import drifted
from rollmux.study.sections import MODES, pct, philly_jobs, regenerate
from rollmux.study.sweep import Pmap


@dataclass(frozen=True)
class Mechanism:
    """One switch: a SimConfig field (or an IntraConfig field when `intra`) and its two values."""

    name: str
    flag: str
    field: str
    on: object
    off: object
    intra: bool = False
    # Switches it acts only through (co-located jobs regroup only if there are any): its "only"
    # row turns those on too, so it reads against their "only" rows.
    needs: "tuple[Mechanism, ...]" = ()

    def value(self, cfg: SimConfig) -> object:
        """The switch's value in `cfg`."""
        return getattr(cfg.intra if self.intra else cfg, self.field)

    def set(self, cfg: SimConfig, on: bool) -> SimConfig:
        """`cfg` with the switch turned on or off."""
        v = self.on if on else self.off
        if self.intra:
            return replace(cfg, intra=replace(cfg.intra, **{self.field: v}))
        return replace(cfg, **{self.field: v})


COLOCATED_MODE = Mechanism("co-located mode", "--colocate", "colocate", True, False)
ELASTIC_ROLLOUT = Mechanism("elastic rollout", "--elastic-rollout", "elastic_rollout", True, False)
MECHANISMS = (
    Mechanism("admission by the mean", "--plan mean", "plan", "mean", "worst", intra=True),
    Mechanism("SLO-aware order", "--order slo", "order", "slo", "rr", intra=True),
    Mechanism("training scaling", "--train-scaling", "train_scaling", True, False),
    ELASTIC_ROLLOUT,
    Mechanism("rollout compaction", "--elastic-rollout --compact", "compact", True, False, needs=(ELASTIC_ROLLOUT,)),
    COLOCATED_MODE,
    Mechanism("co-located jobs regrouping", "--colocate --colo-regroup", "colo_regroup", True, False,
              needs=(COLOCATED_MODE,)),
    Mechanism("narrowed co-location", "--colocate --elastic-rollout --colo-narrow", "colo_narrow", True, False,
              needs=(COLOCATED_MODE, ELASTIC_ROLLOUT)),
    Mechanism("co-located pairing", "--colocate --colo-pair", "colo_pair", True, False, needs=(COLOCATED_MODE,)),
    Mechanism("stretch pricing", "--stretch-pricing", "stretch_pricing", True, False),
)


def _flipped(cfg: SimConfig | None, m: Mechanism, on: bool) -> SimConfig | None:
    """`cfg` with one switch set; None where the configuration refuses the combination (the
    SLO order plans with the worst case) or `cfg` is None."""
    if cfg is None:
        return None
    try:
        return m.set(cfg, on)
    except ValueError:
        return None


def rows(base: SimConfig | None = None) -> dict[str, SimConfig]:
    """The section's rows, label -> configuration (combinations a config refuses are left out)."""
    default = base or SimConfig()
    off: SimConfig | None = default
    for m in MECHANISMS:
        off = _flipped(off, m, False)
    out: dict[str, SimConfig | None] = {"all off (before issue 14)": off}
    for m in MECHANISMS:
        only = off
        for need in m.needs:
            only = _flipped(only, need, True)
        out[f"only {m.name} ({m.flag})"] = _flipped(only, m, True)
    out["default"] = default
    for m in MECHANISMS:
        out[_flip_label(default, m)] = _flipped(default, m, m.value(default) != m.on)
    return {label: cfg for label, cfg in out.items() if cfg is not None}


def _flip_label(default: SimConfig, m: Mechanism) -> str:
    """The label of the row that flips `m` in `default`."""
    return f"default {'without' if m.value(default) == m.on else 'with'} {m.name}"


def refused_rows(base: SimConfig | None = None) -> list[str]:
    """The default's flipped rows the configuration refuses (the SLO order plans with the worst
    case: no row turns it on over the mean plan), so the section can say why they are missing."""
    default = base or SimConfig()
    return [_flip_label(default, m) for m in MECHANISMS if _flipped(default, m, m.value(default) != m.on) is None]


def mechanisms_run(trace: str, label: str, jobs: list[JobSpec], cluster: ClusterSpec, seed: int) -> dict:
    """One row on one trace (Solo-D for the row label "solo-d")."""
    cfg = SimConfig(seed=seed) if label == "solo-d" else replace(rows()[label], seed=seed)
    res = run_policy("solo-d" if label == "solo-d" else "rollmux", jobs, cluster, cfg)
    why = res.placements_why or {"placements": {}}
    mig = res.migrations or {"count": 0}
    return {"trace": trace, "row": label, "jobs": len(jobs), "cost_usd": res.cost_usd,
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
    lines = [
        "## Issue 14's mechanisms, each on its own",
        "",
        "RollMux with priced migrations and drift repair on the study's Philly-driven traces "
        f"(VC {data['vc']}). \"only X\" turns one mechanism on over \"all off\" (RollMux before "
        "issue 14); \"default\" is what `rollmux simulate` runs; the last rows flip one switch of the "
        "default. Gain is Solo-D's cost on the same trace over the row's; bound is the busy-time bound "
        "of that trace; *drifted* is the same trace with 30% of its jobs drifting (moderate).",
        "",
    ]
    missing = [m for m in data.get("refused", []) if m not in labels]
    if missing:
        lines += ["Left out because the configuration refuses the combination: "
                  + ", ".join(f"\"{m}\"" for m in missing)
                  + " (the SLO order plans with the worst case, the default admits by the mean).", ""]
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
                f"| {label} | {solo['cost_usd'] / r['cost_usd']:.2f}× | "
                f"{r['cost_usd'] / data['bounds'][plain]:.2f}× | {pct(r['slo'])} | {r['migrations']} | "
                f"{r['isolated']} | {r['colocated']} | {solo_d['cost_usd'] / d['cost_usd']:.2f}× | {pct(d['slo'])} |")
        lines.append("")
    lines += [regenerate(data, "mechanisms", "one row on one trace: `rollmux simulate` with the row's flags."), ""]
    return "\n".join(lines)
