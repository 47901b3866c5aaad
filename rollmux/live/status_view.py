"""`rollmux status` as tables: groups with whose turn it is per node, jobs against their SLO."""

from __future__ import annotations

from rich.table import Table

from rollmux.core.vocabulary import Phase, Pool


def _s(v: float | None, unit: str = "s") -> str:
    return "-" if v is None else f"{v:.3g} {unit}"


def _g(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"  # (a number the service could not send is null)


def groups_table(status: dict) -> Table:
    """One row per group: members in cyclic order, node counts, planned period, turn per node;
    then one per co-located job."""
    t = Table(title="Groups")
    for col in ("group", "members", "rollout nodes", "train nodes", "period", "turn (rollout | train)"):
        t.add_column(col)
    for g in status["groups"]:
        turn = g["turn"]
        t.add_row(str(g["group_id"]), " ".join(g["members"]), str(g["rollout_nodes"]), str(g["train_nodes"]),
                  _s(g.get("period_s")),
                  " ".join(str(x) for x in turn[Pool.ROLLOUT]) + " | " + " ".join(str(x) for x in turn[Pool.TRAIN]))
    for c in status.get("colocated", ()):  # co-located jobs: every phase on their own training nodes
        t.add_row(f"{c['group_id']} (co-located)", c["job_id"], "0", str(c["train_nodes"]), _s(c.get("period_s")),
                  f"- | {c['job_id']} (rollout and training)")
    return t


def jobs_table(status: dict) -> Table:
    """One row per job: status, iterations, mean and recent iteration time (live/views.py's
    `iteration_figures`), the mean vs its SLO, measured profile."""
    t = Table(title="Jobs")
    for col in ("job", "status", "group", "iterations", "mean iter", "recent iter", "SLO iter", "within SLO",
                "measured rollout", "measured train", "host GB measured / declared", "holds"):
        t.add_column(col)
    for jid, j in status["jobs"].items():
        mean, slo = j["mean_iter_s"], j["slo_iter_s"]
        ok = "-" if mean is None or slo is None else ("yes" if mean <= slo else "[red]no[/]")
        measured = j["profile"]["measured"]
        state = j["status"] + (f" ({j['reason']})" if j.get("reason") else "")
        measuring = j["profile"].get("measuring")
        if measuring:  # submitted without phase times: measured as it runs, alone
            state += f" (measuring {measuring['iterations']}/{measuring['of']})"
        t.add_row(jid, state, "-" if j["group_id"] is None else str(j["group_id"]), str(j["iterations"]),
                  _s(mean), _s(j.get("recent_iter_s")), _s(slo), ok,
                  _s(measured.get(Phase.ROLLOUT)), _s(measured.get(Phase.TRAIN)),
                  _host(j.get("host_gb")), " ".join(j["held"]) or "-")
    return t


def _host(host: dict | None) -> str:
    """Host memory per pool as 'measured / declared', flagged when over the declaration."""
    if not host or not host["measured"]:
        return "-"
    cells = [f"{p[0]} {_g(host['measured'][p])}/{_g(host['declared'][p])}" for p in Pool if p in host["measured"]]
    return " ".join(cells) + (" [red]OVER[/]" if host["over_declaration"] else "")


def summary_line(status: dict) -> str:
    """Cost rate, permits, refusals, the journal, and why jobs were admitted alone."""
    line = (f"${status['cost_per_hour']:,.2f}/h held; {status['grants']} permits granted; "
            f"{status['refused']} requests refused; journal {status['journal']}")
    why = {k: v for k, v in status.get("placements_why", {}).items() if v}
    if why:
        line += (f"\n{status['isolated_placements']} admitted alone, why (nearest miss): "
                 + " · ".join(f"{k} {v}" for k, v in sorted(why.items(), key=lambda kv: -kv[1])))
    if status.get("rollout_nodes_compacted"):
        line += f"\n{status['rollout_nodes_compacted']} rollout nodes given back by compaction"
    return line
