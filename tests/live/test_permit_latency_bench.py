"""benchmarks/permit_latency.py with tiny numbers, server in this process: structure and sane percentiles."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "permit_latency.py"
ROW_KEYS = {"store", "scenario", "call", "n", "p50_ms", "p99_ms", "mean_ms", "per_s", "target", "met"}


def _bench():
    spec = importlib.util.spec_from_file_location("permit_latency_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


def test_permit_latency_report_in_process():
    report = _bench().run(stores=("sqlite", "memory"), server="thread", permits=30, jobs=10, seconds=0.5,
                          waiting_jobs=12, probe_s=0.5)
    rows = {(r["store"], r["scenario"], r["call"]): r for r in report["rows"]}
    calls = {("lone", "acquire"), ("lone", "release"), ("lone", "acquire (lean client)"),
             ("lone", "release (lean client)"), ("loaded", "acquire (incl. turn wait)"),
             ("waiting", "heartbeat"), ("waiting", "GET /v1/status")}
    assert set(rows) == {(store, *c) for store in ("sqlite", "memory") for c in calls}
    for r in rows.values():
        assert ROW_KEYS <= set(r)
        assert r["n"] > 0
        assert 0 < r["p50_ms"] <= r["p99_ms"]
        assert r["mean_ms"] > 0
    for store in ("sqlite", "memory"):
        assert rows[(store, "lone", "acquire")]["n"] == 30
        assert rows[(store, "lone", "acquire")]["per_s"] > 0
        assert rows[(store, "loaded", "acquire (incl. turn wait)")]["per_s"] > 0
        assert rows[(store, "lone", "acquire")]["target"] == "p50 <= 3 ms"
        assert rows[(store, "waiting", "GET /v1/status")]["target"] == "p99 < 200 ms"
        assert isinstance(rows[(store, "waiting", "heartbeat")]["met"], bool)
        info = report["setup"][store]
        assert info["loaded_group_sizes"] == {"5": 2}  # tiny SLO-5 jobs pack 5 to a group
        # Every long poll stayed open through the probes, none was granted or failed.
        assert info["waiters"] == 12 and info["holders"] == 3
        assert info["outstanding_at_start"] == info["outstanding_at_end"] == 12
        assert info["waiting_at_server_start"] == info["waiting_at_server_end"] == 12
        assert info["waiters_granted"] == info["waiter_errors"] == info["probe_errors"] == 0
    assert rows[("sqlite", "loaded", "acquire (incl. turn wait)")]["target"] == "permits/s >= 1000"
    assert rows[("memory", "loaded", "acquire (incl. turn wait)")]["target"] is None
    assert report["config"]["server"] == "thread"
