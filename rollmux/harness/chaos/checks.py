"""The checks of `rollmux chaos`: what its scenarios' phase logs and the service's status must show.

double grants come from the phase logs: two different jobs whose phase intervals overlap on
one (group_id, pool, node), or a job holding one phase twice at once; a phase left open
counts as an error unless its process was killed (it then ends at the kill). Lost jobs:
submitted jobs the service does not show done at the end, and killed jobs never seen failed
(with a reason) before their resubmission. A restart or a refused request must leave the
service's settled state (`settled_state`) unchanged. After an injected journal failure the
scheduler's memory must equal a fresh replay of its journal (`first_diff` says where not).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

import numpy as np


def read_log(log_dir: Path, pattern: str = "*.jsonl") -> list[dict]:
    """Every line of the phase logs under `log_dir` (a line torn by a kill is skipped)."""
    events = []
    for path in sorted(Path(log_dir).glob(pattern)):
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


def phase_intervals(events: list[dict], kills: dict[tuple[str, int], float] | None = None
                    ) -> tuple[list[dict], list[dict]]:
    """Pair start and end lines into intervals; a phase left open by a killed process
    (`kills`: (job, pid) -> kill time) ends at its kill. Returns (intervals, phases never ended)."""
    kills = kills or {}
    ends = {(e["file"], e["seq"]): e["t"] for e in events if e["ev"] == "end"}
    intervals, unended = [], []
    for e in events:
        if e["ev"] != "start":
            continue
        end = ends.get((e["file"], e["seq"]), kills.get((e["job"], e["pid"])))
        iv = {k: e[k] for k in ("job", "pid", "phase", "group_id", "pool", "nodes", "epoch", "iter", "wait_s")}
        iv.update(start=e["t"], end=end if end is not None else float("inf"))
        intervals.append(iv)
        if end is None:
            unended.append(iv)
    return intervals, unended


def _overlaps(items: list[dict]) -> Iterator[tuple[dict, dict]]:
    """Every pair of intervals that overlap in time (earlier start first)."""
    active: list[dict] = []
    for iv in sorted(items, key=lambda iv: iv["start"]):
        active = [a for a in active if a["end"] > iv["start"]]
        for a in active:
            yield a, iv
        active.append(iv)


def _slots_on(iv: dict, n: Any) -> set | None:
    """The worker slots an interval ran on node `n` (None: the whole node, when not logged)."""
    slots = iv.get("slots")
    return None if slots is None else set(slots[iv["nodes"].index(n)])


def double_grants(intervals: list[dict]) -> list[str]:
    """Every double grant, described: two jobs overlapping on one worker of a (group, pool, node)
    (intervals may log `slots`, per node the worker slots they ran on; without, the whole node),
    or a job running a phase while it already holds that phase."""
    by_node: dict[tuple, list[dict]] = defaultdict(list)
    by_phase: dict[tuple, list[dict]] = defaultdict(list)
    for iv in intervals:
        for n in iv["nodes"]:
            by_node[(iv["group_id"], iv["pool"], n)].append(iv)
        by_phase[(iv["job"], iv["phase"])].append(iv)
    found = []
    for (gid, pool, n), ivs in by_node.items():
        for a, b in _overlaps(ivs):
            sa, sb = _slots_on(a, n), _slots_on(b, n)
            shared = "" if sa is None or sb is None else sorted(sa & sb)
            if a["job"] != b["job"] and shared != []:
                where = f" worker(s) {shared}" if shared else ""
                found.append(f"{a['job']} ({a['phase']} it {a['iter']}) and {b['job']} ({b['phase']} it {b['iter']}) "
                             f"on group {gid} {pool} node {n}{where} "
                             f"for {(min(a['end'], b['end']) - b['start']) * 1e3:.1f} ms")
    for (job, phase), ivs in by_phase.items():
        for a, b in _overlaps(ivs):
            found.append(f"{job} granted {phase} (it {b['iter']}) while holding it (it {a['iter']})")
    return found


def lost_jobs(status: dict, jobs: list[str], killed: dict[str, str | None]) -> list[str]:
    """The `jobs` the service does not show done, and killed ones it never failed, described."""
    lost = []
    for j in jobs:
        s = status["jobs"].get(j)
        if s is None:
            lost.append(f"{j} (unknown to the service)")
        elif s["status"] != "done":
            lost.append(f"{j} ({s['status']}" + (f": {s['reason']})" if s["reason"] else ")"))
        elif j in killed and not killed[j]:
            lost.append(f"{j} (killed, never seen failed)")
    return lost


def miscounted(status: dict, done: dict[str, int]) -> list[str]:
    """Finished jobs whose iterations as the service counted them differ from `done` (job -> its own count)."""
    out = []
    for job_id, iterations in done.items():
        s = status["jobs"].get(job_id)
        if s is not None and s["status"] == "done" and s["iterations"] != iterations:
            out.append(f"{job_id}: the service counted {s['iterations']} iterations, the job did {iterations}")
    return out


def settled_state(status: dict) -> dict:
    """What a restart or a refused request must leave unchanged (no clocks, no counters of refusals)."""
    return {"grants": status["grants"],
            "groups": [{k: g[k] for k in ("group_id", "members", "rollout_nodes", "train_nodes", "turn")}
                       for g in status["groups"]],
            "jobs": {j: {**{k: s[k] for k in ("status", "group_id", "iterations", "held", "epoch", "reason")},
                         "measured": s["profile"]["measured"]} for j, s in status["jobs"].items()}}


def state_diff(a: dict, b: dict) -> str:
    """How settled state `b` differs from `a` (grants, else groups, else the first three changed jobs)."""
    if a["grants"] != b["grants"]:
        return f"grants {a['grants']} -> {b['grants']}"
    if a["groups"] != b["groups"]:
        return f"groups {a['groups']} -> {b['groups']}"
    changed = [j for j in set(a["jobs"]) | set(b["jobs"]) if a["jobs"].get(j) != b["jobs"].get(j)]
    return "; ".join(f"{j}: {a['jobs'].get(j)} -> {b['jobs'].get(j)}" for j in sorted(changed)[:3]) or "nothing"


def without(state: dict, job_ids: set[str]) -> dict:
    """A settled state less some jobs and the groups only they were members of."""
    return {"grants": state["grants"],
            "groups": [g for g in state["groups"] if not set(g["members"]) <= job_ids],
            "jobs": {j: s for j, s in state["jobs"].items() if j not in job_ids}}


def first_diff(a: Any, b: Any, path: str = "") -> str | None:
    """Where two JSON-native values first differ (`path: a != b`), or None if they are equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{path}/{k}: only in {'the first' if k in a else 'the second'}"
            d = first_diff(a[k], b[k], f"{path}/{k}")
            if d is not None:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_diff(x, y, f"{path}[{i}]")
            if d is not None:
                return d
        return None
    return None if a == b else f"{path}: {str(a)[:200]} != {str(b)[:200]}"


def percentiles_ms(seconds: list[float]) -> tuple[float | None, float | None]:
    """p50 and p99 of durations in seconds, as milliseconds (None, None if there are none)."""
    if not seconds:
        return None, None
    ms = np.array(seconds) * 1e3
    return round(float(np.percentile(ms, 50)), 3), round(float(np.percentile(ms, 99)), 3)
