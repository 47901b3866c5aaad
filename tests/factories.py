"""Shared builders for the scheduling-core tests: jobs, clusters, groups and small traces.

Plain functions, no fixtures, so property tests can call them from inside
hypothesis-generated examples.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import strategies as st

from rollmux.core.config import IntraConfig, SchedulerConfig
from rollmux.core.group import Group, Member
from rollmux.core.intra_group import PhaseTimes
from rollmux.core.placement import RollMuxPlacement
from rollmux.core.spec import ClusterSpec, ColocatedProfile, JobSpec, Pools, PoolSpec, default_cluster

SHIPPED = SchedulerConfig()                    # what `rollmux simulate` and `rollmux serve` run
PAPER = SchedulerConfig.profile("paper")      # the published system: Algorithm 1, static groups
GROUPS = SchedulerConfig.profile("groups")    # the paper's admission and shapes with the repair side
# What programs embedding the live service run without a config of their own (live/service.py).
EMBEDDED = GROUPS.with_overrides({"regroup.repair": False})

# The group planner's view of the paper profile on the default cluster: worst-case admission.
WORST = PAPER.intra_for(default_cluster())

# Short names tests use for settings (the policy's former keyword arguments).
_SHORT = {
    "colocate": "colocation.enabled", "colo_speed": "colocation.speed", "colo_margin": "colocation.margin",
    "colo_narrow": "colocation.narrow", "prune_saturated": "placement.prune_saturated",
    "best_fit": "placement.best_fit", "train_scaling": "shapes.train_scaling",
    "elastic_rollout": "shapes.elastic_rollout", "max_group_size": "placement.max_group_size",
    "regroup": "regroup.enabled", "shrink": "regroup.shrink", "repair": "regroup.repair",
    "consolidate": "regroup.consolidate", "regroup_margin": "regroup.margin",
    "migration_scale": "regroup.migration_scale", "batch_order": "placement.batch_order",
    "compact": "compaction.enabled", "compact_every_s": "compaction.every_s",
    "colo_regroup": "colocation.regroup", "colo_pair": "colocation.pair",
    "plan": "admission.plan", "plan_quantile": "admission.quantile", "order": "intra_group.order",
    "migration": "intra_group.migration",
}


def intra(**changes) -> IntraConfig:
    """The paper profile's planner view on the default cluster with `changes` (IntraConfig fields)."""
    return replace(WORST, **changes)


def config(base: SchedulerConfig = PAPER, *, stretch_pricing: bool | None = None, **settings) -> SchedulerConfig:
    """`base` with settings by short name (`_SHORT`) or by dotted name passed as a dict under
    `dotted=...`; `stretch_pricing` sets `placement.pricing`."""
    overrides = {_SHORT[k]: v for k, v in settings.items() if k != "dotted"}
    overrides.update(settings.get("dotted", {}))
    if stretch_pricing is not None:
        overrides["placement.pricing"] = "stretch" if stretch_pricing else "delta"
    return base.with_overrides(overrides) if overrides else base


def make_policy(planner: IntraConfig | None = None, base: SchedulerConfig = PAPER, **settings) -> RollMuxPlacement:
    """RollMux's placement as `build_policy` makes it from `base` with `settings` (see `config`),
    planning with `planner` when given (else the configuration's view on the default cluster)."""
    cfg = config(base, **settings)
    if planner is None:
        planner = cfg.intra_for(default_cluster())
    return RollMuxPlacement(planner, cfg)


def make_job(job_id: str = "j0", *, rollout: float = 100.0, train: float = 100.0,
             sync: float = 5.0, sigma: float = 0.0, rollout_max: float | None = None,
             arrival: float = 0.0, duration: float = 100_000.0, slo: float = 2.0,
             rollout_gpus: int = 8, train_gpus: int = 8, tail_frac: float = 0.0,
             host_rollout: float = 10.0, host_train: float = 10.0,
             colo: tuple[float, float] | None = None, **extra) -> JobSpec:
    """A JobSpec; `rollout` is the median, `rollout_max` defaults to the median; `colo` = (k_r, k_t):
    a measured co-located profile that many times its mean phase times."""
    job = JobSpec(
        job_id=job_id, arrival_s=arrival, duration_s=duration, slo=slo,
        rollout_gpus=rollout_gpus, train_gpus=train_gpus,
        rollout_s={"median": rollout, "sigma": sigma,
                   "max": rollout if rollout_max is None else rollout_max},
        tail_frac=tail_frac, train_s=train, sync_s=sync,
        host_gb={"rollout": host_rollout, "train": host_train}, **extra)
    if colo is None:
        return job
    return job.model_copy(update={"colocated": ColocatedProfile(rollout_s=colo[0] * job.mean_rollout_s,
                                                                train_s=colo[1] * job.mean_train_s)})


