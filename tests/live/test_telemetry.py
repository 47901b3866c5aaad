"""rollmux.live.telemetry: every metric's name, labels and values, read back from the exposition text."""

from __future__ import annotations

import logging
import re

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

import rollmux
from rollmux.live import telemetry as tm
from rollmux.live.telemetry import REFUSAL_REASONS, Telemetry

SNAPSHOT = {"jobs_by_state": {"queued": 1, "running": 3, "done": 5, "failed": 1},  # "moving" absent: emitted as 0
            "groups": 2,
            "pool_gpus": {"rollout": {"busy": 16, "idle": 8}, "train": {"busy": 8, "idle": 0}},
            "cost_per_hour": {"rollout": 24.0, "train": 45.6},
            "slowdown": {"job-a": 1.12, "job-b": 0.98},
            "rollout_nodes_compacted": 3}

# Every family the exposition may hold, with the label names its samples carry (histogram
# buckets add "le"). The parser names counters without their _total suffix.
DOCUMENTED = {"rollmux_build_info": {"version", "python"},
              "rollmux_admissions": {"case"},
              "rollmux_isolated_placements": {"reason"},
              "rollmux_refused_requests": {"reason"},
              "rollmux_permit_wait_seconds": set(),
              "rollmux_phase_duration_seconds": {"phase"},
              "rollmux_context_switch_seconds": {"kind"},
              "rollmux_journal_records": set(),
              "rollmux_state_snapshot_errors": set(),
              "rollmux_jobs": {"state"},
              "rollmux_groups": set(),
              "rollmux_pool_gpus": {"pool", "state"},
              "rollmux_cost_per_hour": {"pool"},
              "rollmux_job_iteration_slowdown": {"job"},
              "rollmux_host_memory_bytes": {"pool", "source"},
              "rollmux_jobs_over_memory_declaration": set(),
              "rollmux_rollout_nodes_compacted": set()}


class Source:
    """A snapshot callback the test can change (or make raise) between scrapes; counts its calls."""

    def __init__(self, snap: dict | None = None) -> None:
        self.snap = dict(SNAPSHOT if snap is None else snap)
        self.calls = 0
        self.error: Exception | None = None

    def __call__(self) -> dict:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.snap


def families(t: Telemetry) -> dict:
    """Parse the exposition into {family name: family}, the _created companions dropped."""
    body, content_type = t.exposition()
    assert content_type.startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(body.decode())
            if not f.name.endswith("_created")}


def values(fam, sample_name: str | None = None) -> dict[tuple, float]:
    """{sorted label items: value} for the family's samples named `sample_name` (default: the family's)."""
    name = sample_name or fam.name
    return {tuple(sorted(s.labels.items())): s.value for s in fam.samples if s.name == name}


def test_state_series_come_from_one_snapshot_per_scrape():
    src = Source()
    fams = families(Telemetry(src))
    assert src.calls == 1
    assert values(fams["rollmux_jobs"]) == {(("state", s),): v for s, v in
                                            {"queued": 1, "running": 3, "moving": 0, "done": 5, "failed": 1,
                                                                        "cancelled": 0}.items()}
    assert fams["rollmux_groups"].type == "gauge"
    assert values(fams["rollmux_groups"]) == {(): 2.0}
    assert values(fams["rollmux_pool_gpus"]) == {
        (("pool", "rollout"), ("state", "busy")): 16.0, (("pool", "rollout"), ("state", "idle")): 8.0,
        (("pool", "train"), ("state", "busy")): 8.0, (("pool", "train"), ("state", "idle")): 0.0}
    assert values(fams["rollmux_cost_per_hour"]) == {(("pool", "rollout"),): 24.0, (("pool", "train"),): 45.6}
    assert values(fams["rollmux_job_iteration_slowdown"]) == {(("job", "job-a"),): 1.12, (("job", "job-b"),): 0.98}
    assert fams["rollmux_rollout_nodes_compacted"].type == "counter"
    assert values(fams["rollmux_rollout_nodes_compacted"], "rollmux_rollout_nodes_compacted_total") == {(): 3.0}


def test_slowdown_series_vanishes_when_the_job_leaves():
    src = Source()
    t = Telemetry(src)
    assert (("job", "job-a"),) in values(families(t)["rollmux_job_iteration_slowdown"])
    src.snap = {**SNAPSHOT, "slowdown": {"job-b": 1.01}}
    assert values(families(t)["rollmux_job_iteration_slowdown"]) == {(("job", "job-b"),): 1.01}
    src.snap = {**SNAPSHOT, "slowdown": {}}
    fams = families(t)
    assert values(fams["rollmux_job_iteration_slowdown"]) == {}
    assert b"job-a" not in t.exposition()[0]


