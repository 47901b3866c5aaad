"""`rollmux run --local` (rollmux/cli/launch.py) on a multi-raylet Ray cluster: two jobs launched, each
phase's worker on the node its permit names, credentials through the environment only."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import ray
import yaml
from ray.cluster_utils import Cluster

from rollmux.core.spec import default_cluster
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore
from factories import make_job

ADMIN_TOKEN = "admin-token-for-tests-0123456789"
JOB = Path(__file__).parent / "data" / "pinned_job.py"


def test_two_jobs_launched_run_each_phase_on_the_node_their_permit_names(tmp_path):
    cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, include_dashboard=False))
    nodes = [cluster.add_node(num_cpus=1, resources={pool: 1}) for pool in ("rollout_pool", "rollout_pool",
                                                                            "train_pool", "train_pool")]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="rollmux-run", log_to_driver=False)
    core = SchedulerCore(default_cluster().model_dump(), admin_token=ADMIN_TOKEN, check_every_s=0.2)
    server = ThreadServer(core)
    try:
        core.watch_ray_inventory()
        (tmp_path / "admin.token").write_text(ADMIN_TOKEN)
        (tmp_path / "admin.token").chmod(0o600)
        procs = {}
        for j in ("a", "b"):  # SLO 1: each its own group, one node of each pool
            (tmp_path / f"{j}.yaml").write_text(yaml.safe_dump(
                make_job(j, rollout=100.0, train=100.0, slo=1.0).model_dump(exclude_none=True)))
            env = {**os.environ, "RAY_ADDRESS": cluster.address, "OUT": str(tmp_path / f"{j}.json")}
            procs[j] = subprocess.Popen(
                [sys.executable, "-m", "rollmux.cli", "run", str(tmp_path / f"{j}.yaml"), "--url", server.url,
                 "--admin-token-file", str(tmp_path / "admin.token"), "--token-dir", str(tmp_path / "tokens"),
                 "--local", "--", sys.executable, str(JOB), "--visible-arg"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ran = {}
        for j, p in procs.items():
            stdout, stderr = p.communicate(timeout=240)
            assert p.returncode == 0, stderr[-2000:]
            ran[j] = json.loads((tmp_path / f"{j}.json").read_text())
            token_file = tmp_path / "tokens" / f"{j}.token"
            assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
            assert token_file.read_text().strip() not in stdout + stderr  # printed nowhere
            assert ran[j]["argv"] == ["--visible-arg"]  # the token is not on its command line
        ids = {n.node_id for n in nodes}
        for j in ran:
            for phase in ("rollout", "train"):
                assert ran[j][phase]["ran"] == ran[j][phase]["named"] in ids
        assert {ran["a"]["rollout"]["named"], ran["b"]["rollout"]["named"]} == {nodes[0].node_id, nodes[1].node_id}
        assert core.state.jobs["a"].status == core.state.jobs["b"].status == "done"
    finally:
        server.stop()
        ray.shutdown()
        cluster.shutdown()
