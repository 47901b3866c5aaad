"""`rollmux demo`: three real GRPO jobs multiplexed on an emulated Ray cluster, then solo.

The jobs' workers and their loop (init, then rollout -> train -> sync; long-tail
migration; weight sync through rollmux.weightsync) are in `demo_jobs`.

`--trl` (`run_demo(trl=True)`, needs rollmux[trl]) adds a fourth job, framework
"trl": TRL's real GRPOTrainer through `rollmux.adapters.trl`, in one Ray actor on
its training node that holds its own shim and HTTP client (the driver only
heartbeats for it). Its rollout phases are logged on the rollout node its
placement names (its generator copies run in its process; every emulated node is
this host). Submitted last with a 3x SLO, it joins heavy + large's group. Every
job's JSON entry says its framework ("grpo-example" or "trl"), group, whether its
final weights are bit-identical to its solo run, and its reward and loss curves.

Cluster: `ray.cluster_utils.Cluster` with a head node (num_cpus=1) and worker nodes
of num_cpus=1 carrying one custom resource each that names the node
(`rollout_node_k`, `train_node_k`; the "GPUs"). Two rollout nodes and one
training node start up front; nodes the placement needs beyond that are added.

Profiles: each job is submitted with phase times in seconds at the scale of its
preset's solo times (heavy 0.151/0.104 with tail_frac 0.5, large 0.010/0.235,
small 0.004/0.022) on the paper's cluster with the switch costs measured here
(warm 5 ms: an onload from host memory plus a permit round trip; cold 0.1 s: a
restore from disk). The scheduler then groups heavy + large (complementary; the
heavy job's tail may migrate on their shared rollout node) and gives small its
own group. Drift repair is off: these are scales, not measurements.

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

Idle share of a pool = 1 - busy worker-time / sum over its used nodes of the span
the node was held (first phase start to last phase end on it) times its worker
slots (rollout: 2, train: 1); a node is held only while its group has members,
in both runs. Double grants: two jobs' phase intervals overlapping on one worker
slot of the multiplexed run's log (`chaos.checks.double_grants`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import ray

from rollmux.core.config import SchedulerConfig
from rollmux.core.group_controller import worker_slots
from rollmux.core.spec import default_cluster
from rollmux.harness.chaos.checks import double_grants
from rollmux.harness.demo_jobs import (
    SYNC_STRATEGY,
    Hooks,
    PhaseLog,
    drive,
    drive_trl,
    make_shim,
    spawn,
    spawn_trl,
)
from rollmux.live.client import HttpPermitClient
from rollmux.live.codec import live_job_record
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore

REPO_ROOT = str(Path(__file__).resolve().parents[2])
DEMO_NAMESPACE = "rollmux-demo"
# job_id -> (preset, rollout profile, train profile, tail_frac) -- ms of wall time used as profile seconds
JOBS = {"heavy": ("heavy", 0.151, 0.104, 0.5), "large": ("large", 0.010, 0.235, 0.0),
        "small": ("small", 0.004, 0.022, 0.0)}
# `--trl`: a TRL GRPOTrainer job (rollmux.adapters.trl; needs rollmux[trl]) at the scale of its solo phases on
# one host (rollout 0.10-0.17 s, train 0.06-0.10 s). Its looser SLO (3x solo) lets it join heavy + large's
# group; at 2x the scheduler rightly keeps it alone (its multiplexed iteration would come close to 2x solo).
TRL_JOBS = {"trl": ("trl", 0.100, 0.060, 0.0)}
TRL_SLO = 3.0
WARM_SWITCH_S, COLD_SWITCH_S = 0.005, 0.1
HEARTBEAT_S, HEARTBEAT_TIMEOUT_S = 1.0, 30.0
# Two worker slots per rollout node: a migrated tail keeps one, the next rollout gets the other.
# Aborting and recomputing stragglers costs milliseconds here, not the simulator's default second.
CONFIG = SchedulerConfig.profile("groups").with_overrides({
    "regroup.repair": False, "intra_group.tail_worker_frac": 0.5, "intra_group.migration_overhead_s": 0.02})
INTRA = CONFIG.intra_for(default_cluster().model_copy(update={"warm_switch_s": WARM_SWITCH_S}))
TAIL_THRESHOLD = 0.8
N_PROMPTS = 16  # responses per batch (every preset's prompts_per_batch)


def _idle_share(rows: list[dict], slots: dict[str, int]) -> dict:
    """Per pool: 1 - busy worker-time / (each node's held span x its worker slots)."""
    res = {}
    for pool in ("rollout", "train"):
        spans: dict[str, list[float]] = {}
        busy = 0.0
        for r in rows:
            if r["pool"] == pool:
                sp = spans.setdefault(r["node"], [r["start"], r["end"]])
                sp[0], sp[1] = min(sp[0], r["start"]), max(sp[1], r["end"])
                busy += (r["end"] - r["start"]) * len(r["slots"])
        held = sum((e - s) * slots[pool] for s, e in spans.values())
        res[pool] = round(1.0 - busy / held, 4) if held > 0 else None
    return res


def _double_grants(rows: list[dict]) -> list[str]:
    """Worker-level double grants of the multiplexed run's phase log (rollmux chaos's check)."""
    return double_grants([{"job": r["job"], "phase": r["phase"], "group_id": 0, "pool": r["pool"],
                           "nodes": [r["node"]], "slots": [r["slots"]], "iter": r["iter"],
                           "start": r["start"], "end": r["end"]} for r in rows])


def _timeline(rows: list[dict], png: Path, slots: dict[str, int], jobs=JOBS) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t0 = min(r["start"] for r in rows)
    lanes = sorted({(r["node"], k) for r in rows for k in r["slots"]}, reverse=True)
    colors = {j: c for j, c in zip(jobs, ("tab:blue", "tab:orange", "tab:green", "tab:red"))}
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(lanes) + 1.5))
    for r in rows:
        for k in r["slots"]:
            ax.broken_barh([(r["start"] - t0, r["end"] - r["start"])], (lanes.index((r["node"], k)) - 0.4, 0.8),
                           facecolors=colors.get(r["job"], "grey"), edgecolor="black", linewidth=0.3,
                           hatch="//" if r["phase"] == "train" else None)
    ax.set_yticks(range(len(lanes)), [f"{n}/w{k}" if slots[n.split("_")[0]] > 1 else n for n, k in lanes])
    ax.set_xlabel("wall time (s)")
    ax.set_title("RollMux demo: phases on worker slots (multiplexed run; hatched = train)")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c, label=j) for j, c in colors.items()], loc="upper right")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def _all_at_once(run: str, fn, jobs=JOBS) -> None:
    """fn(job_id) for every demo job, each in its own thread; the first failure is raised."""
    errors: dict[str, BaseException] = {}

    def guarded(j: str) -> None:
        try:
            fn(j)
        except BaseException as exc:  # noqa: BLE001 -- re-raised below, in the caller's thread
            errors[j] = exc
    threads = [threading.Thread(target=guarded, args=(j,)) for j in jobs]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        j, exc = next(iter(errors.items()))
        raise RuntimeError(f"{run} run failed for {sorted(errors)}: {j}: {exc!r}") from exc


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