def test_build_info():
    fams = families(Telemetry(Source(), version="9.9.9"))
    (labels,) = values(fams["rollmux_build_info"])
    assert dict(labels)["version"] == "9.9.9"
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", dict(labels)["python"])
    assert values(fams["rollmux_build_info"])[labels] == 1.0
    default = families(Telemetry(Source()))["rollmux_build_info"]
    assert dict(next(iter(values(default))))["version"] == rollmux.__version__


def test_counters_start_at_zero_for_every_known_label_and_count_events():
    t = Telemetry(Source())
    fams = families(t)
    assert values(fams["rollmux_admissions"], "rollmux_admissions_total") == {
        (("case", c),): 0.0 for c in tm.ADMISSION_CASES}
    assert values(fams["rollmux_refused_requests"], "rollmux_refused_requests_total") == {
        (("reason", r),): 0.0 for r in (*REFUSAL_REASONS, "other")}
    t.admitted("direct_packing")
    t.admitted("direct_packing")
    t.admitted("isolated")
    for reason in REFUSAL_REASONS:
        t.refused(reason)
    t.refused("bad_token")
    t.journal_records()
    t.journal_records(4)
    fams = families(t)
    assert values(fams["rollmux_admissions"], "rollmux_admissions_total") == {
        (("case", "direct_packing"),): 2.0, (("case", "rollout_scaling"),): 0.0, (("case", "isolated"),): 1.0,
        (("case", "colocated"),): 0.0, (("case", "paired"),): 0.0}
    refused = values(fams["rollmux_refused_requests"], "rollmux_refused_requests_total")
    assert refused == {**{(("reason", r),): 1.0 for r in REFUSAL_REASONS},
                       (("reason", "bad_token"),): 2.0, (("reason", "other"),): 0.0}
    assert values(fams["rollmux_journal_records"], "rollmux_journal_records_total") == {(): 5.0}


def test_isolated_placements_count_per_reason_of_the_fixed_set():
    t = Telemetry(Source())
    key = "rollmux_isolated_placements_total"
    assert values(families(t)["rollmux_isolated_placements"], key) == {
        (("reason", r),): 0.0 for r in tm.ISOLATION_REASONS}
    t.isolated("member_slo")
    t.isolated("member_slo")
    t.isolated("no_groups")
    got = values(families(t)["rollmux_isolated_placements"], key)
    assert got[(("reason", "member_slo"),)] == 2.0 and got[(("reason", "no_groups"),)] == 1.0
    assert sum(got.values()) == 3.0
    with pytest.raises(ValueError, match="isolation reason"):
        t.isolated("pruned")


def test_unknown_refusal_reason_counts_as_other_and_its_text_stays_out():
    t = Telemetry(Source())
    secret = "rmx_tok_8f1c2e9a7b"
    t.refused(f"token {secret} not recognised")
    t.refused("teapot")
    refused = values(families(t)["rollmux_refused_requests"], "rollmux_refused_requests_total")
    assert refused[(("reason", "other"),)] == 2.0
    assert {dict(k)["reason"] for k in refused} == {*REFUSAL_REASONS, "other"}
    assert secret.encode() not in t.exposition()[0]


def test_unknown_enum_values_are_refused_not_exported():
    t = Telemetry(Source())
    with pytest.raises(ValueError, match="admission case"):
        t.admitted("node-17")
    with pytest.raises(ValueError, match="phase"):
        t.phase_done("weight_sync", 1.0)
    with pytest.raises(ValueError, match="context switch kind"):
        t.context_switch("lukewarm", 1.0)
    assert b"node-17" not in t.exposition()[0]


