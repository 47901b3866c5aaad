"""`rollmux profile`: a job module's own phases, measured through the shim, make a record the
scheduler accepts and places."""

from __future__ import annotations

import json
import math
import sys
from types import SimpleNamespace

import pytest
import yaml
from factories import GrantAtOnce
from typer.testing import CliRunner

from rollmux.cli import app
from rollmux.core.colo_model import colocated_factors
from rollmux.core.spec import JobSpec, default_cluster
from rollmux.harness import profile as profile_mod
from rollmux.harness.profile import Measured, ProfileOptions, job_record, measure, profile
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore

ADMIN = "admin-token-for-profile-tests-0123456789"
runner = CliRunner()

FAKE_JOB = '''
CALLS = []


class Job:
    def __init__(self, fail=None):
        self.fail = fail

    def init(self):
        CALLS.append(("init",))

    def rollout(self, max_length=False):
        CALLS.append(("rollout", max_length))
        return "batch"

    def train(self, batch):
        CALLS.append(("train", batch))
        if self.fail == "train":
            raise RuntimeError("out of memory")

    def sync(self):
        CALLS.append(("sync",))

    def onload(self, pool):
        CALLS.append(("onload", pool))

    def offload(self, pool):
        CALLS.append(("offload", pool))

    def host_bytes(self):
        return {"rollout": 5 * 10**9, "train": 7 * 10**9}


def make_job(preset=None, **options):
    if preset not in (None, "tiny"):
        raise ValueError(f"no preset {preset!r}")
    CALLS.append(("make", preset, options))
    return Job(**options)
'''