@dataclass(frozen=True)
class _Plan:
    """What one demo run is asked to do: its jobs (id -> preset and profile), each job's framework
    and SLO, the iterations per job and the seed."""

    jobs: dict[str, tuple[str, float, float, float]]
    framework: dict[str, str]
    slo_of: dict[str, float]
    iterations: int
    seed: int


@dataclass
class _Placed:
    """The jobs as submitted: group, job token, own client, and emulated node per pool of each job;
    `index` numbers each pool's (group_id, group-local node index) pairs in submission order."""

    node_of: dict[str, dict[str, str]] = field(default_factory=dict)
    group_of: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    clients: dict[str, HttpPermitClient] = field(default_factory=dict)
    index: dict[str, dict[tuple[int, int], int]] = field(default_factory=lambda: {"rollout": {}, "train": {}})


@dataclass(frozen=True)
class _Runs:
    """Both runs: per-job results and phase logs, and the measured switch costs (warm and cold)."""

    mux: dict
    solo: dict
    log: PhaseLog
    solo_log: PhaseLog
    warm: list
    cold: list


class _Nodes:
    """The emulated Ray cluster: a head node (num_cpus=1) and worker nodes named by a custom resource
    each (`rollout_node_k`, `train_node_k`), added as the placement needs them."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        from ray.cluster_utils import Cluster
        self.cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, include_dashboard=False))
        stack.callback(self.cluster.shutdown)
        self.have = {"rollout": 0, "train": 0}

    def grow(self, wanted: dict[str, int]) -> None:
        """Add nodes until each pool has at least `wanted[pool]`, then wait for them."""
        for pool, n in wanted.items():
            while self.have[pool] < n:
                self.cluster.add_node(num_cpus=1, resources={f"{pool}_node_{self.have[pool]}": 1})
                self.have[pool] += 1
        self.cluster.wait_for_nodes()


def run_demo(iterations: int = 20, json_out: Path | None = None, png_out: Path = Path("demo_timeline.png"),
             seed: int = 0, slo: float = 2.0, quiet: bool = False, trl: bool = False) -> dict:
    """Run the demo (with `trl`, a TRL job too); returns (and writes to json_out) its report."""
    say = (lambda *a: None) if quiet else print
    png_out = Path(png_out)
    jobs = {**JOBS, **(TRL_JOBS if trl else {})}
    plan = _Plan(jobs, {j: "trl" if j in TRL_JOBS else "grpo-example" for j in jobs},
                 {j: TRL_SLO if j in TRL_JOBS else slo for j in jobs}, iterations, seed)
    t_demo = time.perf_counter()
    # Torn down in reverse: job clients (heartbeats), the admin client, the server, Ray, the cluster.
    with contextlib.ExitStack() as stack:
        nodes = _Nodes(stack)
        nodes.grow({"rollout": 2, "train": 1})
        _connect_ray(stack, nodes)
        say(f"cluster up in {time.perf_counter() - t_demo:.1f}s: {sorted(k for k in ray.cluster_resources() if '_node_' in k)}")
        server, admin = _serve(stack)
        say(f"scheduler serving on {server.url}")
        slots = {"rollout": worker_slots(INTRA)[0], "train": 1}  # a job's rollout workers: one per slot
        placed = _submit(stack, plan, server.url, admin, say)
        nodes.grow({"rollout": len(placed.index["rollout"]), "train": len(placed.index["train"])})
        actors, trl_actors, cold = _start_workers(stack, plan, placed, slots)
        mux, log, warm = _multiplexed(plan, placed, actors, trl_actors, server.url, say)
        solo, solo_log = _solo(plan, actors, trl_actors, say)
        runs = _Runs(mux, solo, log, solo_log, warm, cold)
        result, same, doubles = _report(plan, placed, runs, slots, png_out)
        _say_report(say, plan, placed, runs, result, same, doubles)
        say(f"warm switch {result['warm_switch_s'] * 1e3:.2f} ms, cold switch {result['cold_switch_s'] * 1e3:.2f} ms; "
            f"sync ({SYNC_STRATEGY}) {result['sync']['mean_s'] * 1e3:.2f} ms; "
            f"on-policy identical: {result['on_policy_identical']}; demo wall {time.perf_counter() - t_demo:.1f}s")
        if json_out is not None:
            Path(json_out).write_text(json.dumps(result, indent=2))
        return result


def _connect_ray(stack: contextlib.ExitStack, nodes: _Nodes) -> None:
    """Join the emulated cluster; its workers import rollmux from this tree (PYTHONPATH)."""
    pypath = os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)
    ray.init(address=nodes.cluster.address, namespace=DEMO_NAMESPACE, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": pypath}})
    stack.callback(ray.shutdown)


def _serve(stack: contextlib.ExitStack) -> tuple[ThreadServer, HttpPermitClient]:
    """The scheduler (no journal) served over HTTP on loopback, and the driver's admin client."""
    cluster_spec = {**default_cluster().model_dump(), "warm_switch_s": WARM_SWITCH_S,
                    "cold_switch_s": COLD_SWITCH_S}
    admin_token = secrets.token_urlsafe(32)
    # No drift repair: the profiles above are made-up scales, so measured times would read as drift.
    core = SchedulerCore(cluster_spec, CONFIG,
                         heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S,
                         watch_ray_nodes=True, admin_token=admin_token, tail_threshold=TAIL_THRESHOLD)
    stack.callback(core.shutdown)  # if the server does not come up (a no-op after server.stop)
    server = ThreadServer(core)
    stack.callback(server.stop)
    admin = HttpPermitClient(server.url, admin_token=admin_token)
    stack.callback(admin.close)
    return server, admin


