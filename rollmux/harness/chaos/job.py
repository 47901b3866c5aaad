"""A synthetic job for `rollmux chaos`: rollout -> train with tiny sleeps, behind the job shim.

The same loop runs in a driver thread (`run_job`) or as a process of its own

    python -m rollmux.harness.chaos.job --url http://127.0.0.1:PORT --job-id ID --log-dir DIR ...

that talks to the scheduler's HTTP API only through `HttpPermitClient`, sends heartbeats
and can be SIGKILLed mid-phase (`--hold-phase`/`--hold-iter` park it inside one phase
until it is killed). Its launcher (the chaos driver, holding the admin token) submits it:
the process logs `ready`, then reads one JSON line on stdin, the server's answer to the
submission (`token`, `group_id`, `case`, ...), so the job's token is never on a command
line or in the environment, and the job's first call follows its submission at once.

Phase log: one JSONL file per job and process, `{job}-{pid}-{n}.jsonl`. An `ask` line is
written before each permit is asked for; a `start` line once the permit is granted, with
where it put the job (group, pool, group-local node indices, placement epoch) and how long
the acquire took; the `end` line when the phase's work is over, before the permit is
released. Times are `time.monotonic()`, one clock for every process on the host. The
iteration counter is checkpointed after every iteration, so a restarted job resumes from
its last checkpoint.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from rollmux.live.codec import live_job_record
from rollmux.shim import ITERATION, JobShim

_files = itertools.count()


def job_record(job_id: str, phase_s: float, slo: float = 5.0) -> dict:
    """A synthetic job's profile as it runs: `phase_s` per phase, 1 ms sync, one node per pool, an hour
    of work (SLO 5 on the chaos cluster: up to 5 share a group; SLO 1: nobody joins it)."""
    return live_job_record(job_id, phase_s, phase_s, slo)


class PhaseLog:
    """Append-only JSONL log of one job's phases in this process (flushed line by line)."""

    def __init__(self, log_dir: Path, job_id: str) -> None:
        self.job_id, self.pid = job_id, os.getpid()
        self.path = Path(log_dir) / f"{job_id}-{self.pid}-{next(_files)}.jsonl"
        self._f = open(self.path, "a")
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def event(self, ev: str, **fields: Any) -> None:
        """Write one line: {"ev", "job", "pid", "file", "t", **fields}."""
        line = {"ev": ev, "job": self.job_id, "pid": self.pid, "file": self.path.name,
                "t": time.monotonic(), **fields}
        with self._lock:
            self._f.write(json.dumps(line) + "\n")
            self._f.flush()

    def start(self, grant: Any, iteration: int, wait_s: float) -> int:
        """A phase began under this permit (a `Grant` or the service's dict); returns its seq."""
        g = grant if isinstance(grant, dict) else asdict(grant)
        seq = next(self._seq)
        self.event("start", seq=seq, phase=g["phase"], group_id=g["group_id"], pool=g["pool"],
                   nodes=list(g["nodes"]), epoch=g.get("epoch", 0), iter=iteration, wait_s=wait_s)
        return seq

    def end(self, seq: int) -> None:
        """The phase `seq` is over (its permit is released right after)."""
        self.event("end", seq=seq)

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._f.close()


def load_checkpoint(path: Path | None) -> int:
    """Iterations done at the last checkpoint (0 without one)."""
    if path is None or not Path(path).exists():
        return 0
    return int(json.loads(Path(path).read_text())["iterations"])


def save_checkpoint(path: Path, iterations: int) -> None:
    """Atomically record the iterations done."""
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps({"iterations": iterations}))
    os.replace(tmp, path)


def run_job(client: Any, job_id: str, log: PhaseLog, keep_going: Callable[[int], bool], phase_s: float,
            start_iter: int = 0, checkpoint: Path | None = None,
            hold: Callable[[int, str], None] | None = None) -> int:
    """Iterate rollout -> train while `keep_going(iterations done)`; returns the iterations done.

    `hold(iteration, phase)` runs inside every phase, after its start line (scenarios park a job there).
    """
    shim = JobShim(job_id, client)
    it = start_iter
    while keep_going(it):
        for phase in ITERATION:
            log.event("ask", phase=phase, iter=it)
            asked = time.monotonic()
            with shim.phase(phase) as grant:
                seq = log.start(grant, it, time.monotonic() - asked)
                if hold is not None:
                    hold(it, phase)
                time.sleep(phase_s)
                log.end(seq)
        it += 1
        if checkpoint is not None:
            save_checkpoint(checkpoint, it)
    return it


def main(argv: list[str] | None = None) -> int:
    """Run one synthetic job as its own process (see the module docstring); exit status 0 when done."""
    ap = argparse.ArgumentParser(description="A synthetic job for `rollmux chaos`.")
    ap.add_argument("--url", required=True, help="the scheduler's HTTP API, e.g. http://127.0.0.1:8470")
    ap.add_argument("--job-id", required=True)
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--phase-ms", type=float, default=5.0)
    ap.add_argument("--log-dir", type=Path, required=True)
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--heartbeat-s", type=float, default=0.5)
    ap.add_argument("--hold-phase", choices=ITERATION, default=None, help="park inside this phase ...")
    ap.add_argument("--hold-iter", type=int, default=0, help="... of this iteration, until killed")
    args = ap.parse_args(argv)

    from rollmux.live.client import HttpPermitClient

    log = PhaseLog(args.log_dir, args.job_id)
    client = None
    try:
        log.event("ready")
        line = sys.stdin.readline()
        if not line.strip():
            raise RuntimeError("no submission on stdin (the launcher gave up?)")
        placed = json.loads(line)
        client = HttpPermitClient(args.url, heartbeat_s=args.heartbeat_s)
        client.register(args.job_id, placed["token"])
        start = load_checkpoint(args.checkpoint)
        log.event("submitted", resumed_from=start, group_id=placed["group_id"], status=placed["status"],
                  epoch=placed["epoch"], case=placed.get("case"))

        def hold(it: int, phase: str) -> None:
            if it == args.hold_iter and phase == args.hold_phase:
                log.event("holding", iter=it, phase=phase)
                time.sleep(3600)  # until SIGKILL

        done = run_job(client, args.job_id, log, lambda it: it < args.iterations, args.phase_ms / 1e3,
                       start, args.checkpoint, hold if args.hold_phase else None)
        client.finish(args.job_id)
        log.event("finished", iterations=done, resumed_from=start)
        return 0
    except Exception as exc:  # noqa: BLE001 -- reported to the driver through the log
        log.event("error", error=repr(exc), detail=traceback.format_exc()[-4000:] + str(exc)[-4000:])
        return 1
    finally:
        if client is not None:
            client.close()
        log.close()


if __name__ == "__main__":
    raise SystemExit(main())
