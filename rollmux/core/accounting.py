"""Cost and utilization accounting: every policy pays for the nodes it holds, per GPU-hour."""

from __future__ import annotations

from dataclasses import dataclass, field

from rollmux.core.spec import ClusterSpec

POOLS = ("rollout", "train")


@dataclass
class Ledger:
    """Integrates held nodes over time (cost, peak) and busy GPU-seconds (idle share)."""

    cluster: ClusterSpec
    nodes: dict[str, int] = field(default_factory=lambda: {p: 0 for p in POOLS})
    peak_nodes: dict[str, int] = field(default_factory=lambda: {p: 0 for p in POOLS})
    node_seconds: dict[str, float] = field(default_factory=lambda: {p: 0.0 for p in POOLS})
    busy_gpu_seconds: dict[str, float] = field(default_factory=lambda: {p: 0.0 for p in POOLS})
    rate_changes: list[tuple[float, float]] = field(default_factory=list)  # (t, $/h from t on)
    _last_t: float = 0.0
    _first_t: float | None = None

    def _advance(self, t: float) -> None:
        if self._first_t is None:
            self._first_t = t
        for p in POOLS:
            self.node_seconds[p] += self.nodes[p] * (t - self._last_t)
        self._last_t = t

    def provision(self, pool: str, count: int, t: float) -> None:
        """Start paying for `count` more nodes of `pool` at time t."""
        self._change(pool, count, t)

    def release(self, pool: str, count: int, t: float) -> None:
        """Stop paying for `count` nodes of `pool` at time t."""
        if count > self.nodes[pool]:
            raise ValueError(f"releasing {count} {pool} nodes but only {self.nodes[pool]} are held")
        self._change(pool, -count, t)

    def _change(self, pool: str, delta: int, t: float) -> None:
        if delta == 0:
            return
        self._advance(t)
        self.nodes[pool] += delta
        self.peak_nodes[pool] = max(self.peak_nodes[pool], self.nodes[pool])
        self.rate_changes.append((t, self.rate_per_hour()))

    def busy(self, pool: str, gpus: float, seconds: float) -> None:
        """Record `gpus` GPUs of `pool` doing work for `seconds`."""
        self.busy_gpu_seconds[pool] += gpus * seconds

    def rate_per_hour(self) -> float:
        """Current provisioning cost rate ($/h)."""
        return sum(self.nodes[p] * self._pool(p).node_price_per_hour for p in POOLS)

    def _pool(self, pool: str):
        return getattr(self.cluster.pools, pool)

    def close(self, t: float) -> None:
        """Account up to time t (call once at the end)."""
        self._advance(t)

    def cost_usd(self) -> float:
        """Total provisioning cost so far."""
        return sum(self.node_seconds[p] / 3600 * self._pool(p).node_price_per_hour for p in POOLS)

    def span_s(self) -> float:
        """Seconds from the first provisioning to the last accounted time."""
        return 0.0 if self._first_t is None else self._last_t - self._first_t

    def idle_share(self, pool: str) -> float:
        """Share of the pool's provisioned GPU-time not doing work (0 if none provisioned)."""
        held = self.node_seconds[pool] * self._pool(pool).gpus_per_node
        return 0.0 if held <= 0 else max(0.0, 1.0 - self.busy_gpu_seconds[pool] / held)

    def peak_gpus(self, pool: str) -> int:
        """Most GPUs of the pool held at once."""
        return self.peak_nodes[pool] * self._pool(pool).gpus_per_node
