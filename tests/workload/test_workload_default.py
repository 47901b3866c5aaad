"""The embedded default trace: shipped, valid, and reproducible from the Philly trace."""

from __future__ import annotations

from rollmux.core.spec import default_cluster
from rollmux.core.trace_io import load_jobs
from rollmux.workload.philly import DAY
from rollmux.workload.regenerate_default import DEFAULT_PATH, main


def test_shipped_default_trace_is_200_valid_placeable_jobs_over_two_weeks():
    trace = load_jobs()
    assert len(trace.jobs) == 200 and not trace.warnings
    cluster = default_cluster()
    assert all(cluster.job_unplaceable_reason(j) is None for j in trace.jobs)
    assert all(0 <= j.arrival_s < 14 * DAY for j in trace.jobs)


def test_regenerating_default_trace_is_byte_identical(tmp_path):
    out = tmp_path / "default.jsonl"
    assert main(["--out", str(out)]) == 0
    assert out.read_bytes() == DEFAULT_PATH.read_bytes()
