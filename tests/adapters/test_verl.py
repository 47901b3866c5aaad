"""The veRL adapter through veRL's real classes on CPU: two GRPO jobs multiplexed by a real GroupController.

veRL 0.9.1's own `RayPPOTrainer.fit` runs: its FSDP2 engine (on CPU, Gloo), agent loop, reward loop,
checkpoint-engine manager and naive weight update, through the adapter's trainer and managers. The one
stand-in is the inference server (vLLM/SGLang need a GPU): rollmux.adapters.verl.cpu_server, behind veRL's
RolloutReplica and BaseRollout. Each job runs in a process of its own (tests/adapters/verl_job.py) on one
Ray cluster; both are pinned to one rollout node and one training node of one group.
"""

from __future__ import annotations

import multiprocessing
import os
import secrets
import sys
import threading

import pytest
import torch
import verl_job
from factories import intra, make_group, make_job
from verl_job import JOBS, ROOT, doc_blocks, gpu_script

from rollmux.adapters.verl import cpu_server, tiny
from rollmux.core.env import WallClockEnvironment
from rollmux.core.group_controller import GroupController
from rollmux.shim import LocalPermitClient

STEPS = 3


def _activate_cpu() -> None:
    # rollmux.adapters.verl.cpu.activate() without importing veRL in the test process (the jobs do).
    os.environ["VERL_PLATFORM"] = "cpu"
    os.environ["VERL_USE_EXTERNAL_MODULES"] = "rollmux.adapters.verl.plugin"


