"""Read-only views of the scheduler's state: the job and admin status, the metrics snapshot.

Pure functions of the state, called on the scheduler thread (so each view is one
consistent snapshot). No token or token hash ever appears in a view.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

from rollmux.core.vocabulary import JobStatus, Pool
from rollmux.live.live_state import WINDOW

TIMELINE_S = 600.0  # the dashboard's timeline shows the last ten minutes
PAGE = 1000         # groups and jobs per status page by default
MAX_PAGE = 10_000
STATES = tuple(JobStatus)  # every job status (core/vocabulary.py), each counted, 0 or not
POOLS = tuple(Pool)
ROLLOUT, TRAIN = Pool.ROLLOUT, Pool.TRAIN  # (a phase's pool has its name: the profile's keys too)


def iteration_figures(job: Any) -> dict:
    """A job's iteration times, from the ends of its iterations (no clock read: a finished job's
    stay as they were, and a restart rebuilds them from the journal).

    `mean_iter_s`: from its first permit (not its submission: a process that starts late is not
    slow) to its latest iteration's end, over its iterations; `recent_iter_s`: the same over its
    last `recent_iterations` (at most WINDOW: its current rate); `last_iteration_at`: wall-clock."""
    n, ends = job.iterations - job.timed_from, job.iteration_ends
    if n <= 0 or not ends or job.first_phase_at is None:
        return {"mean_iter_s": None, "recent_iter_s": None, "recent_iterations": 0, "last_iteration_at": None}
    k = min(n, WINDOW)
    start = ends[-1 - k] if len(ends) > k else job.first_phase_at  # (fewer kept: all its iterations)
    return {"mean_iter_s": (ends[-1] - job.first_phase_at) / n, "recent_iter_s": (ends[-1] - start) / k,
            "recent_iterations": k, "last_iteration_at": ends[-1]}


def job_view(job: Any, now: float, planned: Any = None, measuring: tuple[int, int] | None = None) -> dict:
    """One job: status, placement, iterations and iteration times (`iteration_figures`) vs its
    SLO, its profile (declared, measured, `planned`: what the scheduler plans it with, if a measured
    profile replaced the declared one, and `plans_with`: the record fields it plans with) and its host
    memory (declared, measured, over the declaration or not). `measuring`: (iterations measured,
    iterations it takes) while a job submitted without phase times is being measured; until then
    nothing was declared and its SLO has no solo time to be judged against."""
    figures = iteration_figures(job)
    mean = figures["mean_iter_s"]
    judged = planned if job.spec.measure else job.spec  # (a job measured as it runs: against what was measured)
    plans_with = judged.phase_times() if judged is not None else job.profiled  # (kept once it ended)
    host = job.spec.host_gb
    return {"job_id": job.spec.job_id, "status": job.status, "group_id": job.group_id,
            "iterations": job.iterations, **figures, "slo_iter_s": None if judged is None else judged.slo_iter_s,
            "slowdown": None if mean is None or judged is None else mean / judged.solo_iter_s,
            "profile": {"declared": None if job.spec.measure else {ROLLOUT: job.spec.rollout_s.median,
                                                                   TRAIN: job.spec.train_s},
                        "measured": dict(job.profile),
                        "planned": None if planned is None else {ROLLOUT: planned.rollout_s.median,
                                                                 TRAIN: planned.train_s},
                        "plans_with": plans_with,
                        "measuring": None if measuring is None else {"iterations": measuring[0],
                                                                     "of": measuring[1]}},
            "host_gb": {"declared": {ROLLOUT: host.rollout, TRAIN: host.train},
                        "measured": dict(job.host_measured), "over_declaration": job.over_memory},
            "held": sorted(job.held), "epoch": job.epoch, "reason": job.reason, "case": job.case,
            "why": job.why}


def measuring_of(core: Any, job_id: str) -> tuple[int, int] | None:
    """(iterations measured, iterations it takes) of a job being measured as it runs, else None."""
    cs = core.state.cluster
    m = cs.profiling.jobs.get(job_id)
    if m is None:
        return None
    cfg = cs.cfg.profiling
    return len(m.seen), cfg.warmup + cfg.iterations


def _pools(core: Any) -> dict:
    cs = core.state.cluster
    busy = {p: 0 for p in POOLS}
    for job in core.state.jobs.values():
        for grant in job.held.values():
            if grant["pool"] in busy:  # a sync holds no node (pool "link")
                busy[grant["pool"]] += len(grant["nodes"])
            busy[TRAIN] += len(grant.get("train_held", ()))  # an init holds its training nodes too
    out = {}
    for p in POOLS:
        spec = getattr(cs.cluster.pools, p)
        nodes = cs.ledger.nodes[p]
        out[p] = {"nodes": nodes, "gpus": nodes * spec.gpus_per_node, "busy_gpus": busy[p] * spec.gpus_per_node,
                  "cost_per_hour": nodes * spec.node_price_per_hour}
    return out


def status_view(core: Any, now: float, offset: int = 0, limit: int = PAGE) -> dict:
    """The admin's view: groups (whose turn per node), jobs, pools, cost and a phase timeline.

    Groups (by id) and jobs (in submission order) come a page at a time, like Kueue's
    visibility API: at 10,000 jobs the whole list is megabytes, and a status must stay fast."""
    cs = core.state.cluster
    groups = [{"group_id": g.group_id, "members": list(g.job_ids()), "rollout_nodes": g.n_rollout,
               "train_nodes": g.n_train, "period_s": g.shape.period_s if g.shape else None,
               "turn": cs.controllers[g.group_id].whose_turn(),
               # elastic rollout (core/elastic.py): the members on another rollout-node count than they
               # declared, with their nodes (indices of the group's); none without the mode, so a
               # 10,000-job status page stays its size
               "elastic": {m.job_id: {"rollout_nodes": list(m.rollout_nodes), "rollout_factor": m.rollout_factor}
                           for m in g.members if m.rollout_factor != 1.0}}
              for g in islice(cs.groups.values(), offset, offset + limit)]
    # Co-located jobs (core/placement/options/colocated.py): each on its own training nodes, every phase there.
    colocated = [{"group_id": g.group_id, "job_id": g.members[0].job_id, "train_nodes": g.n_train,
                  "period_s": g.shape.period_s if g.shape else None}
                 for g in islice(cs.colocated.values(), offset, offset + limit)]
    jobs = {jid: job_view(r, now, cs.planned.get(jid), measuring_of(core, jid))
            for jid, r in islice(core.state.jobs.items(), offset, offset + limit)}
    timeline = [dict(row) for row in core._timeline if row["end"] is None or row["end"] > now - TIMELINE_S]
    page = {"offset": offset, "limit": limit, "groups_total": len(cs.groups), "jobs_total": len(core.state.jobs),
            "colocated_total": len(cs.colocated)}
    why = cs.why.to_json()
    return {"now": now, "page": page, "groups": groups, "colocated": colocated, "jobs": jobs, "pools": _pools(core),
            # Why admitted jobs got a group of their own (core/placement/why.py): one reason per isolated
            # admission, and the groups each reason refused, over the service's life.
            "isolated_placements": cs.why.isolated, "placements_why": why["placements"],
            "refusals_why": why["groups"],
            # Rollout nodes groups gave back by compaction (elastic rollout only, core/repair/compaction.py).
            "rollout_nodes_compacted": cs.compacted,
            "cost_per_hour": cs.ledger.rate_per_hour(), "timeline": timeline,
            "grants": core.state.grants, "refused": core.refused_count,
            "waiting": len(core._waiting) + len(core._after_release), "journal": core.journal.url,
            "recovered_records": core.recovered_records}


def metrics_snapshot(core: Any) -> dict:
    """The state gauges of one scrape (telemetry's collector reads this)."""
    by_state = {s: 0 for s in STATES}
    slowdown = {}
    host = {p: {"declared": 0.0, "measured": 0.0} for p in POOLS}  # bytes per node, summed over active jobs
    over = 0
    for jid, r in core.state.jobs.items():
        by_state[r.status] = by_state.get(r.status, 0) + 1
        mean = iteration_figures(r)["mean_iter_s"] if r.status == JobStatus.RUNNING else None
        if mean is not None:
            slowdown[jid] = mean / r.spec.solo_iter_s
        if r.active:
            over += r.over_memory
            for p in POOLS:
                host[p]["declared"] += getattr(r.spec.host_gb, p) * 1e9
                host[p]["measured"] += r.host_measured.get(p, 0.0) * 1e9
    pools = _pools(core)
    return {"jobs_by_state": by_state, "groups": len(core.state.cluster.groups),
            "pool_gpus": {p: {"busy": v["busy_gpus"], "idle": v["gpus"] - v["busy_gpus"]} for p, v in pools.items()},
            "cost_per_hour": {p: v["cost_per_hour"] for p, v in pools.items()}, "slowdown": slowdown,
            "host_memory_bytes": host, "over_memory_declaration": over,
            "rollout_nodes_compacted": core.state.cluster.compacted}
