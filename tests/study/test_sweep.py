"""The study's sweeps on Ray: the same results as the serial map, in order, and failures named."""
from __future__ import annotations

import json
import socket

import pytest
import ray

from rollmux.core.spec import default_cluster
from rollmux.errors import InputError
from rollmux.sim.runner import run_policy
from rollmux.study import sweep
from rollmux.study.config import StudyConfig
from rollmux.study.experiments import philly_policy_run, philly_runs
from rollmux.study.sweep import RayMap, SweepTaskError, number_list, ray_session, serial_map
from rollmux.workload import find_traces_dir, paper_jobs

CLUSTER = default_cluster()


def outcome(res) -> dict:
    """A result's JSON without the scheduler's own decision latencies (wall-clock, so never equal)."""
    doc = res.to_json()
    doc.pop("decision_ms", None)
    return doc


@pytest.fixture(scope="module")
def ray_map():
    """A private local Ray with 2 CPUs (ray.init(address="local", num_cpus=2)), shut down after."""
    with ray_session(workers=2) as pmap:
        yield pmap
    assert not ray.is_initialized()


def test_ray_map_needs_a_connected_ray():
    if ray.is_initialized():  # this module's Ray starts with the test after this one
        pytest.skip("a Ray session from elsewhere is up")
    with pytest.raises(RuntimeError, match="ray_session"):
        RayMap()(run_policy, [])


def small_runs() -> list[tuple]:
    """A few small independent simulations (`philly_policy_run` tasks: the shipped profile):
    different policies, traces and seeds."""
    runs = []
    for seed, profile in ((1, "balanced"), (2, "rollout-heavy"), (3, "train-heavy")):
        jobs = paper_jobs(4, profile=profile, seed=seed)
        runs += [(name, jobs, CLUSTER, seed) for name in ("rollmux", "solo-d", "random")]
    return runs


def test_ray_map_returns_what_serial_map_returns_in_order(ray_map):
    runs = small_runs()
    reported: dict[int, dict] = {}
    on_ray = ray_map(philly_policy_run, runs, lambda i, res: reported.setdefault(i, outcome(res)))
    serial = serial_map(philly_policy_run, runs)
    assert [outcome(r) for r in on_ray] == [outcome(r) for r in serial]
    assert [r.policy for r in on_ray] == [a[0] for a in runs]
    assert reported == {i: outcome(r) for i, r in enumerate(serial)}  # every task reported once, as it finished


def test_a_study_section_through_ray_matches_the_serial_run(ray_map):
    sc = StudyConfig(philly_jobs=8, philly_days=1.0)
    traces = find_traces_dir()
    on_ray = philly_runs("paper", sc, CLUSTER, traces, pmap=ray_map)
    serial = philly_runs("paper", sc, CLUSTER, traces)
    assert on_ray["bound"] == serial["bound"] and on_ray["jobs"] == serial["jobs"] == 8
    for part in ("policies", "variants"):
        assert list(on_ray[part]) == list(serial[part])
        assert {k: outcome(r) for k, r in on_ray[part].items()} == {k: outcome(r) for k, r in serial[part].items()}


def test_a_task_that_raises_is_named(ray_map):
    jobs = paper_jobs(3, seed=4)
    runs = [("rollmux", jobs, CLUSTER, 4), ("no-such-policy", jobs, CLUSTER, 4)]
    with pytest.raises(SweepTaskError) as info:
        ray_map(philly_policy_run, runs)
    msg = str(info.value)
    assert msg.startswith("task 2/2 rollmux.study.experiments.philly_policy_run('no-such-policy', [3 JobSpec], "), msg
    assert "failed: InputError: --policy: unknown policy 'no-such-policy'" in msg, msg
    assert ray_map(philly_policy_run, runs[:1])[0].policy == "rollmux"  # the map still works after a failure


def test_an_error_that_comes_back_whole_is_the_cause(ray_map):
    with pytest.raises(SweepTaskError, match=r"^task 3/3 json\.loads\('\{'\) failed: JSONDecodeError: ") as info:
        ray_map(json.loads, [("1",), ("[2]",), ("{",)])
    assert isinstance(info.value.cause, json.JSONDecodeError)


def test_serial_map_reports_each_task_in_order():
    seen = []
    assert serial_map(divmod, [(7, 2), (9, 4)], lambda i, r: seen.append((i, r))) == [(3, 1), (2, 1)]
    assert seen == [(0, (3, 1)), (1, (2, 1))]