def _submit(stack: contextlib.ExitStack, plan: _Plan, url: str, admin: HttpPermitClient, say) -> _Placed:
    """Submit every job (admin token) and map its placement onto emulated nodes ("Node mapping")."""
    placed = _Placed()
    for jid, (_, r_s, t_s, tail) in plan.jobs.items():
        p = admin.submit(live_job_record(jid, r_s, t_s, plan.slo_of[jid], tail_frac=tail))
        placed.group_of[jid], placed.tokens[jid] = p["group_id"], p["token"]
        # From here on the job talks to the scheduler only with its own token, from its own client.
        placed.clients[jid] = HttpPermitClient(url, heartbeat_s=HEARTBEAT_S)
        placed.clients[jid].register(jid, p["token"])
        stack.callback(placed.clients[jid].close)
        placed.node_of[jid] = {}
        for pool in ("rollout", "train"):
            key = (p["group_id"], p[f"{pool}_nodes"][0])
            k = placed.index[pool].setdefault(key, len(placed.index[pool]))
            placed.node_of[jid][pool] = f"{pool}_node_{k}"
        say(f"submitted {jid}: group {p['group_id']} ({p['case']}) -> {placed.node_of[jid]}")
    return placed


def _start_workers(stack: contextlib.ExitStack, plan: _Plan, placed: _Placed,
                   slots: dict[str, int]) -> tuple[dict, dict, list]:
    """One rollout worker per slot, one trainer and a weight-sync group per GRPO job, one actor for the
    TRL job; each warmed up, its cold start timed, then offloaded. Returns (actors, TRL actors, cold starts)."""
    node_of = placed.node_of
    ckdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="rollmux-demo-"))
    actors = {j: spawn(JOBS[j][0], plan.seed, node_of[j]["rollout"], node_of[j]["train"], slots["rollout"])
              for j in JOBS}
    # The TRL job: one actor (trainer, generator copies, shim) on its training node; it warms up as it starts.
    trl_actors = {j: spawn_trl(plan.seed, node_of[j]["train"], slots["rollout"]) for j in plan.jobs if j in TRL_JOBS}
    for j, a in actors.items():  # heartbeats carry where the workers run (a lost node re-admits the job)
        placed.clients[j].set_nodes(j, sorted(set(ray.get([w.node_id.remote() for w in a.all()]))))
    for j, a in trl_actors.items():
        placed.clients[j].set_nodes(j, [ray.get(a.node_id.remote())])
    for j, a in actors.items():  # one unrecorded iteration warms every path (solo: all resident)
        drive(j, a, 1, PhaseLog(), ("", ""), N_PROMPTS)
    cold = ray.get([w.cold_start.remote(os.path.join(ckdir, f"{j}-{i}.pt"))
                    for j, a in actors.items() for i, w in enumerate(a.all())])
    ray.get([w.offload.remote() for a in actors.values() for w in a.all()])  # waiting jobs hold no state
    return actors, trl_actors, cold


