"""Starting a throwaway redis-server for tests: the binary (fail, never skip), and a start that
waits for the server's PING."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
import redis


def redis_binary() -> str:
    """The redis-server on PATH; the test fails without one (`make test` installs it)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server not found on PATH; install it (apt-get install redis-server) "
                    "or run `make test`, which does")
    return binary


def start_redis(argv: list[str], port: int, password: str | None = None) -> subprocess.Popen:
    """Run redis-server with `argv` and wait until it answers PING on `port` (10 s, else the test fails)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port, password=password)
    deadline = time.monotonic() + 10
    try:
        while True:
            try:
                client.ping()
                return proc
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    pytest.fail(f"redis-server did not answer PING on port {port}")
                time.sleep(0.02)  # the server is still starting (start-up, not a test condition)
    finally:
        client.close()
