"""`rollmux demo`: real GRPO jobs launched with `rollmux run` on a multi-node Ray cluster under
`rollmux serve --ray`, one node killed mid-run, then the same jobs solo.

Cluster, service and launcher: `demo_launch` (a raylet per pool node with its `rollout_pool` or
`train_pool` resource; the service's node inventory is the cluster; every job is its own
`rollmux run --local` driver). Each job (`demo_job`) starts its workers on the nodes its permits
name and restarts them where a move puts it; the jobs' workers and their loop (rollout -> train
-> sync, long-tail migration, weight sync through rollmux.weightsync) are in `demo_jobs`.

Profiles: each job is submitted with phase times in seconds at the scale of its preset's solo
times (heavy 0.151/0.104 with tail_frac 0.5, large 0.010/0.235, small 0.004/0.022) on the
paper's cluster with the switch costs measured here (warm 5 ms: an onload from host memory plus
a permit round trip; cold 8 s: a move restarts a side's workers, new Ray worker processes that import
torch, 6-10 s a side measured on this 2-core host). The shipped profile decides where they run: who is
co-located, who shares a group, who is paired later.

Node loss: once a group of two or more has done part of its work, its rollout node's raylet is
removed. The service's inventory sees it go, places the group's members again, and each job
restarts its rollout workers where its next permit says, redoing the step the loss broke.

Solo run: the same jobs with fresh workers, no permits and no offloading, all at once (both runs
share this host's cores the same way). Every job's final weights and rewards must be identical to
its solo run's (on-policy).

Off node: a phase whose workers reported (from inside, `ray.get_runtime_context().get_node_id()`)
a node other than the one its permit named. Idle share of a pool: 1 - the time some phase ran on
a node / the time the node was held (first to last phase on it), over the pool's nodes. Double
grants: two jobs' phase intervals overlapping on one worker slot of the multiplexed run's log
(`chaos.checks.double_grants`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rollmux.core.config import SchedulerConfig
from rollmux.core.group_controller import worker_slots
from rollmux.core.spec import default_cluster
from rollmux.harness import demo_launch as dl
from rollmux.harness.chaos.checks import double_grants
from rollmux.harness.demo_jobs import SYNC_STRATEGY, PhaseLog
from rollmux.live.client import HttpPermitClient

# job_id -> (preset, rollout profile, train profile, tail_frac) -- ms of wall time used as profile seconds
JOBS = {"heavy": ("heavy", 0.151, 0.104, 0.5), "large": ("large", 0.010, 0.235, 0.0),
        "small": ("small", 0.004, 0.022, 0.0)}
WARM_SWITCH_S, COLD_SWITCH_S = 0.005, 8.0  # an onload; a restart of one side's workers (docstring)
# Two worker slots per rollout node: a migrated tail keeps one, the next rollout gets the other.
# Aborting and recomputing stragglers costs milliseconds here, not the simulator's default second.
SETS = {"intra_group.tail_worker_frac": 0.5, "intra_group.migration_overhead_s": 0.02}
INTRA = SchedulerConfig.profile("shipped").with_overrides(SETS).intra_for(
    default_cluster().model_copy(update={"warm_switch_s": WARM_SWITCH_S}))
TAIL_THRESHOLD = 0.8
N_PROMPTS = 16  # responses per batch (every preset's prompts_per_batch)


def _idle_share(rows: list[dict], pool_of, tenures: dict | None = None, without: list | None = None) -> dict:
    """Per pool: 1 - the time some phase ran on a node / the time the node was held, summed over the
    pool's nodes. A node is held for each tenure (`tenures`: a group bound to it, from the service's
    node map; without them, one tenure) from the first phase in it to the last; `without`: intervals
    left out of both (moves and node losses)."""
    by_node: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        by_node.setdefault(r["node"], []).append((r["start"], r["end"]))
    busy = {"rollout": 0.0, "train": 0.0}
    held = {"rollout": 0.0, "train": 0.0}
    for node, iv in by_node.items():
        pool = pool_of(node)
        for lo, hi in (tenures or {}).get(node, [(float("-inf"), float("inf"))]):
            inside = [(s, e) for s, e in iv if lo <= s < hi]
            if inside:
                span = [(min(s for s, _ in inside), max(e for _, e in inside))]
                held[pool] += _length(span, without or [])
                busy[pool] += _length(inside, without or [])
    return {p: round(1.0 - busy[p] / held[p], 4) if held[p] > 0 else None for p in busy}


def _length(intervals: list[tuple[float, float]], minus: list[tuple[float, float]]) -> float:
    """The length of the union of `intervals`, less what the `minus` intervals cover."""
    def union(iv):
        out: list[list[float]] = []
        for s, e in sorted(iv):
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([s, e])
        return out
    total = 0.0
    cuts = union(minus)
    for s, e in union(intervals):
        total += e - s - sum(max(0.0, min(e, ce) - max(s, cs)) for cs, ce in cuts)
    return total


def _tenures(journal: Path, offset: float) -> dict[str, list[tuple[float, float]]]:
    """Per Ray node, the intervals a group was bound to it (the journal's `bind` records, on the
    clock of the phase log: wall time - `offset`)."""
    import sqlite3
    con = sqlite3.connect(journal)
    try:
        rows = con.execute("SELECT payload, written_at FROM records WHERE kind = 'bind' ORDER BY seq").fetchall()
    finally:
        con.close()
    bound: dict[tuple, tuple[str, float]] = {}
    out: dict[str, list[tuple[float, float]]] = {}
    for payload, at in rows:
        b = json.loads(payload)
        key, t = (b["group_id"], b["pool"], b["index"]), at - offset
        if key in bound:
            node, since = bound.pop(key)
            out.setdefault(node, []).append((since, t))
        if b["node_id"] is not None:
            bound[key] = (b["node_id"], t)
    for node, since in bound.values():
        out.setdefault(node, []).append((since, float("inf")))
    return out


def _double_grants(rows: list[dict]) -> list[str]:
    """Worker-level double grants of the multiplexed run's phase log (rollmux chaos's check)."""
    return double_grants([{"job": r["job"], "phase": r["phase"], "group_id": 0, "pool": r["pool"],
                           "nodes": [r["node"]], "slots": [r["slots"]], "iter": r["iter"],
                           "start": r["start"], "end": r["end"]} for r in rows])


def _timeline(rows: list[dict], png: Path, jobs=JOBS) -> None:
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
    wide = {n for n, k in lanes if k > 0}  # nodes with more than one worker slot in use
    ax.set_yticks(range(len(lanes)), [f"{n}/w{k}" if n in wide else n for n, k in lanes])
    ax.set_xlabel("wall time (s)")
    ax.set_title("RollMux demo: phases on worker slots (multiplexed run; hatched = train)")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c, label=j) for j, c in colors.items()], loc="upper right")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def picture(rows: list[dict], png: Path | None, jobs=JOBS) -> str | None:
    """The timeline picture at `png`, only where asked (None: none drawn); its path or None."""
    if png is None:
        return None
    _timeline(rows, Path(png), jobs)
    return str(png)


def sayer(quiet: bool = False):
    """What the demo says as it goes: one line each on stderr, after `demo: ` (stdout is the JSON's)."""
    if quiet:
        return lambda line: None
    return lambda line: print(f"demo: {line}", file=sys.stderr, flush=True)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0



@dataclass(frozen=True)
class _Plan:
    """What one demo run is asked to do: its jobs (id -> preset and profile), the SLO, the iterations
    per job and the seed."""

    jobs: dict[str, tuple[str, float, float, float]]
    slo: float
    iterations: int
    seed: int


def run_demo(iterations: int = 20, json_out: Path | None = None, png_out: Path | None = None,
             seed: int = 0, slo: float = 2.0, quiet: bool = False) -> dict:
    """Run the demo; returns (and writes to json_out) its report; its timeline picture only to `png_out`.
    Progress (a line per job and iteration) and the summary go to stderr."""
    say = sayer(quiet)
    plan = _Plan(dict(JOBS), slo, iterations, seed)
    t_demo = time.perf_counter()
    slots = worker_slots(INTRA)[0]  # a job's rollout workers: one per slot of its rollout node
    with contextlib.ExitStack() as stack:  # torn down in reverse: jobs, service, Ray, the cluster
        # ROLLMUX_DEMO_WORKDIR keeps the run's files (job files and logs, the service's log and journal).
        work = Path(os.environ.get("ROLLMUX_DEMO_WORKDIR") or
                    stack.enter_context(tempfile.TemporaryDirectory(prefix="rollmux-demo-")))
        work.mkdir(parents=True, exist_ok=True)
        cluster = dl.PoolCluster(stack)
        say(f"cluster up in {time.perf_counter() - t_demo:.1f}s: {cluster.describe()}")
        progress = stack.enter_context(dl.Progress(say))
        server = dl.start_service(stack, work, cluster.address, WARM_SWITCH_S, COLD_SWITCH_S, SETS)
        admin = HttpPermitClient(server.url, admin_token=server.admin_token)
        stack.callback(admin.close)
        say(f"rollmux serve --ray on {server.url} (journal and logs in {work})")
        specs = {j: {"preset": pr, "rollout_s": r, "train_s": t, "tail_frac": tf, "slo": slo}
                 for j, (pr, r, t, tf) in plan.jobs.items()}
        t_mux = time.perf_counter()
        got = dl.launch(stack, work, server, admin, cluster.address, specs, iterations, seed, slots, N_PROMPTS,
                        TAIL_THRESHOLD, say, progress, cluster.label)
        kill = dl.kill_shared_rollout_node(cluster, admin, list(plan.jobs), got.procs)
        say(f"killed rollout node {cluster.label(kill['killed'])} under {kill['jobs_on_it']}")
        codes = dl.wait_all(got.procs)
        progress.poll()  # (the jobs' last lines before the run's)
        say(f"multiplexed run: {time.perf_counter() - t_mux:.2f}s; exit codes {codes}")
        views = {j: admin.job(j) for j in plan.jobs}
        mux = _results(got.out, plan, codes, work)
        solo, solo_log = _solo(plan, slots, cluster, work, say, progress)
        tenures = _tenures(work / "journal.db", time.time() - time.perf_counter())
        result = _report(plan, cluster, got, kill, views, codes, mux, solo, solo_log, png_out, tenures)
        _say_report(say, result)
        say(f"demo wall {time.perf_counter() - t_demo:.1f}s")
        if json_out is not None:
            Path(json_out).write_text(json.dumps(result, indent=2))
            say(f"wrote {json_out}" + (f" and {png_out}" if png_out is not None else ""))
        return result


def _results(out: Path, plan: _Plan, codes: dict[str, int], work: Path) -> dict[str, dict]:
    """Each launched job's results (its JSON and final weights); RuntimeError naming a job that failed."""
    import torch
    res = {}
    for j in plan.jobs:
        path = out / f"{j}.json"
        if codes[j] != 0 or not path.exists():
            tail = (work / f"{j}.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"job {j} failed (rollmux run exit {codes[j]}); its output ends:\n{tail}")
        res[j] = json.loads(path.read_text())
        res[j]["weights"] = torch.load(out / f"{j}.pt", weights_only=True)
    return res


def _solo(plan: _Plan, slots: int, cluster, work: Path, say, progress=None) -> tuple[dict, PhaseLog]:
    """The solo run: each job its own driver process (as in the multiplexed run), all at once, with
    fresh workers, no permits, state resident throughout. Returns per-job results and the phase log."""
    import torch
    out, t_solo = work / "results", time.perf_counter()
    procs = {j: dl.start_solo(work, cluster.address, j, plan.jobs[j][0], plan.seed, plan.iterations, slots,
                              N_PROMPTS, out) for j in plan.jobs}
    for j in plan.jobs if progress is not None else ():
        progress.follow(f"solo {j}", work / f"solo-{j}.log")
    codes = dl.wait_all(procs)
    if progress is not None:
        progress.poll()
    say(f"solo run: {time.perf_counter() - t_solo:.2f}s")
    solo, log = {}, PhaseLog()
    for j in plan.jobs:
        if codes[j] != 0:
            tail = (work / f"solo-{j}.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the solo run of {j} failed (exit {codes[j]}); its output ends:\n{tail}")
        solo[j] = json.loads((out / f"solo-{j}.json").read_text())
        solo[j]["weights"] = torch.load(out / f"solo-{j}.pt", weights_only=True)
        log.rows.extend(solo[j]["rows"])
    return solo, log


def _launcher_block(cluster, kill: dict, views: dict, mux: dict, codes: dict) -> dict:
    """The `launcher` block: nodes, each job's mode, phases and off-node phases, the node loss."""
    jobs = []
    for j, r in mux.items():
        phases = {(row["phase"], row["iter"], row["node"], row.get("ran")) for row in r["rows"]}
        jobs.append({"job_id": j, "mode": r["first_mode"], "modes": r["modes"], "groups": r["groups"],
                     "phases": len(phases),
                     "off_node": sum(1 for (_, _, named, ran) in phases if ran != named),
                     "moves": r["moves"], "restarts": len(r["restarts"]),
                     "restart_s": round(sum(e["end"] - e["start"] for e in r["restarts"]), 3)})
    moved = [j for j in kill["jobs_on_it"] if views[j]["epoch"] > kill["epochs_before"][j]]
    groups: dict[int, list[str]] = {}
    for j, r in mux.items():
        for g in r["groups"]:
            groups.setdefault(g, []).append(j)
    return {"nodes": {p: len(ids) for p, ids in cluster.nodes.items()}, "jobs": jobs,
            "groups": {str(g): members for g, members in sorted(groups.items())},
            "off_node_total": sum(x["off_node"] for x in jobs),
            "node_loss": {"killed": kill["killed"], "jobs_on_it": kill["jobs_on_it"], "jobs_moved": len(moved),
                          "jobs_lost": sum(1 for j in kill["jobs_on_it"] if codes[j] != 0
                                           or views[j]["status"] != "done")}}


def _report(plan: _Plan, cluster, got, kill: dict, views: dict, codes: dict, mux: dict, solo: dict,
            solo_log: PhaseLog, png_out: Path | None, tenures: dict) -> dict:
    """The demo's JSON report (and its timeline picture)."""
    import torch
    for j, r in mux.items():
        r["first_mode"] = got.placed[j].get("mode")
        r["modes"] = sorted({"colocated" if cluster.pool_of(row["node"]) == "train" else "disaggregated"
                             for row in r["rows"] if row["phase"] == "rollout"})
    launcher = _launcher_block(cluster, kill, views, mux, codes)
    rows = [{**row, "node": cluster.label(row["node"])} for r in mux.values() for row in r["rows"]]
    same = {j: set(mux[j]["weights"]) == set(solo[j]["weights"])
            and all(torch.equal(mux[j]["weights"][k], solo[j]["weights"][k]) for k in mux[j]["weights"])
            and mux[j]["rewards"] == solo[j]["rewards"] for j in plan.jobs}
    png = picture(rows, png_out, plan.jobs)
    doubles = _double_grants(rows)
    held = {cluster.label(n): t for n, t in tenures.items()}
    pool_of = lambda n: n.split("-")[0]  # noqa: E731 -- `rollout-0`, `train-solo-heavy`
    return {
        "jobs": [{"job_id": j, "framework": "grpo-example", "group_id": got.placed[j].get("group_id"),
                  "mode": mux[j]["first_mode"], "iterations": plan.iterations,
                  "final_reward": mux[j]["rewards"][-1], "slo": plan.slo,
                  "mean_iter_s_solo": round(solo[j]["iter_s"], 4), "mean_iter_s_mux": round(mux[j]["iter_s"], 4),
                  "mean_iter_s_mux_steady": _steady(mux[j]["iters"], mux),
                  "weights_identical_to_solo": same[j],
                  "reward_curve": [round(x, 4) for x in mux[j]["rewards"]],
                  "loss_curve": [round(x, 6) for x in mux[j]["losses"]]} for j in plan.jobs],
        "idle_share": {"solo": _idle_share(solo_log.rows, pool_of),
                       "mux": _idle_share(rows, pool_of, held),
                       "mux_between_moves": _idle_share(rows, pool_of, held, _events(mux))},
        "on_policy_identical": bool(all(same.values())),
        "warm_switch_s": round(_mean([x for r in mux.values() for x in r["warm"]]), 6),
        "cold_switch_s": round(_mean([x for r in mux.values() for x in r["cold"]]), 6),
        "timeline_png": png,
        "long_tail_migrations": sum(r["migrations"] for r in mux.values()),
        "double_grants": len(doubles),
        "sync": {"strategy": SYNC_STRATEGY, "mean_s": round(_mean([x for r in mux.values() for x in r["sync_s"]]), 6)},
        "launcher": launcher,
    }


def _events(mux: dict) -> list[tuple[float, float]]:
    """When some job of the run started or restarted workers, or waited to be placed again (on one
    host, a job's start-up takes the cores the others' phases run on)."""
    return [(e["start"], e["end"]) for r in mux.values() for e in [r["startup"], *r["restarts"], *r["recoveries"]]
            if e]


def _steady(iters: list, mux: dict) -> float | None:
    """Mean seconds of the iterations during which no job of the run started or restarted workers or
    waited to be placed again (a group mate's restart holds its permit); None if every one overlapped one."""
    events = _events(mux)
    xs = [b - a for a, b in iters if not any(s < b and a < e for s, e in events)]
    return round(_mean(xs), 4) if xs else None


def _say_report(say, result: dict) -> None:
    """Each job's curves and times, the launcher's figures and the idle shares, one line each."""
    for j in result["jobs"]:
        say(f"{j['job_id']:>6} ({j['mode']}, group {j['group_id']}) reward curve: "
            f"{' '.join(f'{x:.3f}' for x in j['reward_curve'])}  iter solo {j['mean_iter_s_solo'] * 1e3:.0f} ms, "
            f"mux {j['mean_iter_s_mux'] * 1e3:.0f} ms "
            f"(between moves {(j['mean_iter_s_mux_steady'] or 0) * 1e3:.0f} ms); "
            f"weights identical to solo: {j['weights_identical_to_solo']}")
    la = result["launcher"]
    for j in la["jobs"]:
        say(f"{j['job_id']:>6}: modes {j['modes']}, {j['phases']} phases, {j['off_node']} off node, "
            f"{j['moves']} moves, {j['restarts']} worker restarts")
    say(f"node loss: {la['node_loss']}; off-node phases {la['off_node_total']}; double grants "
        f"{result['double_grants']}; tails migrated {result['long_tail_migrations']}")
    idle = result["idle_share"]
    say(f"idle share solo {idle['solo']}  mux {idle['mux']} (between moves {idle['mux_between_moves']})")
    say(f"warm switch {result['warm_switch_s'] * 1e3:.2f} ms, cold switch {result['cold_switch_s'] * 1e3:.2f} ms; "
        f"sync ({SYNC_STRATEGY}) {result['sync']['mean_s'] * 1e3:.2f} ms; "
        f"on-policy identical: {result['on_policy_identical']}")