@pytest.fixture(scope="module")
def cluster():
    """One private Ray cluster on this machine: Ray's GPU resource counts the CPU platform's worker slots."""
    import ray
    _activate_cpu()
    ray.init(address="local", num_cpus=12, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def runs(cluster, tmp_path_factory):
    """Jobs a and b multiplexed in one group, each then replayed solo from its step-0 checkpoint."""
    root = tmp_path_factory.mktemp("verl")
    env = WallClockEnvironment()
    group = make_group([(make_job(j), (0,)) for j in JOBS], 1)
    ctl = GroupController(env, group, intra(warm_switch_s=0.0))
    client = LocalPermitClient(env, {j: ctl for j in JOBS})
    threading.Thread(target=env.serve, daemon=True).start()
    authkey = secrets.token_bytes(16)
    address, _server = verl_job.serve_permits(client, authkey)
    spawn = multiprocessing.get_context("spawn")
    procs = {}
    for job_id, seed in JOBS.items():
        tiny.write(tiny.TinyJob(root / job_id, seed=seed))
        spec = {"job_id": job_id, "seed": seed, "root": str(root / job_id), "steps": STEPS, "ray": cluster,
                "permits": address, "authkey": authkey, "probe": job_id == "a", "snippet": doc_blocks("python")[0]}
        procs[job_id] = spawn.Process(target=verl_job.main, args=(spec, str(root / f"{job_id}.pt")))
        procs[job_id].start()
    # the GPU script's dry run (its config composed and checked by veRL), alongside the jobs
    try:
        for job_id, proc in procs.items():
            proc.join(600)
            assert proc.exitcode == 0, f"job {job_id} exited with {proc.exitcode}"
    finally:
        for proc in procs.values():
            if proc.is_alive():
                proc.kill()
        env.stop()
    return {j: torch.load(root / f"{j}.pt", weights_only=False) for j in JOBS}


def _same(w1: dict, w2: dict) -> bool:
    return set(w1) == set(w2) and all(torch.equal(w1[k], w2[k]) for k in w1)


def test_each_multiplexed_job_ends_bit_identical_to_its_solo_run(runs):
    for job_id in JOBS:
        seen = runs[job_id]
        assert _same(seen["mux"], seen["solo"]), job_id
        assert not _same(seen["mux"], seen["initial"]), f"{job_id} did not train"
    assert not _same(runs["a"]["mux"], runs["b"]["mux"])  # two different jobs, not one twice


def test_the_phases_follow_verls_loop(runs):
    for seen in (runs[j] for j in JOBS):
        assert [t.phase for t in seen["history"]] == ["init"] + ["rollout", "train", "sync"] * STEPS
        assert [p for kind, p, _ in seen["permits"] if kind == "grant"] == [t.phase for t in seen["history"]]


def _holds(seen: dict) -> list[tuple[str, float, float]]:
    """(phase, granted, released) of one job, from its permit client's clock."""
    out, open_at = [], {}
    for kind, phase, t in seen["permits"]:
        if kind == "grant":
            open_at[phase] = t
        else:
            out.append((phase, open_at.pop(phase), t))
    return out


def test_the_two_jobs_take_turns_on_each_node(runs):
    uses = {"rollout": ("init", "rollout"), "train": ("init", "train")}  # init holds both pools
    a, b = _holds(runs["a"]), _holds(runs["b"])
    for pool, phases in uses.items():
        for pa, s1, e1 in a:
            for pb, s2, e2 in b:
                if pa in phases and pb in phases:
                    assert e1 <= s2 or e2 <= s1, f"a {pa} [{s1}, {e1}] overlaps b {pb} [{s2}, {e2}] on {pool}"
    # and they did run at once: one job rolled out while the other trained
    assert any(pa == "rollout" and pb == "train" and s1 < e2 and s2 < e1 or
               pa == "train" and pb == "rollout" and s1 < e2 and s2 < e1 for pa, s1, e1 in a for pb, s2, e2 in b)


def test_state_moves_at_the_phase_boundaries(runs):
    for seen in (runs[j] for j in JOBS):
        moves = [(what, where) for what, where, _ in seen["events"] if what in ("onload", "offload")]
        # init ends with both pools offloaded; each rollout and train phase onloads and offloads its pool
        assert moves == [("offload", "rollout"), ("offload", "train")] + \
            [("onload", "rollout"), ("offload", "rollout"), ("onload", "train"), ("offload", "train")] * STEPS
        # the training state went to veRL's device and back around every train phase (and to host after init)
        assert [d for d, _, _ in seen["moves"]] == ["cpu"] + ["device", "cpu"] * STEPS


def test_the_rollout_engine_sleeps_between_rollouts_and_wakes_with_the_last_weights(runs):
    for seen in (runs[j] for j in JOBS):
        log = [(e, b) for e, _, b in seen["server"]]
        # veRL's own sleep ends its init_workers; each rollout then wakes through veRL's weight update
        # (weights resumed, the trainer's loaded as version `step`, KV cache resumed) and ends asleep
        # with no weights resident (veRL's hybrid level-2 sleep)
        full = seen["weight_bytes"] * 2  # the stand-in holds float32, veRL's rollout dtype is bfloat16
        expected = [("sleep level 2", 0)]
        for step in range(STEPS):
            expected += [("resume weights", full), (f"load weights v{step}", full), ("resume kv_cache", full),
                         ("sleep level 2", 0)]
        assert log == expected


def test_the_host_memory_hook_reports_the_offloaded_training_state(runs):
    for seen in (runs[j] for j in JOBS):
        params = seen["weight_bytes"] * 2  # float32 parameters (the rollout dtype, bfloat16, is half)
        history = seen["history"]
        assert history[0].host_bytes == {"rollout": 0, "train": params}  # no optimizer state before a step
        trains = [t.host_bytes for t in history if t.phase == "train"]
        # parameters and AdamW's two moments (and its step counters); a hybrid sleep keeps nothing for rollout
        assert all(h["rollout"] == 0 and h["train"] >= 3 * params for h in trains)



def test_a_standalone_replica_veRL_will_not_sleep_is_slept_and_woken_keeping_its_weights(runs):
    seen = runs["a"]["standalone"]
    full = runs["a"]["weight_bytes"] * 2
    # veRL's own sleep_replicas skips it (as veRL's vLLM server does); the adapter's runs the colocated
    # sleep (weights to host memory) and wake, then puts the server's mode back
    assert seen["log"] == [("skip sleep", full), ("sleep level 1", 0), ("resume weights+kv_cache", full)]
    assert seen["kept"] and seen["mode"] == "standalone"
    assert seen["host_bytes"] == runs["a"]["weight_bytes"]  # one replica's weights, in the rollout dtype


def test_a_users_own_manager_must_subclass_the_adapters(runs):
    assert runs["a"]["refused"] == ("actor_rollout_ref.rollout.checkpoint_manager_class=verl.checkpoint_engine.base."
                                    "CheckpointEngineManager must subclass rollmux.adapters.verl.managers."
                                    "CheckpointEngineManager under RollMux")




def test_the_docs_python_line_is_the_adapters_trainer(runs):
    # docs/adapters.md's import line, run verbatim in job a's process (which has veRL imported)
    assert runs["a"]["snippet"] == {"is_the_adapters": True, "subclasses_verls": True}



def test_the_gpu_scripts_dry_run_composes_and_checks_verls_config(runs):
    code, out = runs["a"]["dry_run"]
    assert code == 0, out
    assert "rollout vllm on cuda; veRL's config checks passed" in out


def test_the_gpu_scripts_report_reads_a_real_run(runs):
    seen = runs["a"]
    result = gpu_script().report(seen["history"], seen["moves"])
    assert result["parameter_bytes"] == seen["weight_bytes"] * 2  # float32 parameters
    rows = result["iterations"]
    assert [r["iteration"] for r in rows] == list(range(1, STEPS + 1))
    assert [r["train_onload_bytes"] for r in rows] == [b for d, _, b in seen["moves"] if d == "device"]
    assert all(r["train_onload_s"] > 0 and r["rollout_wake_s"] > 0 and r["rollout_sleep_s"] > 0 for r in rows)
    assert "train onload s" in gpu_script().table(result)


def test_the_cpu_servers_seeds_depend_on_the_request_and_weights():
    seeds = {cpu_server.request_seed(0, v, r) for v in (0, 1) for r in ("det-0", "det-1")}
    assert len(seeds) == 4 and cpu_server.request_seed(0, 1, "det-0") == cpu_server.request_seed(0, 1, "det-0")


def test_the_entry_point_takes_verls_config_and_overrides(runs):
    out = runs["a"]["entry"]  # `python -m rollmux.adapters.verl.main_ppo --cfg job <the tiny job's overrides>`
    assert "adv_estimator: grpo" in out and "name: rollmux_cpu" in out


def test_the_entry_point_runs_verls_rayppotrainer_path_with_rollmux_run_s_environment(runs):
    prepared = runs["a"]["prepared"]
    assert prepared["use_v1"] is False
    assert prepared["env"] == {"ROLLMUX_URL": "http://127.0.0.1:1", "ROLLMUX_JOB_ID": "j",
                               "ROLLMUX_TOKEN_FILE": "/nonexistent"}


def test_without_verl_the_adapter_says_which_extra_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "verl", None)  # what Python does for a package that is not installed
    for name in [m for m in sys.modules if m.startswith("rollmux.adapters.verl.")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ImportError) as err:
        from rollmux.adapters.verl import RayPPOTrainer  # noqa: F401
    assert str(err.value) == "rollmux.adapters.verl needs the verl extra (verl is missing): pip install 'rollmux[verl]'"
