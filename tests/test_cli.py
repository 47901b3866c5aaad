"""End-to-end tests of the `rollmux` CLI on small Philly-driven traces."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rollmux.cli import app
from rollmux.core.spec import default_cluster
from rollmux.core.trace_io import load_jobs
from rollmux.sim.baselines import solo_d_cost
from rollmux.workload import find_traces_dir
from factories import job_record

runner = CliRunner()
POLICY_KEYS = {"cost_usd", "cost_per_hour", "slo_attainment", "jobs_finished", "mean_slowdown",
               "max_slowdown", "idle_share", "peak_gpus"}


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    """A 30-job, 3-day paper-profile trace from real Philly arrivals."""
    path = tmp_path_factory.mktemp("trace") / "small.jsonl"
    res = runner.invoke(app, ["workload", "philly", "--vc", "b436b2", "--jobs", "30", "--days", "3",
                              "--mode", "paper", "--seed", "3", "-o", str(path),
                              "--traces", str(find_traces_dir())])
    assert res.exit_code == 0, res.output
    return path


@pytest.fixture(scope="module")
def small_results(small_trace, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "r.json"
    res = runner.invoke(app, ["simulate", "--jobs", str(small_trace), "--policy", "rollmux",
                              "--policy", "solo-d", "--policy", "verl", "--policy", "random",
                              "--policy", "greedy", "--json", str(out)])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


def test_workload_command_writes_valid_trace(small_trace):
    assert len(load_jobs(small_trace).jobs) == 30


def test_simulate_json_has_exactly_the_documented_keys(small_results):
    assert set(small_results) == {"busy_time_bound_usd", "policies"}
    assert set(small_results["policies"]) == {"rollmux", "solo-d", "verl", "random", "greedy"}
    for name, doc in small_results["policies"].items():
        expected = POLICY_KEYS | ({"placements", "decision_ms"} if name != "verl" else set())
        expected |= {"migrations", "compactions"} if name == "rollmux" else set()  # the one that regroups
        # ... and the one that says why it isolated jobs (core/placement/why.py)
        expected |= {"isolated_placements", "placements_why", "refusals_why"} if name == "rollmux" else set()
        assert set(doc) == expected, name
        if "migrations" in doc:
            assert set(doc["migrations"]) == {"count", "stall_hours", "cost_usd"}
            assert doc["migrations"]["count"] >= 0 and doc["migrations"]["cost_usd"] >= 0
        if "decision_ms" in doc:
            assert set(doc["decision_ms"]) <= {"arrival", "departure", "repair"} and "arrival" in doc["decision_ms"]
            assert all(set(p) == {"p50", "p99"} for p in doc["decision_ms"].values())
        assert set(doc["idle_share"]) == {"rollout", "train"}
        if "placements" in doc:
            # RollMux's co-located mode is on in the simulator (sim/simulator.py SimConfig)
            colo = {"colocated"} if name == "rollmux" else set()
            # ... and "paired" is listed where an arrival founded a group with a co-located job.
            assert set(doc["placements"]) - {"paired"} == {"direct_packing", "rollout_scaling", "isolated"} | colo
            assert "paired" not in doc["placements"] or (name == "rollmux" and doc["placements"]["paired"] > 0)
            assert sum(doc["placements"].values()) == pytest.approx(1.0)


def test_simulate_every_policy_finishes_every_job(small_results):
    assert all(p["jobs_finished"] == 30 for p in small_results["policies"].values())


def test_rollmux_meets_every_slo_end_to_end(small_results):
    assert small_results["policies"]["rollmux"]["slo_attainment"] == 1.0


def test_solo_d_matches_closed_form_end_to_end(small_trace, small_results):
    closed = solo_d_cost(load_jobs(small_trace).jobs, default_cluster())
    assert small_results["policies"]["solo-d"]["cost_usd"] == pytest.approx(closed, rel=0.005)


def test_no_policy_beats_the_busy_time_bound(small_results):
    bound = small_results["busy_time_bound_usd"]
    assert all(p["cost_usd"] >= bound for p in small_results["policies"].values())


def test_simulate_prints_the_comparison_table(small_trace):
    res = runner.invoke(app, ["simulate", "--jobs", str(small_trace), "--policy", "rollmux"])
    assert res.exit_code == 0
    assert "rollmux" in res.output and "gain" in res.output


def test_the_table_is_never_cut_to_ellipses_on_a_140_column_console(small_trace):
    # Not a terminal: the console is 140 wide; the co-located share made the placements cell
    # wide enough that every column was cut ("poli…", "cost…") until the text cells wrapped.
    res = runner.invoke(app, ["simulate", "--jobs", str(small_trace), "--policy", "rollmux", "--policy", "solo-d"])
    assert res.exit_code == 0
    header = next(ln for ln in res.output.splitlines() if "policy" in ln)
    assert "cost $" in header and "decide ms" in header and "…" not in res.output


@pytest.mark.parametrize("args, place", [
    (["simulate", "--jobs", "/nonexistent.jsonl"], "/nonexistent.jsonl"),
    (["simulate", "--policy", "fifo"], "--policy"),
    (["simulate", "--order", "edf"], "--order"),
    (["simulate", "--accounting", "x"], "--accounting"),
    (["workload", "philly", "--vc", "nope", "-o", "x.jsonl"], "nope"),
    (["workload", "philly", "--mode", "weird", "-o", "x.jsonl"], "--mode"),
])
def test_bad_input_exits_2_with_one_line_naming_the_place(args, place):
    res = runner.invoke(app, args)
    assert res.exit_code == 2
    assert "Traceback" not in res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and place in lines[0], res.output


ONE_TO_THREE = """pools:
  rollout: {gpu: H20,  gpus_per_node: 8, host_gb_per_node: 2048, price_per_gpu_hour: 1.0, max_nodes: null}
  train:   {gpu: H800, gpus_per_node: 8, host_gb_per_node: 2048, price_per_gpu_hour: 3.0, max_nodes: null}