@pytest.fixture
def fake_module(tmp_path, monkeypatch):
    """An importable job module `fakejob` exposing the profiler's entry point."""
    (tmp_path / "fakejob.py").write_text(FAKE_JOB)
    (tmp_path / "notajob.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "fakejob"


def test_a_grpo_preset_profile_is_accepted_and_placed_by_a_running_scheduler(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the demo job ships in the package: no source tree needed
    out = tmp_path / "job.yaml"
    res = runner.invoke(app, ["profile", "rollmux.jobs.grpo", "--preset", "small", "--runs", "3",
                              "--job-id", "grpo-small", "--slo", "1.5", "--iterations", "40", "-o", str(out)])
    assert res.exit_code == 0, res.output
    rec = yaml.safe_load(out.read_text())
    job = JobSpec.model_validate(rec)
    assert (job.job_id, job.slo, job.iterations, job.rollout_gpus) == ("grpo-small", 1.5, 40, 8)
    assert 0 < job.rollout_s.median <= job.rollout_s.max and job.train_s > 0 and job.sync_s > 0
    # Host memory: the offloaded host copies, byte for byte. The rollout side holds the policy's
    # tensors; the trainer the policy, Adam's two moments per tensor and its step counters.
    from rollmux.jobs.grpo.job import GRPOJob, make_config
    model = GRPOJob(make_config("small")).model
    tensors = list(model.parameters()) + list(model.buffers())
    policy = sum(t.numel() * t.element_size() for t in tensors)
    params = list(model.parameters())
    assert rec["host_gb"]["rollout"] * 1e9 == pytest.approx(policy)
    assert rec["host_gb"]["train"] * 1e9 == pytest.approx(3 * policy + 4 * len(params))
    assert out.read_text().startswith("# measured by rollmux profile rollmux.jobs.grpo --preset small")

    token_file = tmp_path / "admin.token"
    token_file.write_text(ADMIN)
    token_file.chmod(0o600)
    with ThreadServer(SchedulerCore(default_cluster().model_dump(), admin_token=ADMIN)) as server:
        res = runner.invoke(app, ["submit", str(out), "--url", server.url, "--admin-token-file", str(token_file)])
        assert res.exit_code == 0, res.output
        placed = json.loads(res.output)
        assert placed["status"] == "running" and placed["group_id"] is not None
        st = server.core.status()
        assert [g["members"] for g in st["groups"]] == [["grpo-small"]]


def test_the_profiler_runs_the_jobs_phases_through_the_shim(fake_module):
    opts = ProfileOptions(job_id="fake", iterations=50, runs=3, warmup=1)
    rec = profile(fake_module, "tiny", {}, opts)
    import fakejob
    calls = fakejob.CALLS
    assert calls[0] == ("make", "tiny", {})
    rollouts = [c[1] for c in calls if c[0] == "rollout"]
    assert rollouts == [False] * 4 + [True]  # warm-up, 3 runs, then one at maximum response length
    assert [c for c in calls if c[0] == "train"] == [("train", "batch")] * 5
    assert len([c for c in calls if c[0] == "sync"]) == 5
    # The shim's hooks, by pool: the init phase builds the job, then offloads both pools; then each
    # rollout and train phase onloads and offloads its side.
    assert calls[1:4] == [("init",), ("offload", "rollout"), ("offload", "train")]
    hooks = [c for c in calls[4:] if c[0] in ("onload", "offload")]
    assert hooks[:4] == [("onload", "rollout"), ("offload", "rollout"), ("onload", "train"), ("offload", "train")]
    assert rec["host_gb"] == {"rollout": 5.0, "train": 7.0}
    assert rec["model"] == "fakejob:tiny"
    assert JobSpec.model_validate(rec).iterations == 50
    assert "colocated" not in rec  # no co-located run unless asked


class ClockedJob:
    """A job whose phases and hooks advance a fake clock by set amounts, so every time is known."""

    def __init__(self, rollouts, trains):
        self.now = 0.0
        self.rollouts, self.trains = iter(rollouts), iter(trains)
        self.calls = []

    def rollout(self, max_length=False):
        self.calls.append("rollout")
        self.now += next(self.rollouts)
        return "batch"

    def train(self, batch):
        self.calls.append("train")
        self.now += next(self.trains)

    def sync(self):
        self.calls.append("sync")
        self.now += 50.0

    def onload(self, pool):
        self.calls.append(f"onload {pool}")
        self.now += 100.0  # a switch: must not land in any phase's time

    def offload(self, pool):
        self.calls.append(f"offload {pool}")
        self.now += 100.0

    def host_bytes(self):
        return {"rollout": 10**9, "train": 2 * 10**9}


def test_the_colocated_run_times_its_phases_without_the_switches_and_records_their_means(monkeypatch):
    # Disaggregated: warm-up, 3 runs, max length (1 s each); co-located: warm-up (9 s), then 3 runs
    # whose means (3 and 5) differ from their medians (2 and 4).
    job = ClockedJob(rollouts=[1.0] * 5 + [9.0, 1.0, 2.0, 6.0], trains=[1.0] * 5 + [9.0, 4.0, 4.0, 7.0])
    monkeypatch.setattr("rollmux.shim.time", SimpleNamespace(perf_counter=lambda: job.now))
    clients = []

    class Recording(profile_mod.LocalPermitClient):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            clients.append(self)

    monkeypatch.setattr(profile_mod, "LocalPermitClient", Recording)
    disagg = measure(job, "c", runs=3, warmup=1)
    n_disagg = len(job.calls)
    colo = measure(job, "c", runs=3, warmup=1, colocated=True)
    assert (colo.rollout, colo.train, colo.max_rollout) == ([1.0, 2.0, 6.0], [4.0, 4.0, 7.0], 0.0)
    # Co-located order, 4 times (warm-up + 3 runs, no max length): each phase's state onloaded
    # before it and offloaded after it, so rollout and training switch every iteration.
    # After the init phase, which offloads both pools.
    one = ["onload rollout", "rollout", "offload rollout", "onload train", "train", "offload train", "sync"]
    assert job.calls[n_disagg:] == ["offload rollout", "offload train"] + one * 4
    # The permits: disaggregated, the rollout runs on the rollout pool; co-located, every phase
    # runs on the same training nodes.
    assert {(g.phase, g.pool) for g in clients[0].grants} >= {("rollout", "rollout"), ("train", "train")}
    colo_grants = [g for g in clients[1].grants if g.phase not in ("init", "sync")]
    assert [(g.phase, g.pool) for g in colo_grants] == [("rollout", "train"), ("train", "train")] * 4
    assert len({g.nodes for g in colo_grants}) == 1
    rec = job_record(disagg, ProfileOptions(job_id="c", iterations=10), colo=colo)
    assert rec["colocated"] == {"rollout_s": 3.0, "train_s": 5.0}
    spec = JobSpec.model_validate(rec)
    assert (spec.colocated.rollout_s, spec.colocated.train_s) == (3.0, 5.0)
    assert colocated_factors(spec) == pytest.approx((3.0 / spec.mean_rollout_s, 5.0 / spec.mean_train_s))


def test_profile_colocated_adds_the_colocated_profile_to_the_record(fake_module, tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "fakejob", raising=False)  # a fresh CALLS, whatever ran before
    out = tmp_path / "job.yaml"
    res = runner.invoke(app, ["profile", fake_module, "--runs", "2", "--warmup", "0", "--colocated", "-o", str(out)])
    assert res.exit_code == 0, res.output
    import fakejob
    calls = [c[0] for c in fakejob.CALLS if c[0] != "make"]
    # Each placement's init (the job's, then both pools offloaded), then 3 disaggregated iterations
    # (2 runs, max length), then 2 co-located ones.
    init, one = ["init", "offload", "offload"], ["onload", "rollout", "offload", "onload", "train", "offload", "sync"]
    assert calls == init + one * 3 + init + one * 2
    assert [c[1] for c in fakejob.CALLS if c[0] == "rollout"] == [False, False, True, False, False]
    rec = yaml.safe_load(out.read_text())
    job = JobSpec.model_validate(rec)
    assert job.colocated is not None and job.colocated.rollout_s > 0 and job.colocated.train_s > 0
    assert "co-located (mean of 2 runs, switches excluded)" in out.read_text()


def test_the_record_is_the_runs_statistics():
    m = Measured(rollout=[1.0, 2.0, 4.0], train=[3.0, 5.0, 4.0], sync=[0.5, 0.25, 1.0], max_rollout=6.0,
                 host_bytes={"rollout": 2 * 10**9, "train": 10**9})
    rec = job_record(m, ProfileOptions(job_id="j", iterations=10, slo=1.2, rollout_gpus=16, train_gpus=8))
    assert rec["rollout_s"] == {"median": 2.0, "sigma": pytest.approx(math.log(2), rel=1e-5), "max": 6.0}
    assert (rec["train_s"], rec["sync_s"], rec["slo"], rec["rollout_gpus"]) == (4.0, 0.5, 1.2, 16)
    job = JobSpec.model_validate(rec)
    assert job.iterations == 10 and rec["duration_s"] == pytest.approx(10 * job.solo_iter_s, rel=1e-5)
    by_time = job_record(m, ProfileOptions(job_id="j", iterations=None, duration_s=500.0))
    assert by_time["duration_s"] == 500.0
    # A max-length rollout faster than a run's: the slowest rollout seen is the maximum.
    fast_max = Measured([1.0, 2.0, 4.0], [1.0] * 3, [0.0] * 3, 0.5)
    assert job_record(fast_max, ProfileOptions("j"))["rollout_s"]["max"] == 4.0


@pytest.mark.parametrize("args,place", [
    (["nosuchmodule_xyz"], "JOB_MODULE: cannot import 'nosuchmodule_xyz'"),
    (["notajob"], "JOB_MODULE: 'notajob' has no make_job"),
    (["fakejob", "--preset", "huge"], "--preset/--set: fakejob.make_job refused them: no preset 'huge'"),
    (["fakejob", "--set", "oops"], "--set: 'oops' is not KEY=VALUE"),
    (["fakejob", "--runs", "0"], "--runs: must be at least 1"),
    (["fakejob", "--slo", "0.5"], "--slo: must be at least 1"),
    (["fakejob", "--iterations", "5", "--duration", "60"], "--iterations/--duration: give one"),
    (["fakejob", "--tail-frac", "1.0"], "--tail-frac: must be in [0, 1)"),
    (["fakejob", "--set", "width=3"], "refused them: Job.__init__() got an unexpected keyword argument 'width'"),
    (["fakejob", "--set", "fail=train"],
     "JOB_MODULE: the job's train phase failed in iteration 1: RuntimeError: out of memory"),
])
def test_bad_module_or_options_are_one_line_and_exit_2(fake_module, tmp_path, args, place):
    out = tmp_path / "job.yaml"
    res = runner.invoke(app, ["profile", *args, "-o", str(out)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and place in lines[0], res.output
    assert "Traceback" not in res.output and not out.exists()


def test_an_unknown_grpo_option_names_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["profile", "rollmux.jobs.grpo", "--set", "widht=3", "-o", str(tmp_path / "j.yaml")])
    assert res.exit_code == 2 and "widht" in res.output and len(res.output.strip().splitlines()) == 1, res.output


class StateByPool:
    """A job whose state is a dict keyed by pool, as the protocol's hooks see it."""

    def __init__(self):
        self.on_device = {"rollout": "weights", "train": "weights+adam"}
        self.host = {}

    def onload(self, pool):
        self.on_device[pool] = self.host.pop(pool)

    def offload(self, pool):
        if pool not in self.host:  # (offloaded already: a new placement's init)
            self.host[pool] = self.on_device.pop(pool)  # a phase name ("init") here is a KeyError

    def host_bytes(self):
        return {pool: len(v) for pool, v in self.host.items()}

    def rollout(self, max_length=False):
        return self.on_device["rollout"]

    def train(self, batch):
        assert batch == "weights" and "train" in self.on_device

    def sync(self):
        pass


def test_the_profiler_and_the_shim_take_the_same_job_object():
    from rollmux.shim import JobShim, run_init, run_iteration
    job = StateByPool()
    m = measure(job, "same", runs=2, warmup=0)
    assert len(m.rollout) == 2 and m.host_bytes == {"rollout": 7, "train": 12}
    client = GrantAtOnce()
    shim = JobShim("same", client, job=job)  # the object the profiler measured, under a scheduler
    run_init(shim, job)
    run_iteration(shim, job)
    assert [t.phase for t in client.released] == ["init", "rollout", "train", "sync"]
    assert job.on_device == {} and set(job.host) == {"rollout", "train"}  # holds nothing between phases
    assert shim.history[-3].host_bytes == {"rollout": 7, "train": 12}