# Co-located / disaggregated phase ratios for tests about the mechanics, not the model: a
# rollout-heavy job co-location speeds up (the authors' 8B-32k pair), a balanced one that gains a
# little on both phases, a train-heavy one whose training gains (the authors' 32B-8k rollout).
ROLLOUT_HEAVY_COLO = (607.5 / 888.0, 1.0)
BALANCED_COLO = (0.878, 0.839)
TRAIN_HEAVY_COLO = (277.0 / 268.0, 271.0 / 362.0)


def job_record(job_id: str = "j0", **overrides) -> dict:
    """A valid trace record (the JSON form of one job), with top-level overrides."""
    rec = {"job_id": job_id, "arrival_s": 0.0, "duration_s": 3600.0, "slo": 1.5,
           "model": "qwen2.5-7b", "rollout_gpus": 16, "train_gpus": 8,
           "rollout_s": {"median": 240.0, "sigma": 0.1, "max": 280.0}, "tail_frac": 0.3,
           "train_s": 180.0, "sync_s": 12.0, "host_gb": {"rollout": 30.0, "train": 112.0}}
    rec.update(overrides)
    return rec


def make_cluster(*, rollout_price: float = 1.0, train_price: float = 2.85,
                 gpus_per_node: int = 8, host_gb: float = 2048.0,
                 max_rollout_nodes: int | None = None, max_train_nodes: int | None = None,
                 warm_switch_s: float = 2.0) -> ClusterSpec:
    """The paper's cluster with optional caps and prices."""
    return ClusterSpec(pools=Pools(
        rollout=PoolSpec(gpu="H20", gpus_per_node=gpus_per_node, host_gb_per_node=host_gb,
                         price_per_gpu_hour=rollout_price, max_nodes=max_rollout_nodes),
        train=PoolSpec(gpu="H800", gpus_per_node=gpus_per_node, host_gb_per_node=host_gb,
                       price_per_gpu_hour=train_price, max_nodes=max_train_nodes),
    ), warm_switch_s=warm_switch_s)


def make_group(jobs_and_pins: list[tuple[JobSpec, tuple[int, ...]]], n_rollout: int,
               n_train: int = 1, group_id: int = 0, train_nodes: tuple[int, ...] = (0,)) -> Group:
    """A group whose members are pinned to the given rollout nodes and `train_nodes`."""
    members = tuple(Member(job, pins, train_nodes) for job, pins in jobs_and_pins)
    return Group(group_id, n_rollout, n_train, members)


def fixed_times(group: Group) -> list[PhaseTimes]:
    """Median (= deterministic when sigma is 0) phase durations of each member."""
    return [PhaseTimes(m.job.rollout_s.median, m.job.train_s, m.job.sync_s) for m in group.members]


def random_group(rng: np.random.Generator, *, max_members: int = 5, max_rollout_nodes: int = 3,
                 lo: float = 20.0, hi: float = 200.0, max_tail: float = 0.4) -> Group:
    """A random single-training-node group of deterministic jobs (as in the equivalence check)."""
    n = int(rng.integers(1, max_members + 1))
    nr = int(rng.integers(1, max_rollout_nodes + 1))
    pairs = []
    for i in range(n):
        r = float(rng.uniform(lo, hi))
        job = make_job(f"j{i}", rollout=r, train=float(rng.uniform(lo, hi)),
                       tail_frac=float(rng.uniform(0.0, max_tail)))
        pairs.append((job, (int(rng.integers(nr)),)))
    return make_group(pairs, nr)


def synthetic_trace(rng: np.random.Generator, n_jobs: int = 40, *, sigma: float = 0.1,
                    mean_gap_s: float = 600.0, duration_range: tuple[float, float] = (20_000.0, 60_000.0),
                    slo_range: tuple[float, float] = (1.0, 2.0), gpus: tuple[int, ...] = (8, 16)) -> list[JobSpec]:
    """A Philly-like synthetic trace: Poisson arrivals, the paper's U(·,·) phase profiles.

    Rollout max is the 0.999-ish worst case (median * exp(3.1 sigma)); tail_frac in [0, 0.3].
    """
    profiles = [((50, 100), (50, 100)), ((100, 200), (100, 200)), ((100, 200), (25, 50)),
                ((25, 50), (100, 200)), ((200, 300), (50, 100))]
    jobs = []
    t = 0.0
    for i in range(n_jobs):
        t += float(rng.exponential(mean_gap_s))
        (rlo, rhi), (tlo, thi) = profiles[int(rng.integers(len(profiles)))]
        med = float(rng.uniform(rlo, rhi))
        jobs.append(make_job(
            f"j{i:03d}", rollout=med, rollout_max=med * float(np.exp(3.1 * sigma)), sigma=sigma,
            train=float(rng.uniform(tlo, thi)), sync=float(rng.uniform(2, 15)),
            arrival=t, duration=float(rng.uniform(*duration_range)),
            slo=float(rng.uniform(*slo_range)),
            rollout_gpus=int(rng.choice(gpus)), train_gpus=int(rng.choice(gpus)),
            tail_frac=float(rng.uniform(0.0, 0.3)),
            host_rollout=float(rng.uniform(20, 400)), host_train=float(rng.uniform(50, 600))))
    return jobs


