"""The Redis password of `rollmux serve` comes from a file or the environment, never its command line:
a real redis-server that requires a password, and `rollmux serve` children; the password is in no
process's argv (what `ps` shows every user) and in nothing the server prints."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from factories import make_job
from redis_server import redis_binary, start_redis

from rollmux.live.journal.redis import PASSWORD_ENV
from rollmux.live.local import ProcessServer, free_port

PASSWORD = secrets.token_hex(24)


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory):
    """A redis-server on loopback whose password is in its config file (not its argv): its port."""
    work = tmp_path_factory.mktemp("locked-redis")
    port = free_port()
    conf = work / "redis.conf"
    conf.write_text(f'port {port}\nbind 127.0.0.1\nsave ""\nappendonly no\ndir {work}\nrequirepass "{PASSWORD}"\n')
    conf.chmod(0o600)
    proc = start_redis([redis_binary(), str(conf)], port, PASSWORD)
    yield port
    proc.terminate()
    proc.wait(timeout=10)


def _store(port: int) -> str:
    return f"redis://127.0.0.1:{port}/0?prefix=secrets-{uuid.uuid4().hex}"


def _password_file(path: Path) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(PASSWORD + "\n")
    return path


def _argv_of_every_process() -> str:
    """Every process's command line, as `ps` shows them to any user."""
    return subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout


def _journal_works(server: ProcessServer) -> None:
    """A submission is journaled (so the server authenticated to Redis) and answered 201."""
    job = make_job("secret-job", rollout=100, train=100, slo=2.0).model_dump(exclude_none=True)
    r = httpx.post(f"{server.url}/v1/jobs", json=job, headers={"Authorization": f"Bearer {server.admin_token}"},
                   timeout=30)
    assert r.status_code == 201, r.text


def test_serve_reads_the_redis_password_from_a_file_and_never_shows_it(locked_redis, tmp_path):
    pw_file = _password_file(tmp_path / "redis.password")
    server = ProcessServer(_store(locked_redis), tmp_path, extra=["--redis-password-file", str(pw_file)])
    try:
        _journal_works(server)
        cmdline = Path(f"/proc/{server.proc.pid}/cmdline").read_bytes().decode()
        assert PASSWORD not in cmdline and PASSWORD not in _argv_of_every_process()
    finally:
        assert server.signal() == 0
    assert PASSWORD not in server.output() and "journal redis://127.0.0.1" in server.output()


def test_serve_reads_the_redis_password_from_the_environment(locked_redis, tmp_path, monkeypatch):
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)  # ProcessServer's child inherits this process's environment
    server = ProcessServer(_store(locked_redis), tmp_path)
    try:
        _journal_works(server)
        assert PASSWORD not in _argv_of_every_process()
    finally:
        assert server.signal() == 0
    assert PASSWORD not in server.output()


def _serve(store: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    """`rollmux serve` that is expected to refuse to start: its exit code and output."""
    env = {k: v for k, v in os.environ.items() if k != PASSWORD_ENV}
    return subprocess.run([sys.executable, "-m", "rollmux.cli", "serve", "--listen", f"127.0.0.1:{free_port()}",
                           "--store", store, "--admin-token-file", str(tmp_path / "admin.token"), *extra],
                          capture_output=True, text=True, timeout=120, env=env)


def test_a_password_inside_the_store_url_is_refused_in_one_line_without_it(locked_redis, tmp_path):
    r = _serve(f"redis://:{PASSWORD}@127.0.0.1:{locked_redis}/0", tmp_path)
    assert r.returncode == 2 and "--store" in r.stderr and "--redis-password-file" in r.stderr
    assert PASSWORD not in r.stdout + r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_wrong_password_is_one_line_without_it(locked_redis, tmp_path):
    wrong = tmp_path / "wrong.password"
    _password_file(wrong).write_text("not-the-password-" + PASSWORD[:8] + "\n")
    r = _serve(_store(locked_redis), tmp_path, "--redis-password-file", str(wrong))
    assert r.returncode == 2 and "--store" in r.stderr
    assert "not-the-password" not in r.stdout + r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_password_file_others_can_read_is_refused(locked_redis, tmp_path):
    shared = _password_file(tmp_path / "redis.password")
    shared.chmod(0o644)
    r = _serve(_store(locked_redis), tmp_path, "--redis-password-file", str(shared))
    assert r.returncode == 2 and "readable by others" in r.stderr and PASSWORD not in r.stdout + r.stderr
