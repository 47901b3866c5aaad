"""The co-located model fitted on the paper authors' sixteen measured pairs (DESIGN §6).

The authors timed sixteen job types (model size x response cap) both ways, seconds per
iteration: disaggregated (rollout on H20, training on H800) and co-located (every phase on the
H800s); `rollmux/data/colocated_pairs.json` is their `profile.json`, unchanged. A job that carries
its own measured co-located profile (`JobSpec.colocated`) never reaches this module. For the
others it answers (k_r, k_t), the co-located / disaggregated ratio of each phase:

* a job of a measured type (its `model` names a size and cap the authors timed, e.g.
  `qwen2.5-7b-8k`, single-turn): that type's measured ratios;
* any other job: least squares on the sixteen pairs, log k = b0 + b1 ln(params) + b2 ln(cap) +
  b3 ln(rho), rho = rollout / train seconds (the phase balance), each feature clamped to the
  measured range; a job whose `model` names no size and cap gets the fit on ln(rho) alone.
  Then the floor: never more optimistic (a smaller k) than the measured pairs around the job:
  the types of the nearest measured sizes on either side at their nearest caps on either side
  (or, on ln(rho) alone, the two pairs whose balance brackets the job's).

Leave-one-out error of each fit, and what it means, in docs/decisions/colocation-model.md
(`python -m rollmux.core.colo_fit` prints it). The measurements disagree in sign by job (Qwen3 4B
and 8B roll out ~30% faster co-located, Qwen2.5 3B and 7B up to 2x slower), which no smooth fit
in these features separates: hence the wide rollout error, and the floor.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from importlib import resources

import numpy as np

PAIRS_FILE = "colocated_pairs.json"
# `model` fields that name a size and a response cap: qwen2.5-7b-8k, qwen3-8b-32k, 32B_8k.
_SIZE_CAP = re.compile(r"(?P<size>\d+(?:\.\d+)?)[bB][-_](?P<cap>\d+)k(?:$|-)")


@dataclass(frozen=True)
class Pair:
    """One measured type: size (billions of parameters), cap (k tokens), balance, ln k_r, ln k_t."""

    kind: str
    size: float
    cap: float
    rho: float
    log_kr: float
    log_kt: float


@functools.cache
def pairs() -> tuple[Pair, ...]:
    """The sixteen measured types, from the packaged copy of the authors' profile file."""
    doc = json.loads(resources.files("rollmux.data").joinpath(PAIRS_FILE).read_text())
    out = []
    for kind, d in sorted(doc["disagg"].items()):
        c, (size, cap) = doc["colo"][kind], size_cap(kind)
        out.append(Pair(kind, size, cap, d["generate"] / d["train"],
                        math.log(c["generate"] / d["generate"]), math.log(c["train"] / d["train"])))
    return tuple(out)


@functools.cache
def _by_type() -> dict[tuple[float, float], tuple[float, float]]:
    """(size, cap) -> the measured (k_r, k_t) of that type."""
    return {(p.size, p.cap): (math.exp(p.log_kr), math.exp(p.log_kt)) for p in pairs()}


def size_cap(model: str | None) -> tuple[float, float] | None:
    """(billions of parameters, cap in k tokens) named by a `model` field, or None."""
    m = _SIZE_CAP.search(model or "")
    return None if m is None else (float(m["size"]), float(m["cap"]))


def features(size: float | None, cap: float | None, rho: float) -> np.ndarray:
    """The fit's feature row (size and cap None: the balance-only fit), clamped to the measured range."""
    ps = pairs()
    row = [1.0, math.log(_clamp(rho, [p.rho for p in ps]))]
    if size is not None and cap is not None:
        row += [math.log(_clamp(size, [p.size for p in ps])), math.log(_clamp(cap, [p.cap for p in ps]))]
    return np.array(row)


def _clamp(x: float, seen: list[float]) -> float:
    return min(max(x, min(seen)), max(seen))


