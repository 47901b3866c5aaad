"""The scheduler's configuration (DESIGN §10): one frozen tree of sub-configurations.

Every setting has exactly one default, here, and is validated here. The defaults are the
`shipped` profile, the best measured configuration, which `rollmux simulate` and
`rollmux serve` run unless told otherwise. Named profiles are data (`PROFILES`): overrides
of those defaults by dotted setting names (`"regroup.enabled"`). Command-line flags and
study rows override a profile the same way (`SchedulerConfig.with_overrides`), so every
configuration anyone runs is a profile plus a short, printable list of overrides
(`SchedulerConfig.describe`).

The group planner (core/intra_group.py and everything that plans a group's period) reads
a flat view of the intra-group and admission settings, `IntraConfig`, built for a cluster
by `SchedulerConfig.intra_for` (the warm-switch cost is the cluster's, DESIGN §2).

Settings that act only through another one are inert while it is off, not an error: the
co-located mode's `pair`, `regroup`, `fold` and `narrow` without `colocation.enabled`, `narrow`
without `shapes.elastic_rollout`, compaction without elastic rollout.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

# Co-located only when below this share of the disaggregated cost (placement/options/colocated.py): the
# margin keeps arrivals that would seed a group out of co-location when nothing pairs them.
COLO_MARGIN = 0.75
# With co-located pairing a group is founded when a pairing pays for it: no margin needed.
PAIRED_COLO_MARGIN = 1.0
# The elastic range of a job's rollout nodes (core/elastic.py): ceil(k0 x MIN_SHARE) to
# floor(k0 x MAX_SCALE) nodes for a job that declares k0.
MIN_SHARE = 0.5
MAX_SCALE = 2.0


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class AdmissionConfig(_Section):
    """SLO admission (DESIGN §5, core/placement/admission.py): how a group's period is estimated."""

    # "worst": every rollout at `quantile` of its distribution (1.0: the cap, the paper);
    # "mean": each member's mean iteration time within its budget with confidence `z`, from
    # `chains` x `length` seeded draws.
    plan: Literal["worst", "mean"] = "mean"
    quantile: float = Field(1.0, gt=0, le=1)
    z: float = Field(3.09, ge=0)  # one-sided ~99.9%
    chains: int = Field(32, ge=2)
    length: int = Field(16, ge=1)


class PlacementConfig(_Section):
    """The inter-group search (DESIGN §5, Algorithm 1) and its pricing rule."""

    max_group_size: int = Field(5, ge=1)
    # "delta": the first valid option in Δ order (the paper); "stretch": the valid option that
    # adds least per iteration, the members' stretch included (core/placement/pricing.py).
    pricing: Literal["delta", "stretch"] = "stretch"
    batch_order: bool = True         # jobs arriving together are placed shortest cycle first
    prune_saturated: bool = False    # the paper's pruning of saturated and full groups
    best_fit: Literal["", "util", "slo"] = ""  # among equal-Δ options the tightest, not the first


class ShapesConfig(_Section):
    """Group shapes beyond Algorithm 1 (core/placement/options/, core/elastic.py)."""

    train_scaling: bool = False      # a job may join a group by adding the training nodes it lacks
    elastic_rollout: bool = True     # a job may roll out on fewer or more rollout nodes than nominal
    min_share: float = Field(MIN_SHARE, gt=0, le=1)
    max_scale: float = Field(MAX_SCALE, ge=1)

    @property
    def on(self) -> bool:
        """Either mechanism is on (else Algorithm 1's nominal shapes)."""
        return self.train_scaling or self.elastic_rollout


class ColocationConfig(_Section):
    """The per-job co-located mode, veRL style (core/placement/options/colocated.py and paired.py)."""

    enabled: bool = True             # an arrival may run co-located on training nodes
    speed: float = Field(1.0, gt=0)  # co-located phases run this many times as fast as calibrated
    margin: float | None = Field(None, ge=0)  # None: `effective_margin`
    narrow: bool = True              # with elastic rollout, a 16:8 job may run on its training GPUs' nodes
    regroup: bool = True             # a co-located job may later move into a group (priced)
    pair: bool = True                # an arrival may found a group with a co-located job that moves in
    fold: bool = True                # a group's last member may move to co-location when that saves (priced)
    fold_below: float = Field(0.85, gt=0, le=1)  # ... only below this share of its group's cost per iteration

    @property
    def effective_margin(self) -> float:
        """`margin`, or the one measured best with pairing (1) or without it (0.75)."""
        if self.margin is not None:
            return self.margin
        return PAIRED_COLO_MARGIN if self.pair else COLO_MARGIN


