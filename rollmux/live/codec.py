"""JSON-native forms of the live state: the journal snapshot, and a small live job's submission.

A snapshot holds the whole `LiveState` as of one journal record, so a restart replays only
the records after it (DESIGN §8). Groups, plans and moves inside it keep the records' JSON
forms (core/records.py), so snapshots written by an older service still load.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from rollmux.core.colo_controller import ColocatedController
from rollmux.core.estimates import PhaseEstimate
from rollmux.core.group_controller import GroupController
from rollmux.core.placement.why import WhyTally
from rollmux.core.record_forms import group_from_dict, group_to_dict, job_to_dict, move_from_dict, move_to_dict
from rollmux.core.spec import JobSpec
from rollmux.core.state.profiling import Measuring
from rollmux.core.vocabulary import JobStatus


def live_job_record(job_id: str, rollout_s: float, train_s: float, slo: float, sync_s: float = 0.001,
                    tail_frac: float = 0.0) -> dict:
    """A submission for a small live job: fixed phase times, one node per pool, an hour of work;
    `tail_frac`: the share of its rollout spent in the long tail (long-tail migration)."""
    return {"job_id": job_id, "arrival_s": 0.0, "duration_s": 3600.0, "slo": slo,
            "rollout_gpus": 8, "train_gpus": 8, "rollout_s": {"median": rollout_s, "sigma": 0.0, "max": rollout_s},
            "tail_frac": tail_frac, "train_s": train_s, "sync_s": sync_s, "host_gb": {"rollout": 1.0, "train": 1.0}}


_ESTIMATE_FIELDS = ("window", "z", "min_n", "train_ratio", "over_max", "count", "solo_done_s")


def estimate_to_dict(e: PhaseEstimate) -> dict:
    """A job's measured-profile estimate as JSON-native data (a snapshot's)."""
    return {"job": job_to_dict(e.job), "logs": list(e.logs), **{k: getattr(e, k) for k in _ESTIMATE_FIELDS}}


def estimate_from_dict(d: dict) -> PhaseEstimate:
    """Rebuild an estimate from `estimate_to_dict`'s form."""
    return PhaseEstimate(JobSpec.model_validate(d["job"]), logs=deque(d["logs"]),
                         **{k: d[k] for k in _ESTIMATE_FIELDS})


_UNTIL_SET = ("inited", "first_call_at", "profiled")  # a job's fields a snapshot holds only once set


def dump_state(state: Any) -> dict:
    """A `LiveState` as JSON-native data (a journal snapshot)."""
    cs = state.cluster
    # (`inited` only once an init was granted, `first_call_at` once it called: a snapshot of a journal
    # without them reads as before)
    jobs = {j: {**{k: v for k, v in vars(r).items() if k != "spec" and (k not in _UNTIL_SET or v)},
                "spec": job_to_dict(r.spec)} for j, r in state.jobs.items()}
    return {"jobs": jobs, "grants": state.grants,
            "groups": [group_to_dict(g) for g in cs.groups.values()],
            "colocated": [group_to_dict(g) for g in cs.colocated.values()],
            "controllers": {str(g): c.export_state() for g, c in cs.controllers.items()},
            "dissolving": sorted(cs.dissolving), "next_gid": cs.next_gid, "cases": cs.cases,
            "why": cs.why.to_json(),
            "arriving": {j: move_to_dict(m) for j, m in cs.arriving.items()},
            # migrants not yet through their first iteration where they moved (their stall is still
            # owed to the group's admission); absent: older snapshots, read as none
            **({"settling": {j: move_to_dict(m) for j, m in cs.settling.items()}} if cs.settling else {}),
            "nodes": cs.ledger.nodes,
            "estimates": {j: estimate_to_dict(e) for j, e in cs.estimates.items()},
            "planned": {j: job_to_dict(s) for j, s in cs.planned.items()}, "compacted": cs.compacted,
            **({"repinned": cs.repinned} if cs.repinned else {}),  # (absent: older snapshots read the same)
            **({"folded": cs.folded} if cs.folded else {}),
            # jobs measured as they run, and what was measured of each so far (absent: none)
            **({"measuring": {j: {"slo": m.slo, "seen": [list(t) for t in m.seen]}
                              for j, m in cs.profiling.jobs.items()}}
               if cs.profiling.jobs else {}),
            **({"node_map": {"pool_of": dict(state.nodes.pool_of),
                             "bound": [[g, p, i, n] for (g, p, i), n in sorted(state.nodes.bound.items())],
                             "renumbered": {str(g): {str(o): n for o, n in m.items()}
                                            for g, m in cs.renumbered.items()}}}
               if cs.renumbered is not None else {})}


def load_state(state: Any, d: dict, job_type: type) -> None:
    """Adopt a snapshot taken by `dump_state` into a fresh `LiveState` (its jobs are `job_type`)."""
    cs, intra = state.cluster, state.cluster.intra
    for jid, r in d["jobs"].items():
        state.jobs[jid] = job_type(**{**r, "spec": JobSpec.model_validate(r["spec"]),
                                      "status": JobStatus(r["status"])})
    state.grants = d["grants"]
    for key, table, controller in (("groups", cs.groups, GroupController),
                                   ("colocated", cs.colocated, ColocatedController)):
        for gd in d.get(key, ()):  # (older snapshots: no co-located jobs; the service refused the mode)
            g = group_from_dict(gd, intra)
            table[g.group_id] = g
            cs.controllers[g.group_id] = controller(cs.env, g, intra)
            cs.controllers[g.group_id].import_state(d["controllers"][str(g.group_id)])
    cs.dissolving = set(d["dissolving"])
    cs.arriving = {j: move_from_dict(m, intra) for j, m in d.get("arriving", {}).items()}
    cs.settling = {j: move_from_dict(m, intra) for j, m in d.get("settling", {}).items()}
    cs.next_gid, cs.cases = d["next_gid"], dict(d["cases"])
    cs.why = WhyTally.from_json(d.get("why", {}))  # older snapshots: none counted
    for pool, n in d["nodes"].items():
        cs.ledger.provision(pool, n, cs.env.now())
    cs.estimates = {j: estimate_from_dict(e) for j, e in d.get("estimates", {}).items()}
    cs.planned = {j: JobSpec.model_validate(s) for j, s in d.get("planned", {}).items()}
    cs.compacted = d.get("compacted", 0)
    cs.repinned = d.get("repinned", 0)
    cs.folded = d.get("folded", 0)
    cs.profiling.jobs = {j: Measuring(m["slo"], [tuple(t) for t in m["seen"]])
                         for j, m in d.get("measuring", {}).items()}
    nm = d.get("node_map")
    if nm is not None:  # (absent: no inventory was reported)
        state.nodes.pool_of.update(nm["pool_of"])
        state.nodes.bound.update({(g, p, i): n for g, p, i, n in nm["bound"]})
        cs.renumbered = {int(g): {int(o): n for o, n in m.items()} for g, m in nm["renumbered"].items()}
        cs.set_capacity({p: state.nodes.capacity(p) for p in ("rollout", "train")})
    cs.reindex()
