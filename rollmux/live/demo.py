"""`rollmux demo`: three real GRPO jobs multiplexed on an emulated Ray cluster, then solo.

Cluster: `ray.cluster_utils.Cluster` with a head node (num_cpus=1) and worker nodes
of num_cpus=1 carrying one custom resource each that names the node
(`rollout_node_k`, `train_node_k`; the "GPUs"). Two rollout nodes and one
training node start up front; nodes the placement needs beyond that are added.

Profiles: each job is submitted with its preset's measured solo phase times in
seconds (medium 0.151/0.104, large 0.010/0.235, small 0.004/0.022) on the paper's
cluster with the switch costs measured here (warm 5 ms: an onload from host memory
plus a permit round trip; cold 0.1 s: a restore from disk). The scheduler then
groups medium + large (complementary) and gives small its own group.

Node mapping: for each pool, the (group_id, group-local node index) pairs the
scheduler returns are numbered in submission order, k = 0, 1, ...; pair k runs on
`{pool}_node_k`. Workers are pinned with `resources={name: 0.01}` (num_cpus=0).

Scheduler: a `SchedulerCore` (no journal) served over HTTP on loopback by
`ThreadServer`, with an admin token. The driver submits the jobs with the admin
token; each job then talks to the scheduler only through its own
`HttpPermitClient` (its job token, heartbeats every second, the Ray node ids of
its workers), as a job on a real cluster would. Ray is the engine the jobs'
workers run on; the scheduler also watches Ray for lost nodes.

Solo run: the same jobs on dedicated nodes (Solo-D), no permits and no
offloading, on the same worker processes reset to a fresh job of the same config
and seed. The three jobs run at the same time in both runs, as they would on a
cluster, so both see the same sharing of this host's cores by the emulated nodes.

Idle share of a pool = 1 - busy node-time / sum over its used nodes of the span
the node was held (first phase start to last phase end on it); a node is held
only while its group has members, in both runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
import threading
import time
from pathlib import Path

import ray

from rollmux.core.spec import default_cluster
from rollmux.live.client import HttpPermitClient
from rollmux.live.codec import live_job_record
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore
from rollmux.shim import JobShim

REPO_ROOT = str(Path(__file__).resolve().parents[2])
DEMO_NAMESPACE = "rollmux-demo"
# job_id -> (preset, rollout profile, train profile) -- ms of wall time used as profile seconds
JOBS = {"medium": ("medium", 0.151, 0.104), "large": ("large", 0.010, 0.235), "small": ("small", 0.004, 0.022)}
WARM_SWITCH_S, COLD_SWITCH_S = 0.005, 0.1
HEARTBEAT_S, HEARTBEAT_TIMEOUT_S = 1.0, 30.0


class Worker:
    """One side (rollout or trainer) of a GRPO job, pinned to one emulated node."""

    def __init__(self, size: str, seed: int, side: str) -> None:
        from examples.grpo.job import GRPOJob, make_config, run_solo
        self.side, self.size, self.seed = side, size, seed
        run_solo(GRPOJob(make_config(size, seed + 1)), 1)  # warm up torch (autograd, kernels) off the clock
        self.reset()

    def reset(self) -> None:
        """A fresh job (same config and seed); the other side never runs here, so it stays offloaded."""
        from examples.grpo.job import GRPOJob, make_config
        self.job = GRPOJob(make_config(self.size, self.seed))
        self.job.offload("trainer" if self.side == "rollout" else "rollout")

    def node_id(self) -> str:
        """The Ray node this worker runs on (the job's heartbeats carry it)."""
        return ray.get_runtime_context().get_node_id()

    def cold_start(self, path: str) -> float:
        """Checkpoint to disk, then time a cold start (restore) from it."""
        self.job.checkpoint(path)
        t = time.perf_counter()
        self.job.restore(path)
        dt = time.perf_counter() - t
        self.job.offload("trainer" if self.side == "rollout" else "rollout")
        return dt

    def onload(self) -> float:
        t = time.perf_counter()
        self.job.onload(self.side)
        return time.perf_counter() - t

    def offload(self) -> float:
        t = time.perf_counter()
        self.job.offload(self.side)
        return time.perf_counter() - t

    def rollout(self, weights, it: int):
        return self.job.rollout(weights, it)

    def train_sync(self, batch, it: int):
        metrics = self.job.train(batch, it)
        return metrics, self.job.sync()

    def weights(self):
        return self.job.weights()


def _spawn(size: str, seed: int, rollout_node: str, train_node: str):
    actor = ray.remote(Worker)
    r = actor.options(num_cpus=0, resources={rollout_node: 0.01}).remote(size, seed, "rollout")
    t = actor.options(num_cpus=0, resources={train_node: 0.01}).remote(size, seed, "trainer")
    return r, t


def _drive(job_id: str, r, t, iterations: int, log: list, lock: threading.Lock, nodes: tuple[str, str],
           out: dict, shim: JobShim | None = None, queued: dict | None = None) -> None:
    """rollout -> train+sync, `iterations` times; phases (job, phase, node, start, end) go to `log`."""
    rewards: list[float] = []
    w_ref = t.weights.remote()
    ray.wait([w_ref])
    t_start = time.perf_counter()
    for it in range(iterations):
        for phase, node in zip(("rollout", "train"), nodes):
            with (shim.phase(phase) if shim else contextlib.nullcontext()):
                s = time.perf_counter()
                if phase == "rollout":
                    b_ref = r.rollout.remote(w_ref, it)
                    if shim:
                        queued[phase] = r.offload.remote()
                    ray.wait([b_ref], fetch_local=False)
                else:
                    m_ref, w_ref = t.train_sync.options(num_returns=2).remote(b_ref, it)
                    if shim:
                        queued[phase] = t.offload.remote()
                    rewards.append(ray.get(m_ref)["mean_reward"])
                    ray.wait([w_ref], fetch_local=False)
                e = time.perf_counter()
            with lock:
                log.append((job_id, phase, node, s, e))
    out[job_id] = {"rewards": rewards, "iter_s": (time.perf_counter() - t_start) / iterations,
                   "weights": ray.get(t.weights.remote())}


def _idle_share(log: list) -> dict:
    res = {}
    for pool in ("rollout", "train"):
        spans: dict[str, list[float]] = {}
        busy = 0.0
        for _, _, node, s, e in log:
            if node.startswith(pool):
                sp = spans.setdefault(node, [s, e])
                sp[0], sp[1] = min(sp[0], s), max(sp[1], e)
                busy += e - s
        held = sum(e - s for s, e in spans.values())
        res[pool] = round(1.0 - busy / held, 4) if held > 0 else None
    return res


def _timeline(log: list, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t0 = min(s for *_, s, _ in log)
    nodes = sorted({n for _, _, n, _, _ in log}, reverse=True)
    colors = {j: c for j, c in zip(JOBS, ("tab:blue", "tab:orange", "tab:green"))}
    fig, ax = plt.subplots(figsize=(11, 0.6 * len(nodes) + 1.5))
    for job, phase, node, s, e in log:
        ax.broken_barh([(s - t0, e - s)], (nodes.index(node) - 0.4, 0.8), facecolors=colors.get(job, "grey"),
                       edgecolor="black", linewidth=0.3, hatch="//" if phase == "train" else None)
    ax.set_yticks(range(len(nodes)), nodes)
    ax.set_xlabel("wall time (s)")
    ax.set_title("RollMux demo: phases on nodes (multiplexed run; hatched = train)")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c, label=j) for j, c in colors.items()], loc="upper right")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def _all_at_once(run: str, fn) -> None:
    """fn(job_id) for every demo job, each in its own thread; the first failure is raised."""
    errors: dict[str, BaseException] = {}

    def guarded(j: str) -> None:
        try:
            fn(j)
        except BaseException as exc:  # noqa: BLE001 -- re-raised below, in the caller's thread
            errors[j] = exc
    threads = [threading.Thread(target=guarded, args=(j,)) for j in JOBS]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        j, exc = next(iter(errors.items()))
        raise RuntimeError(f"{run} run failed for {sorted(errors)}: {j}: {exc!r}") from exc


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def run_demo(iterations: int = 20, json_out: Path | None = None, png_out: Path = Path("demo_timeline.png"),
             seed: int = 0, slo: float = 2.0, quiet: bool = False) -> dict:
    """Run the demo; returns (and writes to json_out) the report described in issue 4."""
    from ray.cluster_utils import Cluster
    say = (lambda *a: None) if quiet else print
    png_out = Path(png_out)
    t_demo = time.perf_counter()
    have = {"rollout": 0, "train": 0}
    # Torn down in reverse: job clients (heartbeats), the admin client, the server, Ray, the cluster.
    with contextlib.ExitStack() as stack:
        cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, include_dashboard=False))
        stack.callback(cluster.shutdown)

        def ensure(pool: str, n: int) -> None:
            while have[pool] < n:
                cluster.add_node(num_cpus=1, resources={f"{pool}_node_{have[pool]}": 1})
                have[pool] += 1
        ensure("rollout", 2)
        ensure("train", 1)
        cluster.wait_for_nodes()
        pypath = os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)
        ray.init(address=cluster.address, namespace=DEMO_NAMESPACE, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": pypath}})
        stack.callback(ray.shutdown)
        say(f"cluster up in {time.perf_counter() - t_demo:.1f}s: {sorted(k for k in ray.cluster_resources() if '_node_' in k)}")
        cluster_spec = {**default_cluster().model_dump(), "warm_switch_s": WARM_SWITCH_S,
                        "cold_switch_s": COLD_SWITCH_S}
        admin_token = secrets.token_urlsafe(32)
        core = SchedulerCore(cluster_spec, heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S, watch_ray_nodes=True,
                             admin_token=admin_token)
        stack.callback(core.shutdown)  # if the server does not come up (a no-op after server.stop)
        server = ThreadServer(core)
        stack.callback(server.stop)
        admin = HttpPermitClient(server.url, admin_token=admin_token)
        stack.callback(admin.close)
        clients: dict[str, HttpPermitClient] = {}
        say(f"scheduler serving on {server.url}")

        # --- submit (admin token) and map the placement onto emulated nodes
        node_of: dict[str, dict[str, str]] = {}
        index: dict[str, dict[tuple[int, int], int]] = {"rollout": {}, "train": {}}
        for jid, (_, r_ms, t_ms) in JOBS.items():
            p = admin.submit(live_job_record(jid, r_ms, t_ms, slo))
            # From here on the job talks to the scheduler only with its own token, from its own client.
            clients[jid] = HttpPermitClient(server.url, heartbeat_s=HEARTBEAT_S)
            clients[jid].register(jid, p["token"])
            stack.callback(clients[jid].close)
            node_of[jid] = {}
            for pool in ("rollout", "train"):
                key = (p["group_id"], p[f"{pool}_nodes"][0])
                k = index[pool].setdefault(key, len(index[pool]))
                node_of[jid][pool] = f"{pool}_node_{k}"
            say(f"submitted {jid}: group {p['group_id']} ({p['case']}) -> {node_of[jid]}")
        ensure("rollout", len(index["rollout"]))
        ensure("train", len(index["train"]))
        cluster.wait_for_nodes()

        # --- multiplexed run
        ckdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="rollmux-demo-"))
        actors = {j: _spawn(JOBS[j][0], seed, node_of[j]["rollout"], node_of[j]["train"]) for j in JOBS}
        for j, pair in actors.items():  # heartbeats carry where the workers run (a lost node re-admits the job)
            clients[j].set_nodes(j, sorted(set(ray.get([a.node_id.remote() for a in pair]))))
        for j, (r, t) in actors.items():  # one unrecorded iteration warms every path, then fresh jobs
            _drive(j, r, t, 1, [], threading.Lock(), ("", ""), {})
        ray.get([a.reset.remote() for pair in actors.values() for a in pair])
        cold = ray.get([a.cold_start.remote(os.path.join(ckdir, f"{j}-{i}.pt"))
                        for j, pair in actors.items() for i, a in enumerate(pair)])
        ray.get([a.offload.remote() for pair in actors.values() for a in pair])  # waiting jobs hold no state
        warm: list[float] = []
        log: list = []
        lock = threading.Lock()
        mux: dict = {}

        def run_mux(j):
            # An actor runs its calls in order, so the hooks only queue work there: onload is queued
            # after the permit arrives and ahead of the phase's call; _drive queues offload right behind
            # the phase's call, and the offload hook waits for it, so the permit is released only once
            # the state is back in host memory. This saves two driver round trips per phase.
            pick = dict(zip(("rollout", "train"), actors[j]))
            queued: dict = {}
            shim = JobShim(j, clients[j], onload=lambda ph: warm.append(pick[ph].onload.remote()),
                           offload=lambda ph: ray.get(queued.pop(ph)))
            _drive(j, *actors[j], iterations, log, lock, (node_of[j]["rollout"], node_of[j]["train"]), mux,
                   shim, queued)
            clients[j].finish(j)  # its releases are confirmed; it leaves the group

        t_mux = time.perf_counter()
        _all_at_once("multiplexed", run_mux)
        say(f"multiplexed run: {time.perf_counter() - t_mux:.2f}s")
        warm = ray.get(warm)

        # --- solo run: every job on dedicated nodes, all at once, no permits
        solo_log: list = []
        solo: dict = {}
        ray.get([a.reset.remote() for pair in actors.values() for a in pair])
        ray.get([a.onload.remote() for pair in actors.values() for a in pair])  # solo: resident throughout
        t_solo = time.perf_counter()
        _all_at_once("solo", lambda j: _drive(j, *actors[j], iterations, solo_log, lock,
                                              (f"rollout_solo_{j}", f"train_solo_{j}"), solo))
        say(f"solo run: {time.perf_counter() - t_solo:.2f}s")

        import torch
        identical = all(set(mux[j]["weights"]) == set(solo[j]["weights"]) and
                        all(torch.equal(mux[j]["weights"][k], solo[j]["weights"][k]) for k in mux[j]["weights"])
                        and mux[j]["rewards"] == solo[j]["rewards"] for j in JOBS)
        _timeline(log, png_out)
        result = {
            "jobs": [{"job_id": j, "iterations": iterations, "final_reward": mux[j]["rewards"][-1], "slo": slo,
                      "mean_iter_s_solo": round(solo[j]["iter_s"], 4), "mean_iter_s_mux": round(mux[j]["iter_s"], 4)}
                     for j in JOBS],
            "idle_share": {"solo": _idle_share(solo_log), "mux": _idle_share(log)},
            "on_policy_identical": bool(identical),
            "warm_switch_s": round(_mean(warm), 6),
            "cold_switch_s": round(_mean(cold), 6),
            "timeline_png": str(png_out),
        }
        for j in JOBS:
            say(f"{j:>6} reward curve: {' '.join(f'{x:.3f}' for x in mux[j]['rewards'])}  "
                f"iter solo {solo[j]['iter_s'] * 1e3:.0f} ms, mux {mux[j]['iter_s'] * 1e3:.0f} ms")
        say(f"idle share solo {result['idle_share']['solo']}  mux {result['idle_share']['mux']}")
        say(f"warm switch {result['warm_switch_s'] * 1e3:.2f} ms, cold switch {result['cold_switch_s'] * 1e3:.2f} ms; "
            f"on-policy identical: {identical}; demo wall {time.perf_counter() - t_demo:.1f}s")
        if json_out is not None:
            Path(json_out).write_text(json.dumps(result, indent=2))
        return result
