"""Acceptance of the drop-in TRL trainer (issue 42): a user's script, outside the project, under a real
`rollmux serve` through `rollmux run --local`.

The script is examples/trl_grpo.py copied to a fresh folder: it trains its own tokenizer, builds a
tiny random Qwen2, saves both and loads them by path, defines its dataset and reward, and trains with
`rollmux.adapters.trl.GRPOTrainer`. It imports torch, transformers and TRL for longer than the
service's heartbeat timeout before its first call. Two such jobs (seeds 1 and 2) run at once on a
service whose cluster has one node per pool, so they share a group; each runs alone on a service
of its own too (the solo runs, at the same time); and the same script with `from trl import
GRPOTrainer` runs with no RollMux variables in its environment. Every run is its own process,
all five at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from safetensors.torch import load_file  # noqa: E402
from trl_support import EXAMPLE_PATH  # noqa: E402

from rollmux.adapters.trl import ENVIRONMENT  # noqa: E402
from rollmux.live.client import HttpPermitClient  # noqa: E402
from rollmux.live.journal import open_store  # noqa: E402
from rollmux.live.local import ProcessServer  # noqa: E402

HEARTBEAT_S = 3.0  # the service fails a job silent this long (from its first call); the imports take longer
STEPS = 3
SEEDS = {"a": 1, "b": 2}
IMPORT = "from rollmux.adapters.trl import GRPOTrainer"
SERVE = ["--heartbeat-timeout", str(HEARTBEAT_S), "--set", "colocation.enabled=false"]
# One node per pool, so the second job joins the first one's group; a 10 ms warm switch, so sharing
# keeps both jobs within their SLO (at the default 2 s a switch costs twenty of their phases); and no
# co-located mode (a co-located job runs every phase on training nodes of its own).
CLUSTER = """pools:
  rollout: {gpu: H20, gpus_per_node: 8, host_gb_per_node: 2048, price_per_gpu_hour: 1.0, max_nodes: 1}
  train: {gpu: H800, gpus_per_node: 8, host_gb_per_node: 2048, price_per_gpu_hour: 2.85, max_nodes: 1}
