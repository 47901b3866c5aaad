"""The demo's cluster, service and launcher: a multi-raylet Ray cluster with pool nodes, `rollmux serve
--ray` on it, the jobs started with `rollmux run`, and one rollout node killed mid-run.

Cluster: `ray.cluster_utils.Cluster`, a head node (num_cpus=1, no pool) and one raylet per
machine: ROLLOUT_NODES carrying the custom resource `rollout_pool`, TRAIN_NODES `train_pool`
(the manifests' `rayStartParams.resources`). Every raylet is this host, so the jobs' phase
times share its cores.

Service: `rollmux serve --ray ADDRESS` as a child process (live/local.py `ProcessServer`) with
its default profile (shipped, what `rollmux simulate` runs) on a SQLite journal, the cluster
file with the switch costs measured here, and drift repair off (the demo's profiles are made-up
scales of its presets' solo times: measured times would read as drift).

Jobs: each is `rollmux run JOB.yaml --local -- python -m rollmux.harness.demo_job ...`, launched
in submission order (the next once the service has placed the last), its output in the work
folder. The node kill: once two or more running jobs share a group and each has run GROUP_ITERATIONS
in it, the raylet of that group's rollout node is removed.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rollmux.core.spec import default_cluster
from rollmux.harness.demo_jobs import PROGRESS
from rollmux.live.client import HttpPermitClient
from rollmux.live.codec import live_job_record
from rollmux.live.local import ProcessServer

ROLLOUT_NODES, TRAIN_NODES = 2, 3
NAMESPACE = "rollmux-demo"
GROUP_ITERATIONS = 3     # iterations each member runs in the shared group before its rollout node dies
WAIT_S = 900.0           # the longest the demo waits for a launched job or for the service


class PoolCluster:
    """The Ray cluster: a head and one raylet per pool node; `nodes[pool]` their Ray node ids."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        from ray.cluster_utils import Cluster
        self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        stack.callback(self.cluster.shutdown)
        self.raylets: dict[str, object] = {}
        self.nodes: dict[str, list[str]] = {"rollout": [], "train": []}
        for pool, n in (("rollout", ROLLOUT_NODES), ("train", TRAIN_NODES)):
            for _ in range(n):
                node = self.cluster.add_node(num_cpus=1, resources={f"{pool}_pool": 1})
                self.raylets[node.node_id] = node
                self.nodes[pool].append(node.node_id)
        self.cluster.wait_for_nodes()
        self.address = self.cluster.address
        self.head = self.cluster.head_node.node_id
        self.started = started_by_pool(self.cluster.list_all_nodes())
        self.nodes = {p: ids for p, ids in self.started.items() if p != "head"}  # (as Ray has them)

    def describe(self) -> str:
        """The Ray nodes started, by the pool resource each carries: `head 1a2b3c4d; rollout:
        rollout-0 5e6f7a8b, ...` (a label, then the start of its Ray node id)."""
        pools = "; ".join(f"{pool}: " + ", ".join(f"{self.label(n)} {n[:8]}" for n in ids)
                          for pool, ids in self.started.items() if pool != "head")
        return f"{sum(map(len, self.started.values()))} Ray nodes: head {self.head[:8]}; {pools}"

    def pool_of(self, node_id: str) -> str | None:
        """The pool of a Ray node id (None for one that is not a pool node)."""
        return next((p for p, ids in self.nodes.items() if node_id in ids), None)

    def label(self, node_id: str) -> str:
        """A short name for a pool node: `rollout-0`, `train-2`."""
        pool = self.pool_of(node_id)
        return f"{pool}-{self.nodes[pool].index(node_id)}" if pool else node_id[:8]

    def kill(self, node_id: str) -> None:
        """Remove the node's raylet (its workers die with it)."""
        self.cluster.remove_node(self.raylets[node_id])


def started_by_pool(raylets) -> dict[str, list[str]]:
    """Ray node ids by the pool resource their raylet was started with (`rollout_pool`,
    `train_pool`; "head" for one with neither), in start order."""
    out: dict[str, list[str]] = {"head": [], "rollout": [], "train": []}
    for node in raylets:
        pools = [p for p in ("rollout", "train") if f"{p}_pool" in (node._ray_params.resources or {})]
        out[pools[0] if pools else "head"].append(node.node_id)
    return out


