"""Fixtures shared by several test modules: a real redis-server the tests start themselves."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest
import redis


@pytest.fixture(scope="session")
def redis_port():
    """A throwaway redis-server on a free loopback port, shared by the session's tests."""
    binary = shutil.which("redis-server")
    if binary is None:  # fail, never skip: `make test` installs it
        pytest.fail("redis-server not found on PATH; install it (apt-get install redis-server) "
                    "or run `make test`, which does")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--daemonize", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"redis-server did not answer PING on port {port}")
            time.sleep(0.02)
    client.close()
    yield port
    proc.terminate()
    proc.wait(timeout=10)
