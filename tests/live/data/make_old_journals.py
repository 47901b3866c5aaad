"""Write a journal the way an older rollmux writes it, for the replay tests (test_old_journals.py).

Run it with the older tree first on the path, e.g. (the tree before typed records):

    PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=OLD_TREE python tests/live/data/make_old_journals.py OUT.json \
        SNAPSHOT_EVERY LABEL

It drives an in-process scheduler core on a fresh SQLite journal through every record kind that
tree writes (config, submit, place, grant, release, tail, observe, memory, compact, movers,
move_out, leave), then saves the journal's records, its snapshot (if `SNAPSHOT_EVERY` made one)
the state the core held (its dump and status, JSON-native) and the jobs' tokens (made-up jobs:
the replay tests go on with them) to OUT.json; LABEL names the tree in it. It uses only what
every tree since the live service's config version 2 offers: SchedulerCore's in-process API and
each tree's own config type (flat, version 2; sectioned, version 3).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from rollmux.live.journal import open_store
from rollmux.live.service import SchedulerCore

CLUSTER = {"pools": {"rollout": {"gpu": "H20", "price_per_gpu_hour": 1.0},
                     "train": {"gpu": "H800", "price_per_gpu_hour": 2.85}}}


def config():
    """Groups with drift repair, elastic rollout and compaction at every iteration end."""
    try:
        from rollmux.core.config import SchedulerConfig  # sectioned (config record version 3)
    except ImportError:  # flat (version 2)
        from rollmux.core.config import SchedulerConfig
        return SchedulerConfig(repair=True, elastic_rollout=True, compact=True, compact_every_s=0.0)
    return SchedulerConfig.profile("groups").with_overrides(
        {"regroup.repair": True, "shapes.elastic_rollout": True, "compaction.enabled": True,
         "compaction.every_s": 0.0})


def job(job_id: str, rollout: float, train: float, slo: float, rollout_gpus: int = 8, tail: float = 0.0,
        duration: float = 36000.0) -> dict:
    return {"job_id": job_id, "arrival_s": 0.0, "duration_s": duration, "slo": slo, "rollout_gpus": rollout_gpus,
            "train_gpus": 8, "rollout_s": {"median": rollout, "sigma": 0.0, "max": rollout}, "tail_frac": tail,
            "train_s": train, "sync_s": 5.0, "host_gb": {"rollout": 10.0, "train": 10.0}}


def timings(run_s: float, host: int | None = None) -> dict:
    t = {"wait_s": 0.0, "onload_s": 0.0, "run_s": run_s, "offload_s": 0.0}
    if host is not None:
        t["host_bytes"] = {"rollout": host, "train": host}
    return t


def iteration(core: SchedulerCore, job_id: str, tok: str, rollout_s: float, train_s: float,
              host: int | None = None, tail: bool = False) -> None:
    """One iteration: a rollout at its permit's factor (reported tail-bound if asked), train, sync."""
    permit = core.acquire(job_id, "rollout", tok)
    if tail:
        core.tail_started(job_id, tok)
    core.release(job_id, "rollout", timings(rollout_s * permit.get("rollout_factor", 1.0), host), tok)
    for phase, run_s in (("train", train_s), ("sync", 5.0)):
        core.acquire(job_id, phase, tok)
        core.release(job_id, phase, timings(run_s), tok)


def scenario(core: SchedulerCore) -> dict[str, str]:
    """Every record kind: moves, compaction, a long tail, host memory, drift, departures, a held permit."""
    tok = {}
    # m1 and m2 share a group, m3 (a tight SLO) is alone; once m2 is done, m1 fits next to m3
    # for less: its slot there is reserved (movers), and it moves at its next boundary (move_out).
    for j, rollout, train, slo in (("m1", 100.0, 20.0, 2.0), ("m2", 20.0, 100.0, 2.0), ("m3", 20.0, 100.0, 1.05)):
        tok[j] = core.submit(job(j, rollout, train, slo, duration=100_000.0))["token"]
    core.finish("m2", tok["m2"])
    iteration(core, "m1", tok["m1"], 100.0, 20.0)
    # A train-heavy 16:8 job that gives one of its two rollout nodes back once ahead of its SLO.
    tok["y"] = core.submit(job("y", 100.0, 300.0, 1.1, rollout_gpus=16, tail=0.1))["token"]
    for _ in range(6):
        if core.state.cluster.compacted:
            break
        iteration(core, "y", tok["y"], 100.0, 300.0)
    # Three jobs that share a group; their rollouts are tail-bound, their memory measured.
    for j in ("a", "b", "c"):
        tok[j] = core.submit(job(j, 100.0, 100.0, 3.0, tail=0.3))["token"]
    for k in range(2):
        for j in ("a", "b", "c"):
            iteration(core, j, tok[j], 100.0, 100.0, host=12 * 10**9 + k, tail=True)
    # c drifts: its training takes four times as long; the repair moves members out.
    for _ in range(2):
        for j in ("a", "b", "c"):
            iteration(core, j, tok[j], 100.0, 400.0 if j == "c" else 100.0)
    core.finish("a", tok["a"])       # leave (done): departure-time repairs
    core.request("cancel", "<admin>", "b").result()  # leave (cancelled)
    core.readmit("y", "lost its workers", tok["y"])  # move_out, then placed again
    iteration(core, "c", tok["c"], 100.0, 100.0)
    core.acquire("c", "rollout", tok["c"])  # held across the restart
    return tok


def main() -> None:
    out, every, label = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "journal.db")
        core = SchedulerCore(CLUSTER, cfg=config(), store=path, snapshot_every=every)
        try:
            tokens = scenario(core)
            dump, status = core.dump(), core.status()
        finally:
            core.shutdown()
        store = open_store(path, readonly=True)
        try:
            records = [[r.kind, r.payload] for r in store.records()]
            snap = store.snapshot()
        finally:
            store.close()
    doc = {"written_by": label, "records": records, "tokens": tokens,
           "snapshot": None if snap is None else list(snap), "dump": dump,
           "status": {"groups": status["groups"], "jobs": status["jobs"], "grants": status["grants"],
                      "colocated": status.get("colocated", []), "pools": status["pools"]}}
    out.write_text(json.dumps(doc, sort_keys=True, default=list) + "\n")
    kinds = sorted({k for k, _ in records})
    print(f"{out}: {len(records)} records ({', '.join(kinds)}), snapshot: {snap is not None and snap[0]}")


if __name__ == "__main__":
    main()