class Progress:
    """Forwards the progress lines the jobs print to their logs (`demo_jobs.progress_line`) to
    `say`, each after its job's label, as they come (a thread polls the logs)."""

    def __init__(self, say, every_s: float = 0.5) -> None:
        self._say, self._every = say, every_s
        self._logs: dict[str, list] = {}  # label -> [path, bytes read]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-progress", daemon=True)

    def follow(self, label: str, log: Path) -> None:
        """Forward `log`'s progress lines as `label`'s."""
        with self._lock:
            self._logs[label] = [Path(log), 0]

    def poll(self) -> int:
        """Forward every complete progress line written since the last poll; how many."""
        n = 0
        with self._lock:
            for label, entry in self._logs.items():
                path, seen = entry
                if not path.exists():
                    continue
                with open(path, "rb") as f:
                    f.seek(seen)
                    chunk = f.read()
                done = chunk[:chunk.rfind(b"\n") + 1]  # (a partial last line waits for the next poll)
                entry[1] = seen + len(done)
                for line in done.decode(errors="replace").splitlines():
                    if line.startswith(PROGRESS):
                        self._say(f"{label} {line[len(PROGRESS):].strip()}")
                        n += 1
        return n

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.poll()

    def __enter__(self) -> "Progress":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.poll()


def start_service(stack: contextlib.ExitStack, work: Path, ray_address: str, warm_s: float, cold_s: float,
                  sets: dict[str, object]) -> ProcessServer:
    """`rollmux serve --ray` on the cluster (module docstring), stopped with the stack."""
    cluster_file = work / "cluster.yaml"
    cluster_file.write_text(yaml.safe_dump({**default_cluster().model_dump(), "warm_switch_s": warm_s,
                                            "cold_switch_s": cold_s}))
    extra = ["--ray", ray_address, "--no-repair"]
    for key, value in sets.items():
        extra += ["--set", f"{key}={value}"]
    server = ProcessServer(str(work / "journal.db"), work, cluster=cluster_file, extra=extra, profile=None)
    stack.callback(server.signal)
    return server


@dataclass
class Launched:
    """The jobs as launched: their `rollmux run` processes, first placements and output folder."""

    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    placed: dict[str, dict] = field(default_factory=dict)
    out: Path = Path(".")


def launch(stack: contextlib.ExitStack, work: Path, server: ProcessServer, admin: HttpPermitClient,
           ray_address: str, jobs: dict[str, dict], iterations: int, seed: int, slots: int, n_prompts: int,
           tail_threshold: float, say, progress: Progress | None = None, label=str) -> Launched:
    """`rollmux run` for every job, in order, each once the service has the one before (so all are
    submitted before the first has done much: launching is what a job waits for, not placement);
    `progress` follows their logs, `label` names a Ray node."""
    got = Launched(out=work / "results")
    env = {**_environ(), "RAY_ADDRESS": ray_address, "RAY_NAMESPACE": NAMESPACE, "PYTHONUNBUFFERED": "1"}
    for jid, spec in jobs.items():
        job_file = work / f"{jid}.yaml"
        job_file.write_text(yaml.safe_dump(live_job_record(jid, spec["rollout_s"], spec["train_s"], spec["slo"],
                                                           tail_frac=spec["tail_frac"])))
        cmd = [sys.executable, "-m", "rollmux.cli", "run", str(job_file), "--url", server.url,
               "--admin-token-file", str(server.token_file), "--token-dir", str(work / "tokens"), "--local", "--",
               sys.executable, "-m", "rollmux.harness.demo_job", "--preset", spec["preset"], "--seed", str(seed),
               "--iterations", str(iterations), "--slots", str(slots), "--prompts", str(n_prompts),
               "--tail-threshold", str(tail_threshold), "--out", str(got.out)]
        log = open(work / f"{jid}.log", "wb")  # noqa: SIM115 -- closed with the stack, after the job ends
        stack.callback(log.close)
        got.procs[jid] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        if progress is not None:
            progress.follow(jid, work / f"{jid}.log")
        stack.callback(_stop, got.procs[jid])
        got.placed[jid] = _wait(lambda j=jid: _placed(admin, j), f"the service to place {jid}", got.procs[jid],
                                work / f"{jid}.log")
        p = got.placed[jid]
        nodes = {pool: [label(n) for n in ids if n] for pool, ids in (p.get("node_ids") or {}).items()}
        say(f"launched {jid}: {p.get('mode')} group {p.get('group_id')} ({p.get('case')}) on "
            + "; ".join(f"{pool} {' '.join(ids)}" for pool, ids in nodes.items() if ids))
    return got