def _multiplexed(plan: _Plan, placed: _Placed, actors: dict, trl_actors: dict, url: str,
                 say) -> tuple[dict, PhaseLog, list]:
    """The multiplexed run: init (gated), then rollout -> train -> sync through the shims, every job at
    once. Returns (per-job results, phase log, warm switch times)."""
    warm: list = []
    log = PhaseLog()
    mux: dict = {}

    def run_mux(j):
        nodes = (placed.node_of[j]["rollout"], placed.node_of[j]["train"])
        if j in trl_actors:  # the job's own process holds its shim and talks to the scheduler
            mux[j] = drive_trl(j, trl_actors[j], plan.iterations, log, nodes, url, placed.tokens[j], TAIL_THRESHOLD)
            placed.clients[j].finish(j)
            return
        hooks = Hooks(actors[j], warm)
        shim = make_shim(j, placed.clients[j], hooks, TAIL_THRESHOLD)
        mux[j] = drive(j, actors[j], plan.iterations, log, nodes, N_PROMPTS, shim, hooks)
        placed.clients[j].finish(j)  # its releases are confirmed; it leaves the group

    t_mux = time.perf_counter()
    _all_at_once("multiplexed", run_mux, plan.jobs)
    say(f"multiplexed run: {time.perf_counter() - t_mux:.2f}s")
    return mux, log, ray.get(warm)


