"""The paper's production trace as a workload (workload/paper_trace.py, `rollmux workload paper-trace`)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from rollmux.cli import app
from rollmux.core.trace_io import load_jobs
from rollmux.errors import InputError
from rollmux.workload import find_traces_dir
from rollmux.workload.catalog import recipe
from rollmux.workload.paper_trace import MODELS, PROFILE, TRACE, paper_trace_jobs, read_profile, read_trace
from rollmux.workload.perf import rollout_times

PAPER = find_traces_dir() / "paper"


def test_every_job_of_the_trace_runs_its_measured_means_for_its_wall_time():
    jobs = paper_trace_jobs(PAPER)
    measured = read_profile(PAPER / PROFILE)
    trace = {t.job_id: t for t in read_trace(PAPER / TRACE)}
    assert len(jobs) == len(trace) == 200 and jobs[0].arrival_s == 0.0
    for j in jobs:
        t = trace[j.job_id]
        rollout, train = measured[t.kind]
        assert j.mean_rollout_s == pytest.approx(rollout, rel=1e-9)
        assert j.mean_train_s == pytest.approx(train, rel=1e-9)
        assert j.duration_s == (t.departure - t.arrival).total_seconds()


def test_every_job_carries_its_types_measured_colocated_times():
    colo = read_profile(PAPER / PROFILE, "colo")
    kinds = {t.job_id: t.kind for t in read_trace(PAPER / TRACE)}
    for j in paper_trace_jobs(PAPER):
        assert (j.colocated.rollout_s, j.colocated.train_s) == colo[kinds[j.job_id]]


def test_32b_jobs_get_two_nodes_per_pool_and_the_others_one():
    kinds = {t.job_id: t.kind for t in read_trace(PAPER / TRACE)}
    for j in paper_trace_jobs(PAPER):
        gpus = 16 if kinds[j.job_id].startswith("32B_") else 8
        assert (j.rollout_gpus, j.train_gpus) == (gpus, gpus)


def test_slos_are_seeded_draws_inside_the_range():
    a, b = paper_trace_jobs(PAPER, seed=3, slo=(1.2, 1.5)), paper_trace_jobs(PAPER, seed=3, slo=(1.2, 1.5))
    assert [j.slo for j in a] == [j.slo for j in b]
    assert all(1.2 <= j.slo <= 1.5 for j in a)
    assert [j.slo for j in paper_trace_jobs(PAPER, seed=4, slo=(1.2, 1.5))] != [j.slo for j in a]


def test_sigma_sets_every_jobs_spread_and_keeps_the_measured_mean():
    jobs = paper_trace_jobs(PAPER, sigma=0.3)
    measured = read_profile(PAPER / PROFILE)
    kinds = {t.job_id: t.kind for t in read_trace(PAPER / TRACE)}
    assert {j.rollout_s.sigma for j in jobs} == {0.3}
    assert all(j.mean_rollout_s == pytest.approx(measured[kinds[j.job_id]][0]) for j in jobs)


def _folder(tmp_path, lines: list[str], profile: dict | None = None):
    (tmp_path / TRACE).write_text("\n".join(lines) + "\n")
    if profile is None:
        shutil.copy(PAPER / PROFILE, tmp_path / PROFILE)
    else:
        (tmp_path / PROFILE).write_text(json.dumps(profile))
    return tmp_path


@pytest.mark.parametrize("line, says", [
    ("job0, 2025-07-30 15:33, 1, 7B_8k", "YYYY-MM-DD HH:MM:SS"),
    ("job0, 2025-07-30 15:33:33, 2, 7B_8k", r"neither 1 \(arrival\) nor -1"),
    ("job0, 2025-07-30 15:33:33, 1, 9B_8k", "SIZE_CAPk"),
    ("job0, 2025-07-30 15:33:33, 1", "expected 4 fields"),
])
def test_a_bad_event_names_the_file_and_line(tmp_path, line, says):
    folder = _folder(tmp_path, ["job1, 2025-07-30 15:00:00, 1, 7B_8k", line])
    with pytest.raises(InputError, match=says) as err:
        paper_trace_jobs(folder)
    assert err.value.place == f"{folder / TRACE}:2"


def test_a_job_without_a_departure_or_departing_first_is_named(tmp_path):
    folder = _folder(tmp_path, ["job1, 2025-07-30 15:00:00, 1, 7B_8k"])
    with pytest.raises(InputError, match="job1 has no departure event"):
        paper_trace_jobs(folder)
    folder = _folder(tmp_path, ["job1, 2025-07-30 15:00:00, 1, 7B_8k", "job1, 2025-07-30 14:00:00, -1, 7B_8k"])
    with pytest.raises(InputError, match="departs at or before its arrival"):
        paper_trace_jobs(folder)


def test_a_type_without_a_measured_profile_names_the_field(tmp_path):
    lines = ["job1, 2025-07-30 15:00:00, 1, 7B_8k", "job1, 2025-07-30 16:00:00, -1, 7B_8k"]
    folder = _folder(tmp_path, lines, {"disagg": {"8B_8k": {"generate": 100.0, "train": 50.0}}})
    with pytest.raises(InputError, match="no measured profile") as err:
        paper_trace_jobs(folder)
    assert err.value.place.endswith("disagg.7B_8k")
    folder = _folder(tmp_path, lines, {"disagg": {"7B_8k": {"generate": float("nan"), "train": 50.0}}})
    with pytest.raises(InputError, match="not a positive number") as err:
        paper_trace_jobs(folder)
    assert err.value.place.endswith("disagg.7B_8k.generate")


def test_the_command_writes_a_trace_that_loads(tmp_path):
    out = tmp_path / "paper.jsonl"
    res = CliRunner().invoke(app, ["workload", "paper-trace", "--out", str(out), "--seed", "1", "--slo", "1", "1.5"])
    assert res.exit_code == 0, res.output
    jobs = load_jobs(out).jobs
    assert len(jobs) == 200 and all(1.0 <= j.slo <= 1.5 for j in jobs)
    assert [j.slo for j in jobs] == [j.slo for j in paper_trace_jobs(PAPER, seed=1, slo=(1.0, 1.5))]


def test_the_command_refuses_a_negative_seed_in_one_line(tmp_path):
    res = CliRunner().invoke(app, ["workload", "paper-trace", "--out", str(tmp_path / "x.jsonl"), "--seed", "-1"])
    assert res.exit_code == 2 and "seed" in res.output and "Traceback" not in res.output


def test_the_command_refuses_an_inverted_slo_range_in_one_line(tmp_path):
    res = CliRunner().invoke(app, ["workload", "paper-trace", "--out", str(tmp_path / "x.jsonl"), "--slo", "2", "1"])
    assert res.exit_code == 2 and "--slo" in res.output and "Traceback" not in res.output


def test_by_default_every_rollout_takes_its_measured_mean():
    # As the authors' simulator runs the profile: no spread, so admission plans on the measured time.
    for j in paper_trace_jobs(PAPER):
        assert j.rollout_s.sigma == 0.0 and j.rollout_s.max == j.rollout_s.median == j.mean_rollout_s


def test_with_a_spread_the_cap_is_the_modelled_multiple_of_the_median():
    for j in paper_trace_jobs(PAPER, sigma=0.2):
        r = replace(recipe(MODELS[j.model.split("-")[1].upper()], int(j.model.split("-")[2][:-1]) * 1024),
                    rollout_gpus=j.rollout_gpus, train_gpus=j.train_gpus)
        typical, worst = rollout_times(r)
        assert j.rollout_s.max / j.rollout_s.median == pytest.approx(worst / typical)


def test_sync_none_reads_the_measured_iteration_as_the_whole_iteration():
    modelled, none = paper_trace_jobs(PAPER), paper_trace_jobs(PAPER, sync="none")
    assert all(j.sync_s > 0 for j in modelled) and all(j.sync_s == 0.0 for j in none)
    assert [j.solo_iter_s for j in none] == pytest.approx([j.mean_rollout_s + j.mean_train_s for j in modelled])


def test_the_command_refuses_an_unknown_sync_in_one_line(tmp_path):
    res = CliRunner().invoke(app, ["workload", "paper-trace", "--out", str(tmp_path / "x.jsonl"), "--sync", "fast"])
    assert res.exit_code == 2 and "--sync" in res.output and "Traceback" not in res.output
