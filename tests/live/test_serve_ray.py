"""`rollmux serve --profile shipped --ray ADDRESS` (a child process) on a multi-raylet Ray cluster: the pool
nodes are its inventory, and the shipped profile places a job co-located and two in one group, each answer
naming the machines."""

from __future__ import annotations

import yaml
from ray.cluster_utils import Cluster

from rollmux.core.spec import default_cluster
from rollmux.live.client import HttpPermitClient
from rollmux.live.codec import live_job_record
from rollmux.live.local import ProcessServer

# The demo's scales (rollmux/harness/demo.py): a heavy rollout co-locates, a heavy training step founds a
# group, and a lighter job with a looser SLO packs into it.
# The demo's settings too: two worker slots per rollout node (a migrated tail keeps one), and aborting
# stragglers costs milliseconds at these scales.
SETS = ["--set", "intra_group.tail_worker_frac=0.5", "--set", "intra_group.migration_overhead_s=0.02"]
JOBS = {"heavy": (0.151, 0.104, 0.5, 2.0), "large": (0.010, 0.235, 0.0, 2.0), "mate": (0.100, 0.060, 0.0, 3.0)}


def test_serve_shipped_with_ray_places_a_colocated_and_a_grouped_job(tmp_path):
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    rollouts = [cluster.add_node(num_cpus=1, resources={"rollout_pool": 1}) for _ in range(2)]
    trains = [cluster.add_node(num_cpus=1, resources={"train_pool": 1}) for _ in range(3)]
    cluster.wait_for_nodes()
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump({**default_cluster().model_dump(), "warm_switch_s": 0.005,
                                    "cold_switch_s": 8.0}))
    server = ProcessServer(str(tmp_path / "journal.db"), tmp_path, cluster=spec, profile="shipped",
                           extra=["--ray", cluster.address, "--no-repair", *SETS])
    try:
        admin = HttpPermitClient(server.url, admin_token=server.admin_token)
        got = {j: admin.submit(live_job_record(j, r, t, slo, tail_frac=tail))
               for j, (r, t, tail, slo) in JOBS.items()}
        assert got["heavy"]["mode"] == "colocated" and got["heavy"]["node_ids"]["rollout"] == []
        assert got["heavy"]["node_ids"]["train"][0] in {n.node_id for n in trains}
        assert got["large"]["mode"] == got["mate"]["mode"] == "disaggregated"
        assert got["mate"]["group_id"] == got["large"]["group_id"] and got["mate"]["case"] == "direct_packing"
        assert got["mate"]["node_ids"] == got["large"]["node_ids"]  # one group: the same machines
        assert got["large"]["node_ids"]["rollout"][0] in {n.node_id for n in rollouts}
        assert got["large"]["node_ids"]["train"][0] in {n.node_id for n in trains} - set(
            got["heavy"]["node_ids"]["train"])
        admin.close()
    finally:
        server.signal()
        cluster.shutdown()
