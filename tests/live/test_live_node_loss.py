"""A Ray node lost from the cluster: the jobs whose workers ran there are re-admitted."""

from __future__ import annotations

import time

import ray
from factories import make_job
from ray.cluster_utils import Cluster

from rollmux.core.spec import default_cluster
from rollmux.live.client import HttpPermitClient
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore

ADMIN_TOKEN = "admin-token-for-tests-0123456789"


@ray.remote(num_cpus=0)
class _Worker:
    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()


def test_removing_a_ray_node_readmits_the_jobs_with_workers_on_it(tmp_path):
    cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, include_dashboard=False))
    victim = cluster.add_node(num_cpus=1, resources={"rollout_node_0": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="rollmux-node-loss", log_to_driver=False)
    try:
        head = next(n["NodeID"] for n in ray.nodes() if "node:__internal_head__" in n["Resources"])
        # Single-cluster mode: the server process watches the jobs' Ray cluster for dead nodes.
        core = SchedulerCore(default_cluster().model_dump(), store=str(tmp_path / "journal.db"),
                             admin_token=ADMIN_TOKEN, watch_ray_nodes=True, check_every_s=0.2)
        server = ThreadServer(core)
        client = HttpPermitClient(server.url, admin_token=ADMIN_TOKEN)
        jobs = [make_job(j, rollout=100, train=100).model_dump(exclude_none=True) for j in "ab"]
        for r in jobs:
            client.submit(r)
        worker = _Worker.options(resources={"rollout_node_0": 0.01}).remote()
        client.set_nodes("a", [ray.get(worker.node.remote())])
        client.set_nodes("b", [head])  # b's workers run on the head
        held = client.acquire_dict("a", "rollout")
        cluster.remove_node(victim)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status = client.status()
            if status["jobs"]["a"]["epoch"] > held["epoch"]:
                break
            time.sleep(0.2)
        assert status["jobs"]["a"]["epoch"] == held["epoch"] + 1  # placed again, like a new arrival
        assert status["jobs"]["a"]["held"] == [] and status["jobs"]["a"]["status"] == "running"
        assert status["jobs"]["b"]["epoch"] == 1  # untouched
        client.close()
        server.stop()
    finally:
        ray.shutdown()
        cluster.shutdown()
