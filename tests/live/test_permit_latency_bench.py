"""benchmarks/permit_latency.py, in-process variant with tiny numbers: structure and sane percentiles."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "permit_latency.py"


def _bench():
    spec = importlib.util.spec_from_file_location("permit_latency_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_inprocess_permit_latency_report():
    report = _bench().run_inprocess(permits=40, jobs=6, seconds=0.5)
    rows = {r["scenario"]: r for r in report["rows"]}
    assert set(rows) == {"lone", "loaded", "loaded-probe"}
    assert all(r["variant"] == "in-process" for r in rows.values())
    assert rows["lone"]["permits"] == 40
    for r in rows.values():
        assert r["permits"] > 0
        assert 0 < r["p50_ms"] <= r["p99_ms"]
        assert r["mean_ms"] > 0 and r["permits_per_s"] > 0
        assert 0 < r["reply_p50_ms"] <= r["reply_p99_ms"]
    info = report["loaded_groups"]["in-process"]
    assert info["probe_alone"] is True
    assert sum(int(size) * n for size, n in info["group_sizes"].items()) == 6