warm_switch_s: 2.0
cold_switch_s: 135.0
"""


def test_simulate_paper_accounting_charges_solo_d_over_verl_the_price_ratio(tmp_path):
    # One node per pool per job: Solo-D pays (p_r + p_t) per node-hour of stay, veRL p_t.
    cluster, jobs, out = tmp_path / "c.yaml", tmp_path / "j.jsonl", tmp_path / "r.json"
    cluster.write_text(ONE_TO_THREE)
    jobs.write_text("".join(json.dumps(job_record(f"j{i}", arrival_s=600.0 * i, duration_s=3600.0 + 900.0 * i,
                                                  rollout_gpus=8, train_gpus=8)) + "\n" for i in range(4)))
    args = ["simulate", "--jobs", str(jobs), "--cluster", str(cluster), "--policy", "solo-d", "--policy", "verl"]
    res = runner.invoke(app, [*args, "--accounting", "paper", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    solo, verl = doc["policies"]["solo-d"], doc["policies"]["verl"]
    assert doc["accounting"] == "paper"
    assert solo["cost_usd"] / verl["cost_usd"] == pytest.approx(4.0 / 3.0, rel=1e-9)
    assert 0 < solo["throughput"] <= 1 and solo["iterations_done"] > 0
    assert "paper accounting" in res.output and "throughput" in res.output and "1.33x" in res.output
    work = runner.invoke(app, [*args, "--json", str(out)])
    assert work.exit_code == 0 and "throughput" not in work.output and "paper accounting" not in work.output
    assert "accounting" not in json.loads(out.read_text())


def test_bad_trace_line_is_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"job_id": "a"}\n')
    res = runner.invoke(app, ["simulate", "--jobs", str(bad)])
    assert res.exit_code == 2
    assert f"{bad}:1" in res.output and "field" in res.output


def test_unplaceable_job_is_rejected_not_dropped(tmp_path, small_trace):
    job = json.loads(small_trace.read_text().splitlines()[0])
    job["host_gb"]["train"] = 5000
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps(job) + "\n" + "\n".join(small_trace.read_text().splitlines()[1:5]) + "\n")
    res = runner.invoke(app, ["simulate", "--jobs", str(path), "--policy", "solo-d"])
    assert res.exit_code == 2 and job["job_id"] in res.output and "host_gb.train" in res.output
    res = runner.invoke(app, ["simulate", "--jobs", str(path), "--policy", "solo-d", "--skip-unplaceable"])
    assert res.exit_code == 0 and "rejected" in res.output


def test_optimal_command_writes_the_documented_keys(tmp_path):
    from rollmux.core.trace_io import dump_jobs
    from rollmux.workload import paper_jobs
    trace, out = tmp_path / "set.jsonl", tmp_path / "opt.json"
    dump_jobs(paper_jobs(6, seed=4), trace)
    res = runner.invoke(app, ["optimal", "--jobs", str(trace), "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert set(doc) == {"optimal_cost_per_hour", "rollmux_cost_per_hour", "busy_time_bound_per_hour",
                        "exact", "groups"}
    assert doc["busy_time_bound_per_hour"] <= doc["optimal_cost_per_hour"] <= doc["rollmux_cost_per_hour"]
    assert sorted(j for g in doc["groups"] for j in g) == sorted(f"s{i:04d}" for i in range(6))


def test_bench_placement_writes_p50_and_p99(tmp_path):
    out = tmp_path / "b.json"
    res = runner.invoke(app, ["bench", "placement", "--jobs", "20", "--probes", "5", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert set(doc) == {"jobs", "p50_ms", "p99_ms"} and doc["jobs"] == 20
    assert 0 < doc["p50_ms"] <= doc["p99_ms"]


def test_quick_study_writes_tables_and_plots(tmp_path):
    # One further section (the study's sections have their own tests); --serial: no Ray start-up.
    res = runner.invoke(app, ["study", "--quick", "--serial", "--sections", "drift", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "study.md").read_text()
    assert "offline optimum" in md and "busy-time bound" in md and "beyond the paper" in md
    assert "## Profile drift" in md and "## Priced migrations" not in md
    for png in ("small_sets.png", "group_size.png", "cost_over_time.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_study_refuses_an_unknown_section(tmp_path):
    res = runner.invoke(app, ["study", "--quick", "--serial", "--sections", "drift,nope", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "--sections" in res.output and "'nope'" in res.output


def test_no_compact_and_static_turn_rollout_compaction_off(tmp_path):
    counts = {}
    for flag in ("--compact", "--no-compact", "--static"):
        out = tmp_path / f"{flag}.json"
        res = runner.invoke(app, ["simulate", "--policy", "rollmux", flag, "--json", str(out)])
        assert res.exit_code == 0, res.output
        counts[flag] = json.loads(out.read_text())["policies"]["rollmux"].get("compactions")
    assert counts["--compact"] > 0  # (the key is only there where compaction runs)
    assert counts["--no-compact"] is None and counts["--static"] is None