def fit(rows: tuple[Pair, ...], full: bool) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares coefficients of (ln k_r, ln k_t) over `rows` (full: size, cap and balance)."""
    x = np.array([features(p.size if full else None, p.cap if full else None, p.rho) for p in rows])
    y = np.array([[p.log_kr, p.log_kt] for p in rows])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return coef[:, 0], coef[:, 1]


@functools.cache
def _coefficients(full: bool) -> tuple[np.ndarray, np.ndarray]:
    return fit(pairs(), full)


def neighbours(size: float | None, cap: float | None, rho: float, rows: tuple[Pair, ...]) -> list[Pair]:
    """The measured pairs around a job: nearest sizes either side at their nearest caps either
    side, or (size and cap unknown) the two whose balance brackets the job's."""
    if size is None or cap is None:
        return _bracket(rows, lambda p: p.rho, rho)
    near = []
    for s in {p.size for p in _bracket(rows, lambda p: p.size, size)}:
        near += _bracket([p for p in rows if p.size == s], lambda p: p.cap, cap)
    return near


def _bracket(rows, key, x: float) -> list[Pair]:
    below = [p for p in rows if key(p) <= x]
    above = [p for p in rows if key(p) >= x]
    lo = max(below, key=key) if below else min(rows, key=key)
    hi = min(above, key=key) if above else max(rows, key=key)
    return [p for p in rows if key(p) in (key(lo), key(hi))]


def predict(size: float | None, cap: float | None, rho: float,
            rows: tuple[Pair, ...] | None = None) -> tuple[float, float]:
    """(k_r, k_t) for a job of that size, cap and balance, by the fit on `rows` (default all
    sixteen) floored at the measured pairs around it."""
    full = size is not None and cap is not None
    coef = _coefficients(full) if rows is None else fit(rows, full)
    rows = pairs() if rows is None else rows
    x = features(size, cap, rho)
    near = neighbours(size, cap, rho, rows)
    return (math.exp(max(float(x @ coef[0]), min(p.log_kr for p in near))),
            math.exp(max(float(x @ coef[1]), min(p.log_kt for p in near))))


def measured_factors(model: str | None) -> tuple[float, float] | None:
    """(k_r, k_t) the authors measured for the type a `model` field names (single-turn: a
    multi-turn `-mt` job waits on its environment too, which no pair timed), or None."""
    named = size_cap(model)
    return None if named is None or model.endswith("-mt") else _by_type().get(named)


@functools.lru_cache(maxsize=4096)
def modelled_factors(model: str | None, rho: float) -> tuple[float, float]:
    """(k_r, k_t) of a job without its own co-located profile: its type's measured ratios, else
    the floored fit (module docstring)."""
    measured = measured_factors(model)
    if measured is not None:
        return measured
    size, cap = size_cap(model) or (None, None)
    return predict(size, cap, rho)


def leave_one_out(full: bool) -> list[tuple[str, float, float]]:
    """(type, relative error of k_r, of k_t) predicting each measured type from the other fifteen."""
    out = []
    for i, p in enumerate(pairs()):
        rest = pairs()[:i] + pairs()[i + 1:]
        kr, kt = predict(p.size if full else None, p.cap if full else None, p.rho, rest)
        out.append((p.kind, kr / math.exp(p.log_kr) - 1.0, kt / math.exp(p.log_kt) - 1.0))
    return out


def main() -> None:
    """Print each fit's leave-one-out errors (the table in docs/decisions/colocation-model.md)."""
    for full, name in ((True, "size, cap and balance"), (False, "balance alone")):
        rows = leave_one_out(full)
        print(f"fit on {name}: type, k_r error, k_t error (predicted from the other fifteen, floored)")
        for kind, er, et in rows:
            print(f"  {kind:8s} {er:+7.1%} {et:+7.1%}")
        for i, phase in ((1, "k_r"), (2, "k_t")):
            errs = [abs(r[i]) for r in rows]
            print(f"  {phase}: mean |error| {sum(errs) / len(errs):.1%}, max {max(errs):.1%}, "
                  f"optimistic (k too small) in {sum(r[i] < -1e-9 for r in rows)} of {len(rows)}")


if __name__ == "__main__":
    main()
