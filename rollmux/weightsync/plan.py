"""Who sends which bytes of a bucket to whom, for each strategy (DESIGN §8). Pure integers.

Sync ranks number the training ranks 0..N-1 and the rollout ranks N..N+M-1. Every transfer
from a training rank to a rollout rank crosses the inter-pool link; the rollout ranks' all-gather
stays on their own fast network.

- *flat*: rollout rank j receives the whole bucket from training rank j mod N, so M copies cross.
- *topology*: the bucket is cut into N shards of ceil(L/N) bytes (training rank i owns
  [iS, (i+1)S), the last ones shorter) and into M all-gather chunks of C = ceil(L/M) bytes (rollout
  rank j owns [jC, (j+1)C), the last one padded). Training rank i sends each rollout rank the part of
  its shard inside that rank's chunk: one copy crosses in all, 1/N of it from each training rank
  (up to N bytes per bucket), and when N == M each shard goes whole to its matching rollout rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Strategy = Literal["flat", "topology"]
STRATEGIES: tuple[Strategy, ...] = ("flat", "topology")


@dataclass(frozen=True)
class Transfer:
    """Bytes [start, stop) of a bucket, from sync rank `src` (training) to `dst` (rollout)."""

    src: int
    dst: int
    start: int
    stop: int

    @property
    def nbytes(self) -> int:
        """Length of the transfer."""
        return self.stop - self.start


@dataclass(frozen=True)
class BucketPlan:
    """The transfers of one bucket of `length` bytes, and the all-gather chunk (0: no all-gather)."""

    length: int
    transfers: tuple[Transfer, ...]
    chunk: int

    def sent_by(self, rank: int) -> tuple[Transfer, ...]:
        """The transfers sync rank `rank` sends."""
        return tuple(t for t in self.transfers if t.src == rank)

    def received_by(self, rank: int) -> tuple[Transfer, ...]:
        """The transfers sync rank `rank` receives."""
        return tuple(t for t in self.transfers if t.dst == rank)


def check_strategy(strategy: str) -> Strategy:
    """The strategy name, or ValueError naming the choices."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy: must be one of {', '.join(STRATEGIES)} (got {strategy!r})")
    return strategy  # type: ignore[return-value]


def shard_bounds(length: int, parts: int, i: int) -> tuple[int, int]:
    """Part i of `length` bytes cut into parts of ceil(length/parts) bytes (the last ones shorter).

    The same grid as the all-gather chunks, so with N == M shard i is exactly chunk i.
    """
    size = -(-length // parts)
    return min(length, i * size), min(length, (i + 1) * size)


def flat_plan(length: int, n_train: int, n_rollout: int) -> BucketPlan:
    """Every rollout rank gets the whole bucket from training rank j mod N."""
    return BucketPlan(length, tuple(Transfer(j % n_train, n_train + j, 0, length)
                                    for j in range(n_rollout)), chunk=0)


def topology_plan(length: int, n_train: int, n_rollout: int) -> BucketPlan:
    """Scatter 1/N shards across the link into the rollout ranks' all-gather chunks."""
    chunk = -(-length // n_rollout)
    transfers = []
    for i in range(n_train):
        lo_i, hi_i = shard_bounds(length, n_train, i)
        for j in range(n_rollout):
            lo, hi = max(lo_i, j * chunk), min(hi_i, (j + 1) * chunk)  # shard i within chunk j
            if lo < hi:
                transfers.append(Transfer(i, n_train + j, lo, hi))
    return BucketPlan(length, tuple(transfers), chunk=chunk if n_rollout > 1 else 0)


def plan(strategy: Strategy, length: int, n_train: int, n_rollout: int) -> BucketPlan:
    """The plan of one bucket under a strategy."""
    if check_strategy(strategy) == "flat":
        return flat_plan(length, n_train, n_rollout)
    return topology_plan(length, n_train, n_rollout)


def buckets(total: int, bucket_bytes: int) -> list[tuple[int, int]]:
    """[start, stop) windows of at most `bucket_bytes` covering a stream of `total` bytes."""
    return [(s, min(s + bucket_bytes, total)) for s in range(0, total, bucket_bytes)]