def _solo(plan: _Plan, actors: dict, trl_actors: dict, say) -> tuple[dict, PhaseLog]:
    """The solo run: every job on dedicated nodes, all at once, no permits, state resident throughout."""
    solo_log = PhaseLog()
    solo: dict = {}
    ray.get([w.reset.remote() for a in actors.values() for w in a.all()])
    ray.get([w.onload.remote() for a in actors.values() for w in a.all()])  # solo: resident throughout
    t_solo = time.perf_counter()
    _all_at_once("solo", lambda j: solo.__setitem__(j, drive_trl(
        j, trl_actors[j], plan.iterations, solo_log, (f"rollout_solo_{j}", f"train_solo_{j}")) if j in trl_actors
        else drive(j, actors[j], plan.iterations, solo_log, (f"rollout_solo_{j}", f"train_solo_{j}"), N_PROMPTS)),
        plan.jobs)
    say(f"solo run: {time.perf_counter() - t_solo:.2f}s")
    ray.get([w.leave_sync.remote() for a in actors.values() for w in a.all()])
    return solo, solo_log


def _report(plan: _Plan, placed: _Placed, runs: _Runs, slots: dict[str, int],
            png_out: Path) -> tuple[dict, dict[str, bool], list[str]]:
    """The demo's JSON report (and its timeline picture), per job whether the multiplexed run's final
    weights and rewards are identical to the solo run's, and the multiplexed run's double grants."""
    import torch
    jobs, mux, solo = plan.jobs, runs.mux, runs.solo
    same = {j: set(mux[j].weights) == set(solo[j].weights) and
            all(torch.equal(mux[j].weights[k], solo[j].weights[k]) for k in mux[j].weights)
            and mux[j].rewards == solo[j].rewards for j in jobs}
    _timeline(runs.log.rows, png_out, slots, jobs)
    doubles = _double_grants(runs.log.rows)
    sync_s = [x for j in jobs for x in mux[j].sync_s]
    result = {
        "jobs": [{"job_id": j, "framework": plan.framework[j], "group_id": placed.group_of[j],
                  "iterations": plan.iterations, "final_reward": mux[j].rewards[-1], "slo": plan.slo_of[j],
                  "mean_iter_s_solo": round(solo[j].iter_s, 4), "mean_iter_s_mux": round(mux[j].iter_s, 4),
                  "weights_identical_to_solo": same[j],
                  "reward_curve": [round(x, 4) for x in mux[j].rewards],
                  "loss_curve": [round(x, 6) for x in mux[j].losses]}
                 for j in jobs],
        "idle_share": {"solo": _idle_share(runs.solo_log.rows, slots), "mux": _idle_share(runs.log.rows, slots)},
        "on_policy_identical": bool(all(same.values())),
        "warm_switch_s": round(_mean(runs.warm), 6),
        "cold_switch_s": round(_mean(runs.cold), 6),
        "timeline_png": str(png_out),
        "long_tail_migrations": sum(mux[j].migrations for j in jobs),
        "double_grants": len(doubles),
        "sync": {"strategy": SYNC_STRATEGY, "mean_s": round(_mean(sync_s), 6)},
    }
    return result, same, doubles


def _say_report(say, plan: _Plan, placed: _Placed, runs: _Runs, result: dict, same: dict[str, bool],
                doubles: list[str]) -> None:
    """Each job's curves and times, the first double grants, and the idle shares, one line each."""
    mux, solo = runs.mux, runs.solo
    for j in plan.jobs:
        say(f"{j:>6} ({plan.framework[j]}, group {placed.group_of[j]}) reward curve: "
            f"{' '.join(f'{x:.3f}' for x in mux[j].rewards)}  "
            f"iter solo {solo[j].iter_s * 1e3:.0f} ms, mux {mux[j].iter_s * 1e3:.0f} ms; "
            f"tails migrated {mux[j].migrations}, responses recomputed {mux[j].aborted}; "
            f"weights identical to solo: {same[j]}")
        say(f"{'':>6} loss curve: {' '.join(f'{x:.4f}' for x in mux[j].losses)}")
    for d in doubles[:5]:
        say(f"double grant: {d}")
    say(f"idle share solo {result['idle_share']['solo']}  mux {result['idle_share']['mux']}")