def start_solo(work: Path, ray_address: str, job_id: str, preset: str, seed: int, iterations: int, slots: int,
               n_prompts: int, out: Path) -> subprocess.Popen:
    """The job's solo run as its own driver process (`demo_job --solo`), its output in the work folder."""
    env = {**_environ(), "RAY_ADDRESS": ray_address, "RAY_NAMESPACE": NAMESPACE, "PYTHONUNBUFFERED": "1"}
    with open(work / f"solo-{job_id}.log", "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "rollmux.harness.demo_job", "--solo", job_id, "--preset", preset,
                                 "--seed", str(seed), "--iterations", str(iterations), "--slots", str(slots),
                                 "--prompts", str(n_prompts), "--out", str(out)], stdout=log,
                                stderr=subprocess.STDOUT, env=env)


def _environ() -> dict[str, str]:
    import os
    return dict(os.environ)


def _placed(admin: HttpPermitClient, job_id: str) -> dict | None:
    """The job's view once it is submitted (None before)."""
    try:
        return admin.job(job_id)
    except Exception:  # noqa: BLE001 -- not submitted yet (404)
        return None


def _wait(pred, what: str, proc: subprocess.Popen | None = None, log: Path | None = None,
          timeout_s: float = WAIT_S):
    """pred()'s first truthy value, polled; RuntimeError if `proc` exits first (with the end of its
    `log`) or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-6000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"waiting for {what}: its process exited with {proc.returncode}; its output "
                               f"ends:\n{tail}")
        time.sleep(0.1)
    raise RuntimeError(f"waiting for {what}: nothing after {timeout_s:.0f}s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


def kill_shared_rollout_node(cluster: PoolCluster, admin: HttpPermitClient, jobs: list[str],
                             procs: dict[str, subprocess.Popen]) -> dict:
    """Once two or more running jobs share a group and each has finished GROUP_ITERATIONS in it, kill
    the group's rollout node. Returns {killed, jobs_on_it, epochs_before}."""
    first: dict[str, int] = {}  # a member's iterations when it was first seen in the group

    def victim():
        views = {j: admin.job(j) for j in jobs}
        groups: dict[int, list[str]] = {}
        for j, v in views.items():
            if v.get("status") == "running" and v.get("mode") == "disaggregated":
                groups.setdefault(v["group_id"], []).append(j)
        for members in groups.values():
            if len(members) < 2:
                continue
            for j in members:
                first.setdefault(j, views[j]["iterations"])
            if all(views[j]["iterations"] >= first[j] + GROUP_ITERATIONS for j in members):
                node = views[members[0]]["node_ids"]["rollout"][0]
                on = [j for j in members if node in views[j]["node_ids"]["rollout"]]
                return node, on, {j: views[j]["epoch"] for j in on}
        if all(p.poll() is not None for p in procs.values()):
            raise RuntimeError("every job ended before two of them shared a group long enough to lose a node")
        return None
    node, on, epochs = _wait(victim, "two jobs to share a group long enough to lose its rollout node")
    cluster.kill(node)
    return {"killed": node, "jobs_on_it": on, "epochs_before": epochs}


def wait_all(procs: dict[str, subprocess.Popen], timeout_s: float = WAIT_S) -> dict[str, int]:
    """Every `rollmux run` exit status (RuntimeError naming the jobs still running past the timeout)."""
    deadline = time.monotonic() + timeout_s
    for jid, p in procs.items():
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            late = sorted(j for j, q in procs.items() if q.poll() is None)
            raise RuntimeError(f"jobs {late} still running after {timeout_s:.0f}s") from None
    return {jid: p.returncode for jid, p in procs.items()}