warm_switch_s: 0.01
cold_switch_s: 1.0
"""


def _record(work: Path, job_id: str) -> Path:
    """examples/trl_grpo.yaml under another job id."""
    text = (EXAMPLE_PATH.parent / "trl_grpo.yaml").read_text().replace("job_id: trl-grpo", f"job_id: {job_id}")
    path = work / f"{job_id}.yaml"
    path.write_text(text)
    return path


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENVIRONMENT}
    return {**env, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def _start(cmd: list[str], cwd: Path, log: Path) -> tuple[subprocess.Popen, Path]:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, cwd=cwd, env=_env(), stdout=out, stderr=subprocess.STDOUT), log


def _run(server: ProcessServer, work: Path, job_id: str, seed: int, script: Path) -> tuple[subprocess.Popen, Path]:
    """`rollmux run JOB.yaml --local -- python SCRIPT` against `server`; its output in work/JOB.log."""
    cmd = [sys.executable, "-m", "rollmux.cli", "run", str(_record(work, job_id)), "--url", server.url,
           "--admin-token-file", str(server.token_file), "--token-dir", str(work / "tokens"), "--local", "--",
           sys.executable, str(script), "--seed", str(seed), "--steps", str(STEPS), "--out", str(work / job_id)]
    return _start(cmd, work, work / f"{job_id}.log")


def _watch_groups(admin: HttpPermitClient, stop: threading.Event, seen: list) -> None:
    """The shared service's status (what `rollmux status --json` prints) every 0.2 s: each group's members."""
    while not stop.wait(0.2):
        seen.append({j: g["group_id"] for g in admin.status()["groups"] for j in g["members"]})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """All five runs at once; what each left (exit codes, job views, journals, weights)."""
    work = tmp_path_factory.mktemp("trl-serve")
    script, plain = work / "train.py", work / "train_trl.py"
    shutil.copy(EXAMPLE_PATH, script)
    text = script.read_text()
    plain.write_text(text.replace(IMPORT, "from trl import GRPOTrainer"))
    (work / "cluster.yaml").write_text(CLUSTER)
    servers, procs = {}, {}
    try:
        for name in ("shared", "alone-a", "alone-b"):
            (work / name).mkdir()
            servers[name] = ProcessServer(str(work / name / "journal.db"), work / name, cluster=work / "cluster.yaml",
                                          extra=SERVE, profile=None)
        admin = HttpPermitClient(servers["shared"].url, admin_token=servers["shared"].admin_token)
        stop, seen = threading.Event(), []
        watcher = threading.Thread(target=_watch_groups, args=(admin, stop, seen), daemon=True)
        watcher.start()
        t0 = time.perf_counter()
        procs = {j: _run(servers["shared"], work / "shared", j, s, script) for j, s in SEEDS.items()}
        procs.update({f"alone-{j}": _run(servers[f"alone-{j}"], work / f"alone-{j}", j, s, script)
                      for j, s in SEEDS.items()})
        procs["trl"] = _start([sys.executable, str(plain), "--seed", "1", "--steps", str(STEPS), "--out",
                               str(work / "trl")], work, work / "trl.log")
        codes = {name: p.wait(timeout=300) for name, (p, _) in procs.items()}
        wall = time.perf_counter() - t0
        stop.set()
        watcher.join()
        views = {j: admin.job(j) for j in SEEDS}
        admin.close()
    finally:
        for p, _ in procs.values():
            if p.poll() is None:  # (a run past its timeout: stopped, its output kept)
                p.kill()
                p.wait()
        for s in servers.values():
            s.signal()
    return {"work": work, "codes": codes, "views": views, "seen": seen, "wall": wall, "text": text,
            "plain": plain.read_text(), "logs": {k: log.read_text(errors="replace") for k, (_, log) in procs.items()},
            "journal": open_store(str(work / "shared" / "journal.db"), readonly=True).records()}


def _weights(path: Path) -> dict:
    return load_file(str(path / "model.safetensors"))


def test_every_run_exits_zero(runs):
    failed = {k: runs["logs"][k][-2000:] for k, c in runs["codes"].items() if c != 0}
    assert not failed, f"exit codes {runs['codes']}; the failed runs' output ends:\n{failed}"


def test_both_jobs_finished_done_with_every_iteration_counted(runs):
    assert {j: (v["status"], v["iterations"]) for j, v in runs["views"].items()} == {
        "a": ("done", STEPS), "b": ("done", STEPS)}


def test_the_two_jobs_shared_a_group(runs):
    both = [s for s in runs["seen"] if s.get("a") is not None and s.get("a") == s.get("b")]
    assert both, f"rollmux status never showed a and b in one group: {runs['seen'][-5:]}"
    groups = {r.payload["job_id"]: r.payload["plan"]["group"]["group_id"] for r in runs["journal"]
              if r.kind == "place"}
    assert groups["a"] == groups["b"]


def test_their_permits_interleaved(runs):
    grants = [(r.payload["job_id"], r.payload["phase"]) for r in runs["journal"] if r.kind == "grant"]
    order = [j for j, phase in grants if phase in ("rollout", "train")]
    assert order.count("a") == order.count("b") == 2 * STEPS
    spans = {j: (order.index(j), len(order) - 1 - order[::-1].index(j)) for j in SEEDS}
    inside = {j: {k for k in order[spans[j][0]:spans[j][1]]} for j in SEEDS}
    assert inside["a"] == inside["b"] == {"a", "b"}, order  # each ran a phase while the other was mid-run


def test_each_job_started_up_for_longer_than_the_heartbeat_timeout(runs):
    records = runs["journal"]
    for j in SEEDS:
        submitted = next(r.payload["at"] for r in records if r.kind == "submit" and r.payload["job"]["job_id"] == j)
        first = min(r.payload["at"] for r in records if r.kind in ("first_call", "grant") and r.payload["job_id"] == j)
        assert first - submitted > HEARTBEAT_S, f"{j} called after {first - submitted:.1f} s"


def test_each_jobs_weights_are_bit_identical_to_the_job_alone(runs):
    work = runs["work"]
    for j in SEEDS:
        shared, alone = _weights(work / "shared" / j), _weights(work / f"alone-{j}" / j)
        assert set(shared) == set(alone) and all(torch.equal(shared[k], alone[k]) for k in shared), j
    a, b = _weights(work / "shared" / "a"), _weights(work / "shared" / "b")
    assert not all(torch.equal(a[k], b[k]) for k in a)  # the seeds differ


def test_with_trls_own_trainer_the_same_script_trains_outside_rollmux(runs):
    changed = [(x, y) for x, y in zip(runs["text"].splitlines(), runs["plain"].splitlines()) if x != y]
    assert [x for x, _ in changed] == [IMPORT + "  # outside RollMux: from trl import GRPOTrainer"]
    assert f"trl-grpo: {STEPS} steps, seed 1" in runs["logs"]["trl"]
    assert _weights(runs["work"] / "trl").keys() == _weights(runs["work"] / "shared" / "a").keys()