class RegroupConfig(_Section):
    """The repair side beyond the paper's static groups (DESIGN §5a, core/repair/)."""

    enabled: bool = True             # dissolve a group whose members fit elsewhere for less
    shrink: bool = True              # release nodes no remaining member needs
    repair: bool = True              # re-plan a group from measured phase times; evict what it cannot keep
    margin: float = Field(2.0, ge=0)  # hysteresis: a regroup must save this many times its cost
    migration_scale: float = Field(1.0, ge=0)  # stretches every migration's time
    consolidate: int = Field(2, ge=0)  # on a departure, try to dissolve groups of at most this many


class CompactionConfig(_Section):
    """Rollout compaction (core/repair/compaction.py; acts through elastic rollout)."""

    enabled: bool = True
    every_s: float = Field(1800.0, ge=0)  # at most one try per group per this many seconds
    repin: bool = True  # a member alone on the dropped node moves to another of the group's (priced)


class IntraGroupConfig(_Section):
    """The round-robin meta-iterations inside a group (DESIGN §4, core/intra_group.py)."""

    migration: bool = True           # long-tail migration of rollout stragglers
    tail_worker_frac: float = Field(0.25, gt=0, le=1)  # share of a node's workers a migrated tail keeps
    start_ratio: float = Field(0.5, gt=0, le=1)        # a rollout starts when this share of workers is free
    migration_overhead_s: float = Field(1.0, ge=0)     # stragglers are aborted and recomputed
    best_order_max: int = Field(6, ge=0)               # search the best cyclic order up to this size
    # "rr": round robin, every member once per meta-iteration; "slo": weighted round robin,
    # a tight member up to `max_rate` times (core/slo_order.py).
    order: Literal["rr", "slo"] = "rr"
    max_rate: int = Field(4, ge=1)


class ProfilingConfig(_Section):
    """A job submitted without phase times is measured as it runs (core/state/profiling.py)."""

    warmup: int = Field(1, ge=0, le=1000)  # its first iterations, not counted (lazy initialisation, caches)
    iterations: int = Field(3, ge=2, le=10_000)  # then at least this many measured, until its solo time is precise:
    z: float = Field(1.645, ge=0, le=10)  # ... this many standard errors of it (one-sided; 1.645: 95%)
    precision: float = Field(0.5, gt=0, le=1)  # ... within this share of the log of its SLO
    # The worst-case rollout admission plans for is the slowest measured one times this: a run
    # cannot make every response reach the maximum length, as `rollmux profile` does.
    max_headroom: float = Field(1.25, ge=1.0, le=100)
    min_sigma: float = Field(0.05, ge=0, le=3)  # a few runs understate a spread: at least this


SECTIONS = ("admission", "placement", "shapes", "colocation", "regroup", "compaction", "intra_group", "profiling")


class SchedulerConfig(_Section):
    """Every setting of the scheduler, whichever executor runs it (DESIGN §10)."""

    admission: AdmissionConfig = AdmissionConfig()
    placement: PlacementConfig = PlacementConfig()
    shapes: ShapesConfig = ShapesConfig()
    colocation: ColocationConfig = ColocationConfig()
    regroup: RegroupConfig = RegroupConfig()
    compaction: CompactionConfig = CompactionConfig()
    intra_group: IntraGroupConfig = IntraGroupConfig()
    profiling: ProfilingConfig = ProfilingConfig()

    @model_validator(mode="after")
    def _consistent(self) -> "SchedulerConfig":
        if self.admission.plan == "mean" and self.admission.quantile != 1.0:
            raise ValueError("admission.quantile: applies to admission.plan 'worst' only")
        if self.intra_group.order == "slo" and self.admission.plan != "worst":
            raise ValueError("intra_group.order: 'slo' plans with admission.plan 'worst' only")
        return self

    @classmethod
    def profile(cls, name: str) -> "SchedulerConfig":
        """The named profile (`PROFILES`); ConfigError naming the choices for another name."""
        if name not in PROFILES:
            raise ConfigError("profile", f"unknown profile {name!r}; choose from {', '.join(PROFILES)}")
        return _profile(name)

    def with_overrides(self, overrides: Mapping[str, Any]) -> "SchedulerConfig":
        """This configuration with settings replaced by dotted name (`{"regroup.enabled": False}`),
        validated as a whole; ConfigError names the first bad setting."""
        tree = self.model_dump()
        for path, value in overrides.items():
            section, _, key = path.partition(".")
            if section not in SECTIONS or key not in type(self).model_fields[section].annotation.model_fields:
                raise ConfigError(path, "no such setting")
            tree[section][key] = value
        return _validated(tree)

    def changes(self, base: "SchedulerConfig") -> dict[str, Any]:
        """The settings in which this configuration differs from `base`, by dotted name."""
        mine, theirs = self.model_dump(), base.model_dump()
        return {f"{s}.{k}": v for s in SECTIONS for k, v in mine[s].items() if theirs[s][k] != v}

    def describe(self) -> str:
        """The nearest profile plus the overrides that make this configuration, e.g.
        `shipped (colocation.pair=False)`."""
        best = min(PROFILES, key=lambda p: (len(self.changes(_profile(p))), p != "shipped"))
        diff = self.changes(_profile(best))
        return best + (f" ({', '.join(f'{k}={v}' for k, v in diff.items())})" if diff else "")

    def intra_for(self, cluster: Any) -> "IntraConfig":
        """The group planner's flat view of these settings on `cluster` (its warm-switch cost)."""
        return _intra(self, float(cluster.warm_switch_s))


