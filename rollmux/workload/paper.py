"""The paper's synthetic simulation profiles (DESIGN §7 table) and small synthetic instances."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rollmux.core.spec import JobSpec
from rollmux.errors import InputError
from rollmux.workload.jobs import Profile, job_id, make_job

PROFILES = ("balanced", "rollout-heavy", "train-heavy")
SIZES = ("small", "medium", "large")

# (profile, size) -> (rollout seconds range, train seconds range), uniform draws.
CLASSES: dict[tuple[str, str], tuple[tuple[float, float], tuple[float, float]]] = {
    ("balanced", "small"): ((50, 100), (50, 100)),
    ("balanced", "medium"): ((100, 200), (100, 200)),
    ("balanced", "large"): ((200, 300), (200, 300)),
    ("rollout-heavy", "small"): ((100, 200), (25, 50)),
    ("rollout-heavy", "medium"): ((200, 400), (50, 100)),
    ("rollout-heavy", "large"): ((400, 600), (100, 200)),
    ("train-heavy", "small"): ((25, 50), (100, 200)),
    ("train-heavy", "medium"): ((50, 100), (200, 400)),
    ("train-heavy", "large"): ((100, 200), (400, 600)),
}

# Training state per node by size: 2048 GB nodes then hold 6 / 4 / 2 resident jobs,
# the paper's 2-5 jobs per node (DESIGN §1 C3).
TRAIN_HOST_GB = {"small": 300.0, "medium": 500.0, "large": 800.0}
ROLLOUT_HOST_GB = (20.0, 60.0)
SIGMA = (0.05, 0.15)
TAIL_FRAC = (0.1, 0.3)
SYNC_S = (5.0, 15.0)
SLO = (1.0, 2.0)


def check_options(profile: str, size: str | None, slo: float | None) -> None:
    """InputError unless profile/size/slo are valid paper-mode options."""
    if profile != "mixed" and profile not in PROFILES:
        raise InputError("profile", f"unknown profile {profile!r} (use mixed, {', '.join(PROFILES)})")
    if size is not None and size not in SIZES:
        raise InputError("size", f"unknown size {size!r} (use {', '.join(SIZES)} or none for mixed)")
    if slo is not None and not (math.isfinite(slo) and slo >= 1.0):
        raise InputError("slo", f"must be a number >= 1 (got {slo!r})")


def check_seed(seed: int) -> None:
    """InputError unless seed is a non-negative integer (what numpy's default_rng accepts)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError("seed", f"must be an integer >= 0 (got {seed!r})")


def draw_slo(rng: np.random.Generator, slo: float | None) -> float:
    """The override, or a per-job SLO from U(1, 2) as in the paper."""
    return float(slo) if slo is not None else float(rng.uniform(*SLO))


def draw_paper_profile(rng: np.random.Generator, profile: str = "mixed", size: str | None = None,
                       philly_gpus: int = 1) -> Profile:
    """One job of a paper class; mixed profile/size draws the class uniformly."""
    prof = PROFILES[rng.integers(len(PROFILES))] if profile == "mixed" else profile
    sz = SIZES[rng.integers(len(SIZES))] if size is None else size
    (r_lo, r_hi), (t_lo, t_hi) = CLASSES[(prof, sz)]
    median = float(rng.uniform(r_lo, r_hi))
    sigma = float(rng.uniform(*SIGMA))
    return Profile(
        model=f"paper-{prof}-{sz}",
        # One node per phase; Philly jobs of a full node or more also get a second rollout node.
        rollout_gpus=16 if philly_gpus >= 8 else 8, train_gpus=8,
        rollout_median=median, rollout_sigma=sigma, rollout_max=median * math.exp(2 * sigma),
        tail_frac=float(rng.uniform(*TAIL_FRAC)), train_s=float(rng.uniform(t_lo, t_hi)),
        sync_s=float(rng.uniform(*SYNC_S)),
        host_rollout_gb=float(rng.uniform(*ROLLOUT_HOST_GB)), host_train_gb=TRAIN_HOST_GB[sz],
    )


def paper_jobs(n: int, profile: str = "mixed", size: str | None = None, slo: float | None = None,
               seed: int = 0, arrivals: Sequence[float] | None = None,
               iterations: int = 50) -> list[JobSpec]:
    """n synthetic paper-profile jobs arriving at t=0 (or at `arrivals`), `iterations` each."""
    check_seed(seed)
    if n < 1:
        raise InputError("n", f"must be >= 1 (got {n})")
    if iterations < 1:
        raise InputError("iterations", f"must be >= 1 (got {iterations})")
    check_options(profile, size, slo)
    times = [0.0] * n if arrivals is None else [float(t) for t in arrivals]
    if len(times) != n or any(not math.isfinite(t) or t < 0 for t in times):
        raise InputError("arrivals", f"need {n} finite arrival times >= 0")
    rng = np.random.default_rng(seed)
    jobs = []
    for i, t in enumerate(sorted(times)):
        p = draw_paper_profile(rng, profile, size)
        s = draw_slo(rng, slo)
        solo = make_job("tmp", t, 1.0, s, p).solo_iter_s
        jobs.append(make_job(job_id("s", i, n), t, iterations * solo, s, p))
    return jobs