# -- hypothesis strategies -------------------------------------------------------------------

half_seconds = st.integers(20, 600).map(lambda x: x / 2)  # 10 s .. 300 s; ties are likely


@st.composite
def groups(draw, max_members: int = 5, max_rollout_nodes: int = 3, max_train_nodes: int = 2,
           single_node: bool = False) -> Group:
    """A group of deterministic jobs, each pinned to a random subset of rollout nodes and to
    the group's first 1..max_train_nodes training nodes (one node per phase if `single_node`)."""
    nr = draw(st.integers(1, max_rollout_nodes))
    nt = 1 if single_node else draw(st.integers(1, max_train_nodes))
    members = []
    for i in range(draw(st.integers(1, max_members))):
        pins = tuple(sorted(draw(st.sets(st.integers(0, nr - 1), min_size=1,
                                         max_size=1 if single_node else nr))))
        kt = draw(st.integers(1, nt))
        job = make_job(f"j{i}", rollout=draw(half_seconds), train=draw(half_seconds),
                       sync=draw(st.integers(0, 20).map(float)),
                       tail_frac=draw(st.sampled_from([0.0, 0.1, 0.3, 0.6])),
                       rollout_gpus=8 * len(pins), train_gpus=8 * kt)
        members.append(Member(job, pins, tuple(range(kt))))
    return Group(0, nr, nt, tuple(members))


@st.composite
def migration_configs(draw) -> IntraConfig:
    """Intra-group configs with long-tail migration on and varied knobs."""
    return intra(warm_switch_s=draw(st.sampled_from([0.0, 2.0])), migration=True,
                       tail_worker_frac=draw(st.sampled_from([0.1, 0.25, 0.5])),
                       start_ratio=draw(st.sampled_from([0.25, 0.5, 0.75, 1.0])),
                       migration_overhead_s=draw(st.sampled_from([0.0, 1.0])))


def any_configs() -> st.SearchStrategy[IntraConfig]:
    """Migration on (varied) or off, warm switch 0 or 2 s."""
    return st.one_of(migration_configs(),
                     st.sampled_from([intra(migration=False), intra(migration=False, warm_switch_s=0.0)]))


# -- live-plane helpers ----------------------------------------------------------------------

def served_config(tmp_path, **server) -> dict:
    """The config record a `rollmux serve` child process (`ProcessServer` with `server`) journals first."""
    from rollmux.live.journal import open_store
    from rollmux.live.local import ProcessServer

    store = str(tmp_path / "j.db")
    proc = ProcessServer(store, tmp_path, **server)
    try:
        journal = open_store(store, readonly=True)
        try:
            first = journal.records()[0]
        finally:
            journal.close()
    finally:
        proc.signal()
    assert first.kind == "config"
    return first.payload


def run_threads(targets: list) -> None:
    """Start one thread per (function, args) pair and wait for all of them."""
    import threading
    threads = [threading.Thread(target=fn, args=args) for fn, args in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)


def most_running_at_once(marks: list[tuple[float, str]]) -> int:
    """Peak number of phases running together, from (time, "start"|"end") marks."""
    running = peak = 0
    for _, kind in sorted(marks, key=lambda m: (m[0], m[1] == "start")):  # an end before a start at a tie
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    return peak


class GrantAtOnce:
    """A permit client that grants every phase at once (a job under a scheduler with nothing else)
    and records each release's timings."""

    def __init__(self) -> None:
        self.released = []

    def acquire(self, job_id, phase):
        """The phase's permit, at once."""
        from rollmux.core.group_controller import Grant
        return Grant(0, job_id, phase, "rollout" if phase == "rollout" else "train", (0,), 0.0, 0.0, 0.0)

    def tail_started(self, job_id) -> None:
        """Nothing to do: no scheduler watches the tail."""

    def release(self, timings) -> None:
        """Record the released phase's timings."""
        self.released.append(timings)
