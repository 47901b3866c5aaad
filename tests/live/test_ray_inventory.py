"""`serve --ray`'s inventory on a multi-raylet Ray cluster (rollmux/live/inventory.py): the pools'
nodes are the machines placements name, and a node removed places its jobs again."""

from __future__ import annotations

import time

import ray
from ray.cluster_utils import Cluster

from rollmux.core.spec import default_cluster
from rollmux.live.client import _grant
from rollmux.live.service import SchedulerCore
from rollmux.shim import JobShim, PhaseTimings
from factories import make_job


class _InProcess:
    """The shim's permit client over an in-process core (one job, its token)."""

    def __init__(self, core: SchedulerCore, token: str) -> None:
        self.core, self.token = core, token

    def acquire(self, job_id: str, phase: str):
        return _grant(self.core.acquire(job_id, phase, self.token))

    def tail_started(self, job_id: str) -> None:
        self.core.tail_started(job_id, self.token)

    def release(self, t: PhaseTimings) -> None:
        self.core.release(t.job_id, t.phase, {"wait_s": t.wait_s, "onload_s": t.onload_s, "run_s": t.run_s,
                                              "offload_s": t.offload_s}, self.token)


@ray.remote(num_cpus=0)
def _where() -> str:
    return ray.get_runtime_context().get_node_id()


def _wait(pred, what: str, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_pool_nodes_are_the_inventory_and_a_removed_one_moves_its_job():
    cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, include_dashboard=False))
    rollout = cluster.add_node(num_cpus=1, resources={"rollout_pool": 1})
    trains = [cluster.add_node(num_cpus=1, resources={"train_pool": 1}) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="rollmux-inventory", log_to_driver=False)
    core = SchedulerCore(default_cluster().model_dump(), check_every_s=0.2)
    try:
        core.watch_ray_inventory()
        ids = {n.node_id: n for n in (rollout, *trains)}
        assert core.state.nodes.capacity("rollout") == 1 and core.state.nodes.capacity("train") == 2
        got = core.submit(make_job("a", rollout=100.0, train=100.0, slo=1.0).model_dump(exclude_none=True))
        (r_id,), (t_id,) = got["node_ids"]["rollout"], got["node_ids"]["train"]
        assert r_id == rollout.node_id and t_id in ids
        # The shim pins the phase's workers to the nodes its permit names: they run there.
        shim = JobShim("a", _InProcess(core, got["token"]))
        for phase, want in (("rollout", r_id), ("train", t_id)):
            with shim.phase(phase):
                (strategy,) = shim.node_strategies()
                assert ray.get(_where.options(scheduling_strategy=strategy).remote(), timeout=60) == want
        cluster.remove_node(ids[t_id])
        moved = _wait(lambda: core.request("job", "<admin>", "a").result().get("node_ids"), "a placed again")
        _wait(lambda: core.state.jobs["a"].epoch == 2, "a's second placement")
        moved = core.request("job", "<admin>", "a").result()["node_ids"]
        assert moved["train"] != [t_id] and moved["train"][0] in ids and core.state.nodes.capacity("train") == 1
    finally:
        core.shutdown()
        ray.shutdown()
        cluster.shutdown()
