"""`rollmux serve` as an operator runs it: one writer per store, clean stops, kill -9, torn journals."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
import uuid

import pytest
from factories import TRAIN_HEAVY_COLO, make_job

from rollmux.live.client import HttpPermitClient
from rollmux.live.local import ProcessServer, free_port

TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01, "offload_s": 0.0}


def _rollmux(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rollmux.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def _jobs(*ids: str) -> list[dict]:
    return [make_job(j, rollout=100, train=100, slo=2.0).model_dump(exclude_none=True) for j in ids]


def test_a_second_server_on_the_same_store_exits_with_one_line_and_the_first_goes_on(tmp_path):
    store = str(tmp_path / "j.db")
    first = ProcessServer(store, tmp_path)
    try:
        second = _rollmux("serve", "--listen", f"127.0.0.1:{free_port()}", "--store", store,
                          "--admin-token-file", str(tmp_path / "admin.token"))
        assert second.returncode != 0
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and "in use by another rollmux serve" in lines[0], second.stderr
        client = HttpPermitClient(first.url, admin_token=first.admin_token)
        assert client.submit(_jobs("a")[0])["group"] == 0
        client.close()
    finally:
        first.signal(signal.SIGTERM)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_stops_the_server_within_5_s_answering_long_polls(tmp_path, sig):
    server = ProcessServer(str(tmp_path / "j.db"), tmp_path)
    client = HttpPermitClient(server.url, admin_token=server.admin_token, retry_for_s=0.5)
    for r in _jobs("a", "b"):
        client.submit(r)
    client.acquire("a", "rollout")  # b's acquire now long-polls behind a
    import threading
    answered = []
    t = threading.Thread(target=lambda: answered.append(_poll(server.url, client.tokens["b"])))
    t.start()
    deadline = time.monotonic() + 30
    while client.status()["waiting"] < 1 and time.monotonic() < deadline:
        time.sleep(0.02)  # until b's long poll is parked at the server
    t0 = time.monotonic()
    rc = server.signal(sig, timeout_s=10)
    elapsed = time.monotonic() - t0
    t.join(timeout=10)
    assert rc == 0 and elapsed < 5.0, (rc, elapsed)
    out = server.output()
    assert "Traceback" not in out and "Fatal Python error" not in out, out
    assert answered and answered[0] in (503, 204), answered  # answered, not cut off
    client.close()


def _poll(url: str, token: str) -> int:
    import httpx
    r = httpx.post(f"{url}/v1/jobs/b/acquire", json={"phase": "rollout", "wait_s": 30},
                   headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return r.status_code


@pytest.fixture(params=["sqlite", "redis"])
def store(request, tmp_path):
    """A fresh journal of each backend."""
    if request.param == "sqlite":
        return str(tmp_path / "j.db")
    return f"redis://127.0.0.1:{request.getfixturevalue('redis_port')}/0?prefix=serve-{uuid.uuid4().hex}"


def test_kill_9_then_a_restart_loses_no_job_and_grants_no_node_twice(tmp_path, store):
    server = ProcessServer(store, tmp_path)
    client = HttpPermitClient(server.url, admin_token=server.admin_token)
    for r in _jobs("a", "b"):
        client.submit(r)
    held = client.acquire_dict("a", "rollout")  # a holds the shared rollout node at the crash
    assert server.kill() == -signal.SIGKILL
    # A killed Redis writer's lease lapses after 10 s; the restart waits for it.
    again = ProcessServer(store, tmp_path, port=server.port, extra=["--wait-store", "30"])
    try:
        status = client.status()
        assert {j: s["status"] for j, s in status["jobs"].items()} == {"a": "running", "b": "running"}
        assert status["jobs"]["a"]["held"] == ["rollout"] and status["grants"] == 1
        import httpx
        r = httpx.post(f"{again.url}/v1/jobs/b/acquire", json={"phase": "rollout", "wait_s": 0.5},
                       headers={"Authorization": f"Bearer {client.tokens['b']}"})
        assert r.status_code == 204  # the node is still a's: b waits
        # a, still running its phase through the crash, releases; that frees the node for b.
        from rollmux.shim import PhaseTimings
        client.release(PhaseTimings("a", "rollout", 0.0, 0.0, 0.01, 0.0, held["epoch"]))
        assert client.acquire("b", "rollout").job_id == "b"
    finally:
        client.close()
        again.signal(signal.SIGTERM)


def test_a_torn_journal_is_one_line_and_repair_lets_the_server_start(tmp_path):
    store = tmp_path / "j.db"
    server = ProcessServer(str(store), tmp_path)
    client = HttpPermitClient(server.url, admin_token=server.admin_token)
    for r in _jobs("a", "b"):
        client.submit(r)
    client.close()
    server.signal(signal.SIGTERM)
    with sqlite3.connect(store) as db:  # a torn last record
        db.execute("UPDATE records SET payload = '{\"job_id\": \"b\", \"pl' WHERE seq = (SELECT max(seq) FROM records)")
    port = free_port()
    torn = _rollmux("serve", "--listen", f"127.0.0.1:{port}", "--store", str(store),
                    "--admin-token-file", str(tmp_path / "admin.token"))
    lines = torn.stderr.strip().splitlines()
    assert torn.returncode != 0 and len(lines) == 1 and "corrupt" in lines[0] and "record" in lines[0], torn.stderr
    check = _rollmux("journal", "check", str(store))
    assert check.returncode == 1 and "corrupt" in check.stderr
    repair = _rollmux("journal", "repair", str(store))
    assert repair.returncode == 0 and "backup" in repair.stdout, repair.stdout + repair.stderr
    assert _rollmux("journal", "check", str(store)).returncode == 0
    healed = ProcessServer(str(store), tmp_path)
    try:
        status = HttpPermitClient(healed.url, admin_token=healed.admin_token).status()
        assert "a" in status["jobs"]
    finally:
        healed.signal(signal.SIGTERM)


def test_the_admin_token_file_is_created_with_mode_0600(tmp_path):
    server = ProcessServer(str(tmp_path / "j.db"), tmp_path)
    try:
        assert (server.token_file.stat().st_mode & 0o777) == 0o600
        assert server.admin_token not in server.output()
    finally:
        server.signal(signal.SIGTERM)


def test_tls_serves_https_with_secure_cookies(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    server = ProcessServer(str(tmp_path / "j.db"), tmp_path, tls=(cert, key))
    try:
        assert server.url.startswith("https://")
        client = HttpPermitClient(server.url, admin_token=server.admin_token, verify=str(cert))
        assert client.submit(_jobs("a")[0])["group"] == 0
        import ssl

        import httpx
        r = httpx.post(f"{server.url}/login", data={"token": server.admin_token},
                       verify=ssl.create_default_context(cafile=str(cert)),
                       follow_redirects=False)
        assert "Secure" in r.headers["set-cookie"] and "HttpOnly" in r.headers["set-cookie"]
        with pytest.raises(httpx.TransportError):  # no plain HTTP on the TLS port
            httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5).raise_for_status()
        client.close()
    finally:
        server.signal(signal.SIGTERM)


@pytest.mark.parametrize("mode, content, reason", [
    (0o644, "x" * 32 + "\n", "readable by others (mode 644); chmod 600 it"),
    (0o600, "short\n", "the token must be at least 16 characters"),
])
def test_a_bad_admin_token_file_is_an_input_error_naming_the_flag_and_file(tmp_path, mode, content, reason):
    from rollmux.errors import InputError
    from rollmux.live.server import admin_token
    path = tmp_path / "admin.token"
    path.write_text(content)
    path.chmod(mode)
    with pytest.raises(InputError) as exc:
        admin_token(path)
    assert exc.value.place == f"--admin-token-file {path}" and exc.value.reason == reason


def test_a_readable_admin_token_file_stops_rollmux_serve_with_one_line(tmp_path):
    path = tmp_path / "admin.token"
    path.write_text("x" * 32 + "\n")
    path.chmod(0o644)
    out = _rollmux("serve", "--store", str(tmp_path / "j.db"), "--admin-token-file", str(path), "--listen", "127.0.0.1:0")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "readable by others" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("listen", ["nonsense", "127.0.0.1:http", ":8470"])
def test_a_bad_listen_address_stops_rollmux_serve_with_one_line(tmp_path, listen):
    out = _rollmux("serve", "--store", str(tmp_path / "j.db"), "--admin-token-file", str(tmp_path / "t"),
                   "--listen", listen)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and f"--listen {listen!r}: expected HOST:PORT" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_colo_pair_without_colocate_stops_rollmux_serve_with_one_line(tmp_path):
    out = _rollmux("serve", "--store", str(tmp_path / "j.db"), "--admin-token-file", str(tmp_path / "t"),
                   "--no-colocate", "--colo-pair")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "--colo-pair" in out.stderr and "--colocate" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_serve_colocate_places_a_job_on_its_training_nodes_over_http(tmp_path):
    store = str(tmp_path / "j.db")
    server = ProcessServer(store, tmp_path, extra=["--colocate"])
    try:
        client = HttpPermitClient(server.url, admin_token=server.admin_token)
        record = make_job("x", rollout=100, train=300, slo=2.0, colo=TRAIN_HEAVY_COLO).model_dump(exclude_none=True)
        got = client.submit(record)
        assert got["case"] == "colocated" and got["mode"] == "colocated"
        grant = client.acquire("x", "rollout")  # with the job's token, kept from its submission
        assert grant.pool == "train" and grant.nodes == (0,)
        client.close()
    finally:
        server.signal(signal.SIGTERM)


def test_serve_elastic_rollout_places_a_job_on_fewer_rollout_nodes_over_http(tmp_path):
    store = str(tmp_path / "j.db")
    server = ProcessServer(store, tmp_path, extra=["--elastic-rollout"])
    try:
        client = HttpPermitClient(server.url, admin_token=server.admin_token)
        record = make_job("x", rollout=300, train=100, rollout_gpus=16, slo=2.0, tail_frac=0.1).model_dump(
            exclude_none=True)
        assert client.submit(record)["rollout_nodes"] == [0]  # declared: 16 GPUs, two rollout nodes
        grant = client.acquire_dict("x", "rollout")
        assert grant["pool"] == "rollout" and grant["nodes"] == [0] and grant["rollout_factor"] > 1.5
        client.close()
    finally:
        server.signal(signal.SIGTERM)
