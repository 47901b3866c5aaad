"""The scheduler's cluster state, shared by every executor: decide on a snapshot, then apply records.

- `cluster`: `ClusterState`, the groups, controllers and ledger, its decisions and the one table
  that applies them;
- `departures`: the departure-time repairs (dissolve, consolidate);
- `drift`: drift repair and rollout compaction;
- `shared`: what the repairs see of the state, and progress as the planner reads it for jobs
  planned with measured profiles.
"""

from rollmux.core.state.cluster import ClusterState, Commit, Decision

__all__ = ["ClusterState", "Commit", "Decision"]
