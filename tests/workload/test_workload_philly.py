"""Philly mapping: arrivals, lifetimes, determinism and input errors of synthesize_philly."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rollmux
from rollmux.core.spec import default_cluster
from rollmux.errors import InputError
from rollmux.workload import available_vcs, find_traces_dir, synthesize_philly
from rollmux.workload.jobs import MIN_ITERATIONS
from rollmux.workload.philly import DAY, MAX_LIFETIME_S, MIN_LIFETIME_S, load_arrivals, sample_lifetimes

TRACES = find_traces_dir()


def dumps(jobs):
    return [j.model_dump() for j in jobs]


def test_same_seed_gives_identical_jobs():
    a = synthesize_philly(TRACES, "0e4a51", 50, 14, "catalog", seed=7)
    b = synthesize_philly(TRACES, "0e4a51", 50, 14, "catalog", seed=7)
    assert dumps(a) == dumps(b)


def test_different_seed_gives_different_jobs():
    a = synthesize_philly(TRACES, "0e4a51", 50, 14, "catalog", seed=7)
    b = synthesize_philly(TRACES, "0e4a51", 50, 14, "catalog", seed=8)
    assert dumps(a) != dumps(b)


def test_arrivals_and_lifetimes_do_not_depend_on_mode():
    a = synthesize_philly(TRACES, "0e4a51", 40, 14, "catalog", seed=3)
    b = synthesize_philly(TRACES, "0e4a51", 40, 14, "paper", seed=3)
    assert [j.arrival_s for j in a] == [j.arrival_s for j in b]


def test_job_count_and_ids():
    jobs = synthesize_philly(TRACES, "0e4a51", 123, 14, "catalog", seed=0)
    assert len(jobs) == 123
    assert [j.job_id for j in jobs] == [f"p{i:04d}" for i in range(123)]


def test_arrivals_are_real_trace_times_inside_window_and_sorted():
    times, _ = load_arrivals(TRACES, "0e4a51")
    jobs = synthesize_philly(TRACES, "0e4a51", 100, 14, "catalog", seed=1)
    arrivals = [j.arrival_s for j in jobs]
    assert arrivals == sorted(arrivals)
    assert all(0 <= t < 14 * DAY for t in arrivals)
    assert set(arrivals) <= set(times.tolist())


def test_too_few_arrivals_are_rescaled_into_window():
    times, _ = load_arrivals(TRACES, "11cb48")  # only 2 arrivals in its first 14 days
    assert (times < 14 * DAY).sum() < 50
    arrivals = np.array([j.arrival_s for j in synthesize_philly(TRACES, "11cb48", 50, 14, "paper", 0)])
    assert arrivals[0] == 0 and arrivals[-1] < 14 * DAY
    assert np.all(np.diff(arrivals) >= 0)
    # Linear rescaling keeps the trace's relative spacing.
    k = arrivals[-1] / times[49]
    np.testing.assert_allclose(arrivals, times[:50] * k, atol=0.1)


def test_lifetimes_within_clip_bounds_and_cover_min_iterations():
    jobs = synthesize_philly(TRACES, "b436b2", 190, 14, "catalog", seed=2)
    for j in jobs:
        assert MIN_LIFETIME_S <= j.duration_s <= MAX_LIFETIME_S
        assert j.iterations >= MIN_ITERATIONS


def test_lifetimes_sampled_from_rows_with_same_gpu_count():
    durations = np.array([4000.0, 4000.0, 9000.0, 9000.0])
    dur_gpus = np.array([1, 1, 8, 8])
    out = sample_lifetimes(np.array([1, 8, 16, 2]), durations, dur_gpus, np.random.default_rng(0))
    # 16 GPUs falls back to the largest sampled size below it (8), 2 GPUs to 1.
    assert out.tolist() == [4000.0, 9000.0, 9000.0, 4000.0]


def test_lifetimes_clipped_to_one_hour_and_seven_days():
    out = sample_lifetimes(np.array([1, 1]), np.array([10.0, 1e8]), np.array([1, 1]),
                           np.random.default_rng(0))
    assert set(out.tolist()) <= {MIN_LIFETIME_S, MAX_LIFETIME_S}


@pytest.mark.parametrize("mode", ["catalog", "paper"])
def test_every_job_validates_and_is_placeable_on_default_cluster(mode):
    cluster = default_cluster()
    for j in synthesize_philly(TRACES, "0e4a51", 200, 14, mode, seed=4):
        assert cluster.job_unplaceable_reason(j) is None


def test_unknown_vc_names_the_vc_and_lists_available():
    with pytest.raises(InputError) as err:
        synthesize_philly(TRACES, "nope", 10, 14, "catalog", 0)
    assert err.value.place == "vc"
    assert all(vc in err.value.reason for vc in available_vcs(TRACES))


def _copy_traces(tmp_path: Path) -> Path:
    dst = tmp_path / "traces"
    shutil.copytree(TRACES, dst)
    return dst


def test_malformed_arrivals_row_names_file_and_line(tmp_path):
    traces = _copy_traces(tmp_path)
    path = traces / "philly" / "arrivals" / "0e4a51.csv"
    lines = path.read_text().splitlines()
    lines[4] = "12x,1"  # line 5 of the file
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as err:
        synthesize_philly(traces, "0e4a51", 10, 14, "catalog", 0)
    assert err.value.place == f"{path}:5"


def test_malformed_durations_row_names_file_and_line(tmp_path):
    traces = _copy_traces(tmp_path)
    path = traces / "philly" / "job_durations.csv"
    with open(path, "a") as fh:
        fh.write("100,1,extra\n")
    n_lines = len(path.read_text().splitlines())
    with pytest.raises(InputError) as err:
        synthesize_philly(traces, "0e4a51", 10, 14, "catalog", 0)
    assert err.value.place == f"{path}:{n_lines}"


def test_missing_traces_dir_is_an_input_error(tmp_path):
    with pytest.raises(InputError) as err:
        synthesize_philly(tmp_path / "absent", "0e4a51", 10, 14, "catalog", 0)
    assert "absent" in err.value.place


@pytest.mark.parametrize("kwargs, place", [
    (dict(n_jobs=0), "n_jobs"),
    (dict(days=0), "days"),
    (dict(days=-1.5), "days"),
    (dict(mode="oracle"), "mode"),
    (dict(seed=-1), "seed"),
    (dict(profile="decode-heavy"), "profile"),
    (dict(size="huge"), "size"),
    (dict(slo=0.5), "slo"),
])
def test_bad_arguments_name_the_argument(kwargs, place):
    args = dict(traces_dir=TRACES, vc="0e4a51", n_jobs=10, days=14, mode="catalog", seed=0)
    with pytest.raises(InputError) as err:
        synthesize_philly(**{**args, **kwargs})
    assert err.value.place == place


def test_find_traces_dir_prefers_explicit_then_env(tmp_path, monkeypatch):
    (tmp_path / "copy").symlink_to(TRACES.resolve())
    monkeypatch.setenv("ROLLMUX_TRACES", str(tmp_path / "copy"))
    assert find_traces_dir() == tmp_path / "copy"
    with pytest.raises(InputError):
        find_traces_dir(tmp_path)


def test_find_traces_dir_defaults_to_the_traces_in_the_package(tmp_path, monkeypatch):
    monkeypatch.delenv("ROLLMUX_TRACES", raising=False)
    (tmp_path / "shared").mkdir()  # a sibling shared/traces, as a checkout once had, is not looked for
    (tmp_path / "shared" / "traces").symlink_to(TRACES.resolve())
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")
    found = find_traces_dir()
    assert found == Path(rollmux.__file__).parent / "data"
    assert len(available_vcs(found)) == 7 and (found / "paper" / "wild.trace").is_file()
    for folder in ("philly", "paper"):  # each with its attribution
        assert "license" in (found / folder / "README.md").read_text().lower()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n_jobs=st.integers(1, 250),
       days=st.floats(0.25, 60), vc=st.sampled_from(available_vcs(TRACES)),
       mode=st.sampled_from(["paper", "catalog"]))
def test_any_inputs_give_valid_sorted_jobs_inside_window(seed, n_jobs, days, vc, mode):
    jobs = synthesize_philly(TRACES, vc, n_jobs, days, mode, seed)
    assert len(jobs) == n_jobs
    arrivals = [j.arrival_s for j in jobs]
    assert arrivals == sorted(arrivals)
    assert all(0 <= t < days * DAY for t in arrivals)
    assert all(j.rollout_s.max >= j.rollout_s.median and j.iterations >= MIN_ITERATIONS
               for j in jobs)
