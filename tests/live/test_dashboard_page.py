"""The dashboard pages in headless Chromium, served with a canned /v1/status by a stdlib server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from dashboard_checks import (
    EVIL_ID,
    EXIT_REASON,
    canned_status,
    check_dashboard_dom,
    check_screenshot,
    dump_dom,
    parse,
    screenshot,
)

from rollmux.live.dashboard import PAGES, page

COOKIE = "rollmux_session=s3cr3t-session"


class CannedServer(ThreadingHTTPServer):
    """Serves the two pages and a fixed /v1/status; with `cookie` set, /v1/status wants that cookie."""

    daemon_threads = True

    def __init__(self, status: dict, cookie: str | None) -> None:
        super().__init__(("127.0.0.1", 0), CannedHandler)
        self.status, self.cookie = status, cookie
        self.status_cookies: list[str | None] = []   # the Cookie header of every /v1/status request

    @property
    def url(self) -> str:
        """http://127.0.0.1:PORT"""
        return f"http://127.0.0.1:{self.server_address[1]}"


class CannedHandler(BaseHTTPRequestHandler):
    """GET /, /login, /v1/status for a CannedServer."""

    server: CannedServer

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        """Answer with `body`, never cached."""
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        """Serve a page, the status (behind the cookie when one is required), or 404."""
        path = self.path.split("?")[0]
        if path == "/":
            self._send(200, page("index.html").encode(), "text/html; charset=utf-8")
        elif path == "/login":
            self._send(200, page("login.html").encode(), "text/html; charset=utf-8")
        elif path == "/v1/status":
            sent = self.headers.get("Cookie")
            self.server.status_cookies.append(sent)
            if self.server.cookie is not None and self.server.cookie not in (sent or "").split("; "):
                self._send(401, b'{"error": "no_token"}', "application/json")
            else:
                self._send(200, json.dumps(self.server.status).encode(), "application/json")
        else:
            self._send(404, b"not found", "text/plain")

    def log_message(self, format: str, *args: object) -> None:  # keep the test output clean
        pass


@contextmanager
def serve(status: dict, cookie: str | None = None) -> Iterator[CannedServer]:
    """A CannedServer on a free loopback port, stopped on exit."""
    server = CannedServer(status, cookie)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def open_server() -> Iterator[CannedServer]:
    """The canned status, no cookie needed."""
    with serve(canned_status()) as server:
        yield server


@pytest.fixture(scope="module")
def cookie_server() -> Iterator[CannedServer]:
    """The canned status, served only to requests carrying COOKIE."""
    with serve(canned_status(), cookie=COOKIE) as server:
        yield server


def test_pages_are_packaged_and_self_contained():
    for name in PAGES:
        html = page(name)
        assert html.startswith("<!DOCTYPE html>")
        tree = parse(html)
        # no CDN, no external file: the cluster may have no internet
        assert not tree.find_all("link") and not [n for n in tree.iter() if "src" in n.attrs]
        assert "innerHTML" not in html and "insertAdjacentHTML" not in html and "document.write" not in html
    with pytest.raises(KeyError):
        page("../telemetry.py")
    (form,) = parse(page("login.html")).find_all("form")
    assert form.attrs["method"] == "post" and form.attrs["action"] == "/login"
    assert [i.attrs["name"] for i in form.find_all("input")] == ["token"]


def test_dashboard_renders_the_canned_status(open_server):
    status = open_server.status
    dom = dump_dom(open_server.url + "/")
    check_dashboard_dom(dom, status)
    tree = parse(dom)
    assert [s.attrs["data-group-id"] for s in tree.find_all("section", data_group_id=None)] == ["0", "1"]
    assert len(tree.find_all("tr", data_job_id=None)) == 4
    assert [r.attrs["data-job-id"] for r in tree.find_all("tr", class_="over-slo")] == ["dapo-long-context-7b"]


def test_a_script_like_job_id_is_shown_as_text_not_run(open_server):
    tree = parse(dump_dom(open_server.url + "/"))
    (row,) = tree.find_all("tr", data_job_id=EVIL_ID)
    assert row.find_all("td")[0].text() == EVIL_ID
    assert EXIT_REASON in row.text()  # (it failed: its reason, the entrypoint's exit, is on its row)
    card = tree.find_all("section", data_group_id="1")[0]
    assert EVIL_ID in card.text()
    assert "data-pwned" not in tree.find_all("body")[0].attrs
    assert not tree.find_all("img")


def test_screenshot_is_a_real_picture(open_server, tmp_path):
    png = tmp_path / "dashboard.png"
    screenshot(open_server.url + "/", png)
    check_screenshot(png)


def test_without_the_cookie_the_page_goes_to_login(cookie_server):
    tree = parse(dump_dom(cookie_server.url + "/"))
    assert tree.find_all("body")[0].attrs.get("data-page") == "login"
    assert tree.find_all("form", action="/login")
    assert None in cookie_server.status_cookies


def test_with_the_cookie_over_devtools(cookie_server, tmp_path):
    dom = dump_dom(cookie_server.url + "/", cookie=COOKIE)
    check_dashboard_dom(dom, cookie_server.status)
    assert COOKIE in cookie_server.status_cookies   # the page's fetch sent it (credentials: same-origin)
    png = tmp_path / "dashboard-cookie.png"
    screenshot(cookie_server.url + "/", png, cookie=COOKIE)
    check_screenshot(png)


def test_login_page_shows_the_error_only_after_a_failed_sign_in(open_server):
    def error_hidden(url: str) -> bool:
        (err,) = parse(dump_dom(url)).find_all(id="error")
        return "hidden" in err.attrs

    assert error_hidden(open_server.url + "/login")
    assert not error_hidden(open_server.url + "/login?failed=1")


def test_a_colocated_job_has_a_card_and_its_training_node_a_timeline_row():
    status = canned_status()
    status["colocated"] = [{"group_id": 7, "job_id": "verl-style-8b", "train_nodes": 1, "period_s": 420.0}]
    status["jobs"]["verl-style-8b"] = dict(status["jobs"]["grpo-a"], group_id=7)
    status["timeline"].append({"group_id": 7, "pool": "train", "node": 0, "job_id": "verl-style-8b",
                               "phase": "rollout", "start": status["now"] - 30.0, "end": None})
    with serve(status) as server:
        dom = dump_dom(server.url + "/")
    check_dashboard_dom(dom, status)  # the groups' cards are still exactly the groups
    tree = parse(dom)
    (card,) = tree.find_all("section", data_colocated_id=None)
    assert card.attrs["data-colocated-id"] == "7" and "verl-style-8b" in card.text()
    assert "Co-located 7" in card.text() and "1 train node" in card.text()
    assert "g7 train0" in tree.find_all(id="timeline-svg")[0].text()
