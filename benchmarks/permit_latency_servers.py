"""The servers of benchmarks/permit_latency.py: one fresh scheduler per scenario, as a child
process (`rollmux serve --store FRESH.db`, or for no journal `permit_latency.py --serve-memory`)
or as a thread of the benchmark's process, each with telemetry and an hour's heartbeat timeout
and minimum lease.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rollmux.core.spec import default_cluster
from rollmux.live.door import DoorLimits
from rollmux.live.local import ProcessServer, ThreadServer, free_port, wait_until_up

HOUR = 3600.0
# The waiting scenario holds --waiting long polls from this one address: no per-client connection cap.
SERVER_FLAGS = ["--heartbeat-timeout", str(HOUR), "--lease-min", str(HOUR), "--max-connections-per-client", "0"]
DOOR = DoorLimits(max_conns_per_client=0)
SCRIPT = Path(__file__).resolve().with_name("permit_latency.py")  # its `--serve-memory` runs `serve_memory`

def _telemetry_core(store: str | None, token: str) -> tuple[Any, Any]:
    """The core as `rollmux serve` builds it (telemetry on), with the benchmark's long timeouts."""
    from rollmux.live.service import SchedulerCore
    from rollmux.live.telemetry import Telemetry
    holder: dict = {}
    telemetry = Telemetry(lambda: holder["core"].request("metrics").result(timeout=10))
    holder["core"] = SchedulerCore(default_cluster().model_dump(), store=store, heartbeat_timeout_s=HOUR,
                                   admin_token=token, lease_min_s=HOUR, telemetry=telemetry)
    return holder["core"], telemetry


def serve_memory(listen: str, token_file: str) -> None:
    """Child process of `--store memory`: `rollmux serve` without a journal."""
    import logging

    from rollmux.live.server import admin_token, parse_listen, serve
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    core, telemetry = _telemetry_core(None, admin_token(Path(token_file)))
    serve(core, parse_listen(listen), telemetry, door=DOOR)


class _MemoryProcessServer:
    """A child process serving a core without a journal (`serve_memory`), like `ProcessServer`."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token_file = workdir / "admin.token"
        self._log = open(workdir / f"serve-{self.port}.log", "ab")
        self.proc = subprocess.Popen([sys.executable, str(SCRIPT), "--serve-memory",
                                      f"127.0.0.1:{self.port}", str(self.token_file)],
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        wait_until_up(self.url, proc=self.proc)

    @property
    def admin_token(self) -> str:
        """The admin token the child created."""
        return self.token_file.read_text().strip()

    def signal(self) -> int:
        """SIGTERM and wait."""
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=30)
        finally:
            self._log.close()


@dataclass
class Server:
    """One scheduler server for one scenario: its URL, admin token and (child) pid."""

    url: str
    admin_token: str
    pid: int | None
    stop: Callable[[], Any]

    def cpu_s(self) -> float | None:
        """CPU seconds (user + system) the server process has used, or None in thread mode."""
        return _proc_cpu_s(self.pid) if self.pid is not None else None


def start_server(kind: str, store: str) -> Server:
    """A fresh server (`process` or `thread`) with a fresh journal (`sqlite`) or none (`memory`)."""
    workdir = Path(tempfile.mkdtemp(prefix="rollmux-permit-bench-"))
    journal = str(workdir / "journal.db") if store == "sqlite" else None

    def stopper(stop: Callable[[], Any]) -> Callable[[], None]:
        def both() -> None:
            try:
                stop()
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
        return both
    if kind == "thread":
        token = "bench-admin-" + os.urandom(16).hex()
        core, telemetry = _telemetry_core(journal, token)
        ts = ThreadServer(core, telemetry, door=DOOR)
        return Server(ts.url, token, None, stopper(ts.stop))
    ps = ProcessServer(journal, workdir, extra=SERVER_FLAGS) if journal else _MemoryProcessServer(workdir)
    return Server(ps.url, ps.admin_token, ps.proc.pid, stopper(ps.signal))


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

