"""Scenarios of `rollmux chaos` at the door (live/door.py): huge request headers and half-open connections
from other clients while a tenant's heartbeats are timed."""

from __future__ import annotations

import resource

from rollmux.harness.chaos.run import SERVE_ARGS, Run
from rollmux.harness.door_load import Prober, flood, half_open

HEADER_TIMEOUT_S = 2.0   # the scenario's server: --header-timeout
FLOODS, FLOOD_MB = 4, 48  # concurrent huge-header connections, each header's size (MB)
FLOOD_S = 4.0            # how long the floods go on
HALF_OPEN = 200          # half-open connections
P99_LIMIT_MS = 1000.0    # the co-tenant's heartbeat p99 under the floods


def header_flood(run: Run) -> None:
    """Four 48 MB header floods, then half-open connections, against a server whose heartbeat timeout
    is 2 s: the co-tenant's heartbeat p99 stays under 1 s, it is not failed, and every half-open
    connection is closed by the server within its header timeout (plus scheduling slack)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, HALF_OPEN + 512)), hard))
    srv = run.own_server("door", SERVE_ARGS + ["--header-timeout", f"{HEADER_TIMEOUT_S:g}"])
    tenant, placed = run.submit("door-tenant", heartbeat=False)
    probe = Prober(srv.url, placed["token"], "door-tenant")
    try:
        probe.phase = "flood"
        flooded = flood(srv.port, FLOODS, FLOOD_MB, FLOOD_S)
        probe.phase = "half_open"
        halves = half_open(srv.port, HALF_OPEN, HEADER_TIMEOUT_S * 3 + 30)
    finally:
        probe.stop.set()
        probe.thread.join()
        probe.http.close()
    beats = probe.summary("flood")
    status = run.status()["jobs"]["door-tenant"]["status"]
    tenant.finish("door-tenant")  # its work here is done: it leaves as a finished job
    run.extras.update(floods=flooded["floods"], flood_mb=FLOOD_MB, heartbeat_flood=beats,
                      heartbeat_half_open=probe.summary("half_open"), half_open=halves, tenant_status=status)
    run.check(beats.get("beats", 0) > 0 and beats["p99_ms"] < P99_LIMIT_MS,
              f"the co-tenant's heartbeat under {FLOODS} floods: {beats} (p99 limit {P99_LIMIT_MS:g} ms)")
    run.check(beats.get("errors", 0) == 0, f"the co-tenant's heartbeats failed under the floods: {beats}")
    run.check(status == "running", f"the co-tenant is {status} after the floods: wanted running")
    run.check(halves["closed_by_server"] == HALF_OPEN,
              f"the server closed {halves['closed_by_server']} of {HALF_OPEN} half-open connections")
    run.check(halves["slowest_close_s"] <= HEADER_TIMEOUT_S + 5,
              f"the slowest half-open connection was closed after {halves['slowest_close_s']} s "
              f"(header timeout {HEADER_TIMEOUT_S:g} s)")
