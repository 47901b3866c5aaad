"""The service's node inventory (DESIGN §8): which machines the pools have, and which each placement uses.

A mixin of `SchedulerCore`. Nodes are reported by `node_up` / `node_down` (the Ray poller of
`watch_ray_inventory`, or an embedding program), each journaled as a `node` record: from the
first one on, each pool's capacity is its live nodes (an arrival that does not fit waits in
the queue, first come first served) and every placement's node indices are bound to those
nodes (`bind` records, live/nodemap.py), so the submit answer and every permit name the
machines (`node_ids`). After every scheduling decision the bindings are brought in line
(`_rebind`): a group that grew takes free nodes of its pool, one that shrank or left frees them,
a renumbering (a shrink, a compaction) keeps every surviving index on its machine.

A node that goes down leaves the inventory: the jobs bound to it are placed again (their
permits reclaimed, their next permit names the new nodes); one that comes up adds capacity and
serves the queue.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from rollmux.core.records import Bind, Node
from rollmux.live.nodemap import POOLS, NoCapacity, due
from rollmux.live.refusals import BadRequest

log = logging.getLogger("rollmux.inventory")

# The Ray custom resource that puts a node in a pool (the manifests' `rayStartParams.resources`).
POOL_RESOURCES = {"rollout_pool": "rollout", "train_pool": "train"}


def ray_inventory(nodes: list[dict]) -> dict[str, str]:
    """Alive Ray nodes with a pool resource (`ray.nodes()`'s entries) -> their pool."""
    out = {}
    for n in nodes:
        pools = [p for r, p in POOL_RESOURCES.items() if n.get("Resources", {}).get(r, 0) > 0]
        if n.get("Alive") and len(pools) == 1:
            out[n["NodeID"]] = pools[0]
    return out


class Inventory:
    """Node inventory and bindings (a mixin of SchedulerCore)."""

    state: Any
    _queue: Any
    _stopping: threading.Event
    _check_every: float

    def request(self, op: str, *args: Any) -> Any: ...
    def _record(self, record: Any) -> Any: ...
    def _move(self, job_id: str, why: str) -> Any: ...
    def _drain(self) -> None: ...

    # -- operations -----------------------------------------------------------------------------
    def _op_node_up(self, node_id: str, pool: str) -> None:
        """A node of `pool` is alive: capacity, then the queue."""
        if pool not in POOLS:
            raise BadRequest(f"node {node_id}: pool must be one of {', '.join(POOLS)}, not {pool!r}", "pool")
        if self.state.nodes.pool_of.get(node_id) == pool:
            return
        self._record(Node(node_id=node_id, pool=pool))
        self._drain()

    def _op_node_down(self, node_id: str) -> list[str]:
        """A node is gone: the jobs bound to it are placed again; returns them."""
        if node_id not in self.state.nodes.pool_of:
            return []
        hit = self._jobs_on(node_id)
        self._record(Node(node_id=node_id, pool=None))
        for jid in hit:
            self._move(jid, f"readmit: node {node_id} lost")
        self._drain()
        return hit

    def _jobs_on(self, node_id: str) -> list[str]:
        """Active jobs with a node index bound to `node_id` (a co-located job: its training nodes)."""
        cs, out = self.state.cluster, []
        for (gid, pool, idx), n in self.state.nodes.bound.items():
            if n != node_id:
                continue
            g = cs.groups.get(gid) or cs.colocated.get(gid)
            for m in () if g is None else g.members:
                on = m.rollout_nodes if pool == "rollout" else m.train_nodes
                if idx in on and self.state.jobs[m.job_id].active and m.job_id not in out:
                    out.append(m.job_id)
        return sorted(out)

    # -- bindings -------------------------------------------------------------------------------
    def _rebind(self) -> None:
        """Bring the bindings in line with the placements (module docstring), journaled."""
        st, cs = self.state, self.state.cluster
        groups = {gid: (g.n_rollout, g.n_train) for table in (cs.groups, cs.colocated) for gid, g in table.items()}
        renumbered = dict(cs.renumbered or {})
        for gid in due(st.nodes, groups, renumbered):
            if gid not in groups:
                plan = st.nodes.release(gid)
            else:
                remap = {"rollout": renumbered[gid]} if gid in renumbered else None
                try:
                    plan = st.nodes.plan(gid, dict(zip(POOLS, groups[gid])), remap)
                except NoCapacity as exc:  # a node was lost under it: bound when one frees or joins
                    log.warning("%s", exc)
                    continue
            if not plan:
                cs.renumbered.pop(gid, None)
            for b in plan:
                self._record(Bind(group_id=b.group_id, pool=b.pool, index=b.index, node_id=b.node_id))

    def placement_nodes(self, group_id: int, rollout: list[int], train: list[int]) -> dict | None:
        """A placement's node ids by pool (None without an inventory)."""
        if not self.state.inventory:
            return None
        return {"rollout": self.state.node_ids(group_id, "rollout", rollout),
                "train": self.state.node_ids(group_id, "train", train)}

    # -- the Ray poller ---------------------------------------------------------------------------
    def watch_ray_inventory(self) -> None:
        """Report the connected Ray cluster's pool nodes now, then poll for changes (a thread)."""
        import ray
        self._sync_inventory(ray_inventory(ray.nodes()))
        threading.Thread(target=self._poll_ray_inventory, name="rollmux-ray-inventory", daemon=True).start()

    def _poll_ray_inventory(self) -> None:
        import ray
        while not self._stopping.wait(self._check_every):
            try:
                seen = ray_inventory(ray.nodes())
            except Exception:  # noqa: BLE001 -- GCS briefly unreachable: ask again next time
                continue
            self._sync_inventory(seen)

    def _sync_inventory(self, seen: dict[str, str]) -> None:
        """Report what changed between the inventory and `seen` (node id -> pool)."""
        known = dict(self.state.nodes.pool_of)
        for node_id in sorted(set(known) - set(seen)):
            log.warning("node %s (%s) lost", node_id, known[node_id])
            self.request("node_down", node_id).result()
        for node_id in sorted(set(seen) - set(known)):
            self.request("node_up", node_id, seen[node_id]).result()