class ConfigError(ValueError):
    """A setting (dotted name, or "profile") with a bad value."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"setting {setting}: {message}")
        self.setting, self.message = setting, message


def _validated(tree: Mapping[str, Any]) -> SchedulerConfig:
    """A SchedulerConfig from plain data; ConfigError naming the first bad setting."""
    try:
        return SchedulerConfig.model_validate(tree)
    except ValidationError as exc:
        first = exc.errors()[0]
        where, msg = ".".join(str(p) for p in first["loc"]), first["msg"]
        if not where:  # a rule across settings: its message starts with the setting it names
            where, _, msg = msg.removeprefix("Value error, ").partition(": ")
        raise ConfigError(where, msg) from None


# Algorithm 1's admission, shapes and pricing, and no co-located mode (DESIGN §5).
_ALGORITHM_1 = {"admission.plan": "worst", "placement.pricing": "delta", "shapes.elastic_rollout": False,
                "colocation.enabled": False, "colocation.regroup": False, "colocation.pair": False,
                "colocation.fold": False}
# The paper's static groups: fixed once formed (no regrouping, shrinking, repair or compaction).
_STATIC = {"regroup.enabled": False, "regroup.shrink": False, "regroup.repair": False, "compaction.enabled": False}

# Named profiles: overrides of the defaults (which are `shipped`).
PROFILES: dict[str, dict[str, Any]] = {
    # The best measured configuration (docs/decisions/profiles.md): the defaults above.
    "shipped": {},
    # The published system (the paper's Algorithm 1 and static groups).
    "paper": {**_ALGORITHM_1, **_STATIC},
    # The co-execution groups with their repair side (regrouping with priced migrations,
    # shrinking, drift repair) on Algorithm 1's admission, shapes and pricing.
    "groups": dict(_ALGORITHM_1),
}


@lru_cache(maxsize=None)
def _profile(name: str) -> SchedulerConfig:
    return SchedulerConfig().with_overrides(PROFILES[name]) if PROFILES[name] else SchedulerConfig()


# IntraConfig field -> (section, setting) it is read from.
_INTRA_SOURCES = {
    "migration": ("intra_group", "migration"),
    "tail_worker_frac": ("intra_group", "tail_worker_frac"),
    "start_ratio": ("intra_group", "start_ratio"),
    "migration_overhead_s": ("intra_group", "migration_overhead_s"),
    "plan_quantile": ("admission", "quantile"),
    "best_order_max": ("intra_group", "best_order_max"),
    "plan": ("admission", "plan"),
    "plan_z": ("admission", "z"),
    "plan_chains": ("admission", "chains"),
    "plan_length": ("admission", "length"),
    "order": ("intra_group", "order"),
    "max_rate": ("intra_group", "max_rate"),
}


@dataclass(frozen=True)
class IntraConfig:
    """The group planner's flat, hashable view of the intra-group and admission settings plus
    the cluster's warm-switch cost, built by `SchedulerConfig.intra_for`. It has no defaults
    of its own and is validated by those settings' rules (one definition of each)."""

    warm_switch_s: float
    migration: bool
    tail_worker_frac: float
    start_ratio: float
    migration_overhead_s: float
    plan_quantile: float
    best_order_max: int
    plan: str
    plan_z: float
    plan_chains: int
    plan_length: int
    order: str
    max_rate: int

    def __post_init__(self) -> None:
        if not self.warm_switch_s >= 0:
            raise ValueError("IntraConfig: warm_switch_s must be >= 0")
        tree: dict[str, dict[str, Any]] = {"admission": {}, "intra_group": {}}
        for f, (section, key) in _INTRA_SOURCES.items():
            tree[section][key] = getattr(self, f)
        try:
            _validated(tree)
        except ConfigError as exc:
            raise ValueError(f"IntraConfig: {exc.setting} {exc.message}") from None


@lru_cache(maxsize=256)
def _intra(config: SchedulerConfig, warm_switch_s: float) -> IntraConfig:
    values = {f: getattr(getattr(config, s), k) for f, (s, k) in _INTRA_SOURCES.items()}
    return IntraConfig(warm_switch_s=warm_switch_s, **values)


assert {f.name for f in fields(IntraConfig)} == set(_INTRA_SOURCES) | {"warm_switch_s"}
