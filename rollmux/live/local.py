"""A scheduler server on this machine, for the demo, chaos runs, benchmarks and tests.

`ThreadServer` serves a `SchedulerCore` from a thread of this process (fast to
start; the core stays inspectable). `ProcessServer` runs `rollmux serve` as a
child process, as an operator would (so it can be SIGTERMed or `kill -9`ed).
Both listen on loopback and wait for the server to answer before returning.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from rollmux.live.door import DoorLimits
from rollmux.live.server import Listen, build_server
from rollmux.live.service import EMBEDDED_PROFILE, SchedulerCore


def free_port() -> int:
    """A TCP port on loopback nobody listens on (now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, timeout_s: float = 60.0, proc: subprocess.Popen | None = None,
                  verify: bool | str = True) -> None:
    """Return once `url`/healthz answers; RuntimeError if it does not within `timeout_s` (or the process dies)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"rollmux serve exited with {proc.returncode} before answering")
        try:
            httpx.get(f"{url}/healthz", timeout=2.0,
                      verify=ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify)
            return
        except httpx.HTTPError:
            time.sleep(0.05)  # the server is still starting: poll again (start-up, not a test condition)
    raise RuntimeError(f"no rollmux server answered at {url} within {timeout_s:g}s")


class ThreadServer:
    """Serve `core` on a free loopback port from a daemon thread; `stop()` ends both."""

    def __init__(self, core: SchedulerCore, telemetry: Any = None, door: DoorLimits | None = None) -> None:
        """`door`: the limits at its door (default: `rollmux serve`'s)."""
        self.core = core
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = build_server(core, Listen("127.0.0.1", self.port), telemetry, door=door)
        self._thread = threading.Thread(target=self._server.run, name="rollmux-http", daemon=True)
        self._thread.start()
        wait_until_up(self.url)

    def stop(self) -> None:
        """Stop serving and shut the core down."""
        self.core.request("stop_waiting")
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self.core.shutdown()

    def __enter__(self) -> "ThreadServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class ProcessServer:
    """`rollmux serve` as a child process on a free loopback port."""

    def __init__(self, store: str, workdir: Path, cluster: Path | None = None, extra: list[str] | None = None,
                 port: int | None = None, tls: tuple[Path, Path] | None = None,
                 profile: str | None = EMBEDDED_PROFILE) -> None:
        """`profile`: the named configuration it serves (default: the one programs embedding the
        service run, as `SchedulerCore` does; None: `rollmux serve`'s own default, shipped)."""
        self.port = port or free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.token_file = workdir / "admin.token"
        self.log_path = workdir / f"serve-{self.port}.log"
        cmd = [sys.executable, "-m", "rollmux.cli", "serve", "--listen", f"127.0.0.1:{self.port}",
               "--store", store, "--admin-token-file", str(self.token_file)]
        if cluster is not None:
            cmd += ["--cluster", str(cluster)]
        if profile is not None:
            cmd += ["--profile", profile]
        if tls is not None:
            cmd += ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])]
        self.cmd = cmd + (extra or [])
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            wait_until_up(self.url, proc=self.proc, verify=str(tls[0]) if tls else True)
        except RuntimeError:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=30)
            self._log.close()
            raise

    @property
    def admin_token(self) -> str:
        """The admin token the server created."""
        return self.token_file.read_text().strip()

    def signal(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        """Send `sig` and wait for the process to exit; its exit code."""
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout_s)
        finally:
            self._log.close()

    def kill(self) -> int:
        """kill -9."""
        return self.signal(signal.SIGKILL)

    def output(self) -> str:
        """What the server printed."""
        return self.log_path.read_text(errors="replace")