def test_histograms():
    t = Telemetry(Source())
    t.permit_wait(0.0005)   # granted at once
    t.permit_wait(42.0)     # waited for a peer's phase
    t.permit_wait(3600.0)   # a stuck group: past the last bucket
    t.phase_done("rollout", 9.5)
    t.phase_done("train", 8.0)
    t.phase_done("train", 700.0)
    t.context_switch("warm", 0.3)
    t.context_switch("cold", 45.0)
    fams = families(t)

    wait = fams["rollmux_permit_wait_seconds"]
    assert wait.type == "histogram"
    buckets = {float(dict(k)["le"]): v for k, v in values(wait, "rollmux_permit_wait_seconds_bucket").items()}
    assert min(buckets) == 0.001 and max(b for b in buckets if b != float("inf")) == 600.0  # 1 ms .. 10 min
    assert buckets[0.001] == 1.0 and buckets[60.0] == 2.0 and buckets[600.0] == 2.0 and buckets[float("inf")] == 3.0
    assert values(wait, "rollmux_permit_wait_seconds_count") == {(): 3.0}
    assert values(wait, "rollmux_permit_wait_seconds_sum")[()] == pytest.approx(3642.0005)

    phase = fams["rollmux_phase_duration_seconds"]
    assert values(phase, "rollmux_phase_duration_seconds_count") == {
        (("phase", "init"),): 0.0, (("phase", "rollout"),): 1.0, (("phase", "train"),): 2.0, (("phase", "sync"),): 0.0}
    assert values(phase, "rollmux_phase_duration_seconds_sum") == {
        (("phase", "init"),): 0.0, (("phase", "rollout"),): 9.5, (("phase", "train"),): 708.0,
        (("phase", "sync"),): 0.0}

    switch = fams["rollmux_context_switch_seconds"]
    assert values(switch, "rollmux_context_switch_seconds_count") == {
        (("kind", "warm"),): 1.0, (("kind", "cold"),): 1.0}
    warm_buckets = {float(dict(k)["le"]): v for k, v in values(switch, "rollmux_context_switch_seconds_bucket").items()
                    if dict(k)["kind"] == "warm"}
    assert warm_buckets[0.25] == 0.0 and warm_buckets[0.5] == 1.0


def test_exposition_holds_only_documented_metrics_and_labels():
    t = Telemetry(Source())
    t.admitted("rollout_scaling")
    t.refused("forbidden")
    t.permit_wait(1.0)
    t.phase_done("rollout", 1.0)
    t.context_switch("cold", 1.0)
    t.journal_records()
    fams = families(t)
    assert set(fams) == set(DOCUMENTED)
    for name, fam in fams.items():
        for sample in fam.samples:
            assert set(sample.labels) - {"le"} == DOCUMENTED[name], (name, sample)
    # The module docstring's table names every metric (counters with their _total suffix).
    table = set(re.findall(r"^\| (rollmux_\w+)", tm.__doc__, re.M))
    exported = {n + "_total" if fams[n].type == "counter" else n for n in fams}
    assert table == exported


def test_a_failing_snapshot_drops_state_series_only_and_is_logged_once(caplog):
    src = Source()
    t = Telemetry(src)
    src.error = RuntimeError("boom")
    with caplog.at_level(logging.INFO, logger="rollmux.telemetry"):
        first, second = families(t), families(t)
    for fams in (first, second):
        assert not {"rollmux_jobs", "rollmux_groups", "rollmux_pool_gpus", "rollmux_cost_per_hour",
                    "rollmux_job_iteration_slowdown"} & set(fams)
        assert "rollmux_build_info" in fams and "rollmux_admissions" in fams
    assert values(second["rollmux_state_snapshot_errors"], "rollmux_state_snapshot_errors_total") == {(): 2.0}
    assert [r.levelno for r in caplog.records] == [logging.ERROR]

    caplog.clear()
    src.error = None
    with caplog.at_level(logging.INFO, logger="rollmux.telemetry"):
        assert values(families(t)["rollmux_groups"]) == {(): 2.0}
    assert [r.levelno for r in caplog.records] == [logging.INFO]


def test_a_malformed_snapshot_yields_no_partial_state():
    src = Source({**SNAPSHOT, "slowdown": {"job-a": "not a number"}})
    fams = families(Telemetry(src))
    assert "rollmux_jobs" not in fams and "rollmux_job_iteration_slowdown" not in fams


def test_two_instances_have_their_own_registries():
    a, b = Telemetry(Source()), Telemetry(Source({**SNAPSHOT, "groups": 7}))
    assert a.registry is not b.registry
    a.admitted("isolated")
    assert values(families(a)["rollmux_admissions"], "rollmux_admissions_total")[(("case", "isolated"),)] == 1.0
    assert values(families(b)["rollmux_admissions"], "rollmux_admissions_total")[(("case", "isolated"),)] == 0.0
    assert values(families(b)["rollmux_groups"]) == {(): 7.0}
    assert REGISTRY.get_sample_value("rollmux_admissions_total", {"case": "isolated"}) is None


def test_a_given_registry_is_used_and_a_second_telemetry_on_it_is_refused():
    registry = CollectorRegistry()
    t = Telemetry(Source(), registry=registry)
    assert t.registry is registry
    assert registry.get_sample_value("rollmux_groups") == 2.0
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Telemetry(Source(), registry=registry)
