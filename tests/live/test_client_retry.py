"""The job client rides out a rollback or restart: it retries 503s, and a 401 that directly
follows a 503, within `retry_for_s`; any other 401 is final."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rollmux.live.client import HttpPermitClient
from rollmux.live.refusals import AuthError, Unavailable


class _Script(ThreadingHTTPServer):
    """Answers every request with the next status of `statuses` (the last one for ever)."""

    def __init__(self, statuses: list[int]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.statuses, self.seen = list(statuses), 0
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 -- http.server's name
        srv = self.server
        with srv.lock:
            status = srv.statuses[min(srv.seen, len(srv.statuses) - 1)]
            srv.seen += 1
        body = json.dumps({"job_id": "a"} if status == 200 else {"error": f"status {status}"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def scripted():
    """A client on a server answering a scripted sequence of statuses."""
    servers = []

    def start(statuses: list[int], retry_for_s: float = 30.0) -> tuple[HttpPermitClient, _Script]:
        srv = _Script(statuses)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        client = HttpPermitClient(f"http://127.0.0.1:{srv.server_address[1]}", retry_for_s=retry_for_s)
        client.register("a", "token")
        return client, srv

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_a_401_right_after_a_503_is_retried(scripted):
    client, srv = scripted([503, 401, 200])
    assert (client.job("a"), srv.seen) == ({"job_id": "a"}, 3)


def test_a_401_not_after_a_503_is_final(scripted):
    client, srv = scripted([401, 200])
    with pytest.raises(AuthError):
        client.job("a")
    assert srv.seen == 1


def test_a_second_401_after_one_503_is_final(scripted):
    client, srv = scripted([503, 401, 401, 200])
    with pytest.raises(AuthError):
        client.job("a")
    assert srv.seen == 3


def test_503s_are_retried_no_longer_than_retry_for_s(scripted):
    client, srv = scripted([503], retry_for_s=0.3)
    with pytest.raises(Unavailable, match="did not answer for 0.3s"):
        client.job("a")
    assert srv.seen >= 2
