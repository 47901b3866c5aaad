"""`rollmux bench sync`: flat vs topology-aware weight sync over a real throttled link.

Builds the two-namespace testbed (testbed.py), starts one launcher per pool inside its namespace
(bench_worker.py), which forks the pool's ranks (N training, M rollout; one process each), and
reads back each rank's timings and digests. A strategy's time is the slowest rank's, all ranks starting at the
same barrier; `identical` holds when every rollout rank ends both syncs with the weights whose
digest the training ranks hold.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from .testbed import Testbed, throttled_pools

_PORT = 29600  # inside a fresh namespace every port is free


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark run: the pools' sizes, the model, the link."""

    train_ranks: int = 4
    rollout_ranks: int = 4
    model_mb: float = 64.0
    link_mbit: float = 400.0
    bucket_mb: float = 4.0
    seed: int = 0
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        for flag, value, limit in (("--train-ranks", self.train_ranks, 64),
                                   ("--rollout-ranks", self.rollout_ranks, 64)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
                raise ValueError(f"{flag}: must be an integer from 1 to {limit} (got {value!r})")
        for flag, value in (("--model-mb", self.model_mb), ("--link-mbit", self.link_mbit),
                            ("--bucket-mb", self.bucket_mb), ("--timeout-s", self.timeout_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                    or value == float("inf"):
                raise ValueError(f"{flag}: must be a positive number (got {value!r})")
        if not 1 / 1024 <= self.model_mb <= 4096:
            raise ValueError(f"--model-mb: must be from 1/1024 (1 KiB) to 4096 MiB (got {self.model_mb!r})")
        if not 1 <= self.link_mbit <= 100_000:
            raise ValueError(f"--link-mbit: must be from 1 to 100000 Mbit/s (got {self.link_mbit!r})")


def _pool_cmd(tb: Testbed, cfg: BenchConfig, side: str) -> list[str]:
    """The command line of one pool's launcher, run inside the pool's namespace."""
    cmd = tb.exec_prefix(side) + [
        sys.executable, "-m", "rollmux.weightsync.bench_worker", "--role", side,
        "--n-train", str(cfg.train_ranks), "--n-rollout", str(cfg.rollout_ranks),
        "--master-addr", tb.address("train"), "--master-port", str(_PORT),
        "--bind-addr", tb.address(side), "--model-bytes", str(int(cfg.model_mb * 2**20)),
        "--seed", str(cfg.seed), "--bucket-mb", str(cfg.bucket_mb), "--timeout-s", str(cfg.timeout_s)]
    if side == "train":
        cmd += ["--link-if", tb.interface("train")]
    return cmd


def _tail(f, lines: int = 3) -> str:
    """The last lines of a worker's captured output, joined on one line."""
    f.seek(0)
    return " | ".join(f.read().decode(errors="replace").strip().splitlines()[-lines:])


def _run_workers(tb: Testbed, cfg: BenchConfig) -> list[dict]:
    """Start both pools' launchers, wait for both; if one fails, stop the other and raise with its stderr."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    sides = ("train", "rollout")
    # Files, not pipes: a rank that writes a lot to stderr must never block on a full pipe.
    outs = [(tempfile.TemporaryFile(), tempfile.TemporaryFile()) for _ in sides]
    procs = []
    try:
        for side, (o, e) in zip(sides, outs):
            procs.append(subprocess.Popen(_pool_cmd(tb, cfg, side), env=env, stdout=o, stderr=e))
        deadline = time.monotonic() + cfg.timeout_s + 120
        while any(p.poll() is None for p in procs):
            failed = [i for i, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                raise RuntimeError("a sync benchmark rank failed: "
                                   + (_tail(outs[failed[0]][1]) if failed else "timed out"))
            time.sleep(0.1)
        failed = [i for i, p in enumerate(procs) if p.returncode != 0]
        if failed:
            raise RuntimeError("a sync benchmark rank failed: " + _tail(outs[failed[0]][1]))
        return [rank for o, _ in outs for rank in json.loads(_tail(o, 1))]
    finally:
        for p in procs:  # only the processes started above, each by its own handle
            if p.poll() is None:
                p.kill()
                p.wait()
        for o, e in outs:
            o.close()
            e.close()


def summarize(cfg: BenchConfig, ranks: list[dict]) -> dict:
    """The benchmark's JSON document from the ranks' reports."""
    doc = {"train_ranks": cfg.train_ranks, "rollout_ranks": cfg.rollout_ranks,
           "model_mb": cfg.model_mb, "link_mbit": cfg.link_mbit}
    for strategy in ("flat", "topology"):
        doc[f"{strategy}_s"] = round(max(r[strategy]["seconds"] for r in ranks), 4)
    doc["speedup"] = round(doc["flat_s"] / doc["topology_s"], 3)
    held = {r[s]["digest"] for r in ranks if r["role"] == "train" for s in ("flat", "topology")}
    got = {r[s]["digest"] for r in ranks if r["role"] == "rollout" for s in ("flat", "topology")}
    doc["identical"] = len(held) == 1 and got == held
    # Evidence the link carried what each strategy says: bytes the training side put on the veth.
    lead = next(r for r in ranks if r["role"] == "train" and r["rank"] == 0)
    doc["model_bytes"] = lead["flat"]["model_bytes"]
    for strategy in ("flat", "topology"):
        doc[f"{strategy}_link_mb"] = round(lead[strategy]["link_tx_bytes"] / 2**20, 2)
        doc[f"{strategy}_cross_mb_per_train_rank"] = [
            round(r[strategy]["cross_sent"] / 2**20, 3)
            for r in sorted(ranks, key=lambda r: r["rank"]) if r["role"] == "train"]
    return doc


def run_sync_bench(cfg: BenchConfig) -> dict:
    """Run the benchmark on a fresh testbed and return its JSON document."""
    if importlib.util.find_spec("torch") is None:
        raise ValueError("bench sync: needs torch (pip install torch; tested with 2.11 and 2.13)")
    with throttled_pools(cfg.link_mbit) as tb:
        return summarize(cfg, _run_workers(tb, cfg))
