"""Another tenant's heartbeat while clients flood `rollmux serve` with huge headers and half-open connections.

    .venv/bin/python benchmarks/header_flood.py [--floods 4] [--megabytes 48] [--flood-seconds 20]
           [--half-open 1000] [--header-timeout 10] [--json OUT]

One `rollmux serve` child process (a fresh SQLite journal, its default door: live/door.py) and one
submitted tenant job, whose heartbeat (`POST /v1/jobs/tenant/heartbeat`, keep-alive) is sent every
0.1 s and timed throughout. Phases:

  quiet      5 s of heartbeats alone (the baseline).
  flood      --floods connections at once, each sending `GET /metrics` with a --megabytes MB header
             (1 MiB writes); when the server closes one, it connects and starts over, for
             --flood-seconds. Reported: floods started, the most header bytes one of them got
             written before the server closed it, and what the server answered (431 or a reset).
  half-open  --half-open connections each send half a request (`GET /metrics HTTP/1.1` and one
             header, never the empty line that ends the head) and wait; reported: how many the
             server closed, and the slowest close after the half request (the header timeout
             bounds it).

Heartbeat p50/p99/max are reported per phase, and the tenant job's status at the end (it must
still be running: nobody was failed for missed heartbeats).
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import httpx

from rollmux.harness.door_load import Prober, flood, half_open
from rollmux.live.local import ProcessServer


def _job() -> dict:
    """The tenant: a small job the default cluster places at once."""
    from rollmux.core.spec import JobSpec
    fields = {"job_id": "tenant", "arrival_s": 0, "duration_s": 3600, "slo": 2.0, "model": "bench",
              "rollout_gpus": 8, "train_gpus": 8, "rollout_s": {"median": 100.0, "sigma": 0.1, "max": 120.0},
              "tail_frac": 0.3, "train_s": 100.0, "sync_s": 5.0, "host_gb": {"rollout": 10.0, "train": 10.0}}
    return JobSpec.model_validate(fields).model_dump(exclude_none=True)


def run(floods: int, megabytes: int, flood_s: float, half: int, header_timeout: float) -> dict:
    """Every phase against one fresh server; the report."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, half + 512)), hard))
    workdir = Path(tempfile.mkdtemp(prefix="rollmux-flood-"))
    server = ProcessServer(str(workdir / "journal.db"), workdir, extra=["--header-timeout", str(header_timeout)])
    admin = httpx.Client(base_url=server.url, timeout=60, headers={"Authorization": f"Bearer {server.admin_token}"})
    try:
        placed = admin.post("/v1/jobs", json=_job())
        placed.raise_for_status()
        probe = Prober(server.url, placed.json()["token"])
        time.sleep(5.0)  # the quiet window's length
        probe.phase = "flood"
        flooded = flood(server.port, floods, megabytes, flood_s)
        probe.phase = "half_open"
        halves = half_open(server.port, half, header_timeout * 3 + 30)
        probe.phase = "after"
        time.sleep(1.0)  # a few beats after the last phase
        probe.stop.set()
        probe.thread.join()
        status = admin.get("/v1/jobs/tenant").json()["status"]
        return {"config": {"floods": floods, "megabytes": megabytes, "flood_seconds": flood_s, "half_open": half,
                           "header_timeout_s": header_timeout},
                "heartbeat": {p: probe.summary(p) for p in ("quiet", "flood", "half_open", "after")},
                "flood": flooded, "half_open": halves, "tenant_status": status}
    finally:
        admin.close()
        server.signal()


def main() -> None:
    """Command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--floods", type=int, default=4, help="concurrent huge-header connections (default 4)")
    ap.add_argument("--megabytes", type=int, default=48, help="header size per flood, MB (default 48)")
    ap.add_argument("--flood-seconds", type=float, default=20.0, help="flood phase length (default 20)")
    ap.add_argument("--half-open", type=int, default=1000, help="half-open connections (default 1000)")
    ap.add_argument("--header-timeout", type=float, default=10.0, help="the server's --header-timeout (default 10)")
    ap.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = ap.parse_args()
    report = run(args.floods, args.megabytes, args.flood_seconds, args.half_open, args.header_timeout)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
