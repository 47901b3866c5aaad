"""A job `rollmux run` launches in the tests: one iteration, each phase's worker pinned by the shim.

It reads its credentials with `rollmux.init()` (the environment `rollmux run` set), connects to
the Ray cluster of RAY_ADDRESS, runs one Ray task per phase on the node its permit names, and
writes, per phase, the node named and the node the task ran on to the JSON file OUT.
"""

import json
import os

import ray

import rollmux

ray.init(log_to_driver=False)


@ray.remote(num_cpus=0)
def where() -> str:
    return ray.get_runtime_context().get_node_id()


shim = rollmux.init()
seen = {"argv": os.sys.argv[1:]}
for phase in ("rollout", "train"):
    with rollmux.phase(phase):
        (strategy,) = shim.node_strategies()
        ran = ray.get(where.options(scheduling_strategy=strategy).remote())
        seen[phase] = {"named": shim.grant.node_ids[0], "ran": ran}
shim.client.finish(shim.job_id)
with open(os.environ["OUT"], "w") as f:
    json.dump(seen, f)