class FakeRay:
    """Records ray.init / ray.shutdown calls instead of starting anything."""

    def __init__(self, fail: Exception | None = None):
        self.inits: list[dict] = []
        self.shutdowns = 0
        self.fail = fail

    def init(self, **kwargs):
        self.inits.append(kwargs)
        if self.fail is not None:
            raise self.fail

    def shutdown(self):
        self.shutdowns += 1


def test_ray_session_starts_a_private_local_ray_unless_given_an_address(monkeypatch):
    fake = FakeRay()
    monkeypatch.setattr(sweep, "check_reachable", lambda address: None)
    monkeypatch.setattr(ray, "init", fake.init)
    monkeypatch.setattr(ray, "shutdown", fake.shutdown)
    monkeypatch.setenv("RAY_ADDRESS", "10.9.8.7:6379")  # a running cluster must not be picked up
    with ray_session(workers=3) as pmap:
        assert pmap.max_in_flight == 3
    assert fake.inits[0]["address"] == "local" and fake.inits[0]["num_cpus"] == 3
    assert fake.shutdowns == 1
    with pytest.raises(KeyError):
        with ray_session("10.1.2.3:6379"):
            raise KeyError("boom")
    assert fake.inits[1]["address"] == "10.1.2.3:6379" and "num_cpus" not in fake.inits[1]
    assert fake.inits[1]["runtime_env"]["py_modules"][0].__name__ == "rollmux"  # this checkout's code runs there
    assert fake.shutdowns == 2


def test_an_unreachable_cluster_is_an_input_error(monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(InputError, match=f"--address: cannot reach the Ray cluster at '127.0.0.1:{port}'"):
        with ray_session(f"127.0.0.1:{port}"):
            pass
    fake = FakeRay(fail=ConnectionError("no GCS at 10.1.2.3:6379"))
    monkeypatch.setattr(sweep, "check_reachable", lambda address: None)
    monkeypatch.setattr(ray, "init", fake.init)
    monkeypatch.setattr(ray, "shutdown", fake.shutdown)
    with pytest.raises(InputError, match="--address: cannot connect to the Ray cluster at '10.1.2.3:6379'"):
        with sweep.ray_session("10.1.2.3:6379"):
            pass


def test_a_benchmarks_traces_spec_parses_or_names_the_option():
    import pytest

    from rollmux.errors import InputError
    from rollmux.study.sweep import parse_traces_spec
    assert parse_traces_spec("2869ce:11,0e4a51:0") == [("2869ce", 11), ("0e4a51", 0)]
    for bad in ("2869ce", "2869ce:x", ":3", "2869ce:-1"):
        with pytest.raises(InputError, match="--traces-spec"):
            parse_traces_spec(bad)


def test_sweep_map_runs_in_this_process_when_asked():
    import argparse

    from rollmux.study.sweep import add_sweep_options, serial_map, sweep_map
    ap = argparse.ArgumentParser()
    add_sweep_options(ap, "0e4a51:0")
    args = ap.parse_args(["--serial"])
    assert args.traces_spec == "0e4a51:0" and args.modes == "paper,catalog"
    with sweep_map(args) as pmap:
        assert pmap is serial_map and pmap(abs, [(-2,), (3,)]) == [2, 3]


def test_sweep_rows_synthesize_each_trace_and_mode_or_exit_with_the_error(tmp_path):
    import argparse

    from rollmux.study.sweep import add_sweep_options, sweep_rows
    ap = argparse.ArgumentParser()
    add_sweep_options(ap, "0e4a51:0,103959:21")
    rows = sweep_rows(ap.parse_args(["--modes", "paper"]))
    assert [(vc, mode, seed, len(jobs)) for vc, mode, seed, jobs in rows] == [
        ("0e4a51", "paper", 0, 200), ("103959", "paper", 21, 200)]
    for argv, where in ((["--traces-spec", "0e4a51"], "--traces-spec"), (["--traces", str(tmp_path)], str(tmp_path))):
        with pytest.raises(SystemExit) as exit_:
            sweep_rows(ap.parse_args(argv))
        assert str(exit_.value.code).startswith("error: ") and where in str(exit_.value.code)


def test_number_list_reads_comma_separated_numbers_or_exits_naming_the_option(capsys):
    assert number_list("0.8,1", "--margins", "0.8,1.0") == [0.8, 1.0]
    assert number_list("0,1800", "--every", "600", inclusive=True) == [0.0, 1800.0]
    for text, inclusive in (("0", False), ("-1", True), ("x", False), ("nan", True)):
        with pytest.raises(SystemExit) as exc:
            number_list(text, "--opt", "1,2", inclusive=inclusive)
        assert "--opt" in str(exc.value) and repr(text) in str(exc.value)
