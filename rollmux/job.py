"""`rollmux.init`: the job's context, from its arguments or from the environment `rollmux run` sets.

`rollmux.init(job_id, client, ...)` is the shim's (rollmux/shim.py). Called without them, the
job was launched by `rollmux run` (rollmux/cli/launch.py): the service URL, the job id and its
token file are in the environment, and the client acting for the job is built from them
(rollmux/live/client.py `from_env`). This module sits above both, so neither imports the other.
"""

from __future__ import annotations

from rollmux import shim
from rollmux.live.client import JOB_ENV, from_env

__all__ = ["JOB_ENV", "init"]


def init(job_id: str | None = None, client: shim.PermitClient | None = None, **hooks) -> shim.JobShim:
    """The shim's `init` for `job_id` and `client`, or, with neither, for the job the environment names
    (`hooks`: JobShim's, e.g. `job=obj` for a `rollmux.shim.Job`'s methods)."""
    if job_id is None and client is None:
        job_id, client = from_env()
    elif job_id is None or client is None:
        raise ValueError("rollmux.init: give both job_id and client, or neither (the environment's)")
    return shim.init(job_id, client, **hooks)
