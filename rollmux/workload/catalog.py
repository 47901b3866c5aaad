"""The RL job catalog: realistic recipes whose phase times come from the performance model."""

from __future__ import annotations

import math

import numpy as np

from rollmux.workload.jobs import Profile
from rollmux.workload.perf import Recipe, phases

# GPUs per model (rollout H20 / train H800), multiples of 8. The paper's 8k profiles
# spend about the same training seconds per parameter for 7B, 14B and 32B, i.e. they
# train on the same number of GPUs; 32B rolls out with TP=2 engines.
GPUS: dict[str, tuple[int, int]] = {
    "qwen2.5-3b": (8, 8),
    "qwen3-4b": (16, 8),
    "qwen2.5-7b": (16, 16),
    "qwen3-8b": (16, 8),
    "qwen2.5-14b": (16, 16),
    "qwen2.5-32b": (16, 16),
}

# Batch recipe per response cap: (responses per iteration, length scale / cap).
# Long-cap recipes use smaller batches (the KV cache of a 32k response is GBs);
# a scale of 0.8 means a mean length of 0.57 x cap with 29% of responses truncated.
BATCH: dict[int, tuple[int, float]] = {
    4096: (768, 0.6),
    8192: (1024, 0.8),
    16384: (768, 0.8),
    32768: (512, 0.8),
}

# Weighted model mix (more small models than large) and the caps each model is run with.
MODEL_WEIGHTS: dict[str, float] = {
    "qwen2.5-3b": 0.25, "qwen3-4b": 0.15, "qwen2.5-7b": 0.25,
    "qwen3-8b": 0.10, "qwen2.5-14b": 0.15, "qwen2.5-32b": 0.10,
}
CAPS: dict[str, tuple[int, ...]] = {
    "qwen2.5-3b": (4096, 8192, 16384),
    "qwen3-4b": (8192, 16384, 32768),
    "qwen2.5-7b": (4096, 8192, 16384),
    "qwen3-8b": (8192, 16384, 32768),
    "qwen2.5-14b": (4096, 8192, 16384),
    "qwen2.5-32b": (4096, 8192, 16384),
}
MULTI_TURN_P = 0.3
# Per-job spread of the length scale: datasets and tasks differ in how much the model writes.
LENGTH_JITTER = (0.85, 1.15)


def recipe(model: str, cap: int, multi_turn: bool = False, length_jitter: float = 1.0) -> Recipe:
    """The catalog recipe of (model, cap, turns), optionally with a scaled length scale."""
    rollout_gpus, train_gpus = GPUS[model]
    batch, scale = BATCH[cap]
    return Recipe(model, cap, rollout_gpus, train_gpus, batch, scale * length_jitter, multi_turn)


def rollout_sigma(cap: int, multi_turn: bool) -> float:
    """Lognormal spread of rollout time: wider for longer caps and for multi-turn jobs."""
    return 0.1 + 0.05 * math.log2(cap / 4096) + (0.1 if multi_turn else 0.0)


def tail_frac(cap: int, multi_turn: bool) -> float:
    """Share of rollout time after ~80% of responses finish: longer caps, longer tails."""
    return min(0.5, 0.2 + 0.1 * math.log2(cap / 4096) + (0.05 if multi_turn else 0.0))


def label(model: str, cap: int, multi_turn: bool) -> str:
    """Model field of the trace, e.g. qwen2.5-7b-8k or qwen3-4b-32k-mt (multi-turn)."""
    return f"{model}-{cap // 1024}k" + ("-mt" if multi_turn else "")


def recipe_profile(r: Recipe) -> Profile:
    """The job profile a recipe yields under the performance model."""
    ph = phases(r)
    return Profile(
        model=label(r.model, r.cap, r.multi_turn), rollout_gpus=r.rollout_gpus,
        train_gpus=r.train_gpus, rollout_median=ph.rollout_median,
        rollout_sigma=rollout_sigma(r.cap, r.multi_turn), rollout_max=ph.rollout_max,
        tail_frac=tail_frac(r.cap, r.multi_turn), train_s=ph.train, sync_s=ph.sync,
        host_rollout_gb=ph.host_rollout_gb, host_train_gb=ph.host_train_gb,
        weights_gb=r.arch.weight_bytes / 1e9,
    )


def draw_catalog_profile(rng: np.random.Generator) -> Profile:
    """One job's profile: weighted model, uniform cap among its caps, turns, length jitter."""
    models = list(MODEL_WEIGHTS)
    weights = np.array([MODEL_WEIGHTS[m] for m in models])
    model = models[rng.choice(len(models), p=weights / weights.sum())]
    cap = CAPS[model][rng.integers(len(CAPS[model]))]
    multi_turn = bool(rng.random() < MULTI_TURN_P)
    jitter = rng.uniform(*LENGTH_JITTER)
    return recipe_profile(recipe(model, int(cap), multi_turn, jitter))
