"""Drive headless Chromium against the dashboard and check what it rendered; shared by the page tests.

`dump_dom` and `screenshot` load a URL in headless Chromium; without a cookie they use the
Chromium CLI (`--dump-dom`, `--screenshot`, with a virtual-time budget), with one they drive
Chromium over the DevTools protocol (a stdlib WebSocket client below), set the cookie, and
wait for the page's `data-ready` flag. `canned_status` is an admin `/v1/status` body with two
groups, four jobs (one with a script-like id) and a timeline; `check_dashboard_dom` and
`check_screenshot` assert what a correct page shows for a given status, so a test against the
real server can reuse them with the status it fetched itself (while that status holds still).
"""

from __future__ import annotations

import base64
import json
import os
import queue
import re
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
from matplotlib import image as mpimg

WIDTH, HEIGHT = 1400, 900
VIRTUAL_TIME_MS = 5000   # page time Chromium's CLI lets pass before it dumps or shoots (>= 2 polls)
TIMEOUT_S = 120.0        # generous bound on one Chromium run; a healthy one takes a few seconds
NOW = 1764500000.0
WINDOW_S = 300.0         # the timeline shows the last five minutes
# A failed job's reason as `rollmux run` makes it of its entrypoint's exit (live/exits.py).
EXIT_REASON = "entrypoint exited with code 3: ModuleNotFoundError: No module named 'flash_attn'"
EVIL_ID = 'x"><img src=x onerror="document.body.dataset.pwned=1"><script>document.body.dataset.pwned=2</script>&amp;'
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                  "--hide-scrollbars", "--disable-dev-shm-usage")


def canned_status(now: float = NOW) -> dict:
    """An admin /v1/status body: 2 groups, 4 jobs (one over its SLO, one with a script-like id), a timeline."""
    def iv(gid: int, pool: str, node: int, job: str, phase: str, start: float, end: float | None) -> dict:
        return {"group_id": gid, "pool": pool, "node": node, "job_id": job, "phase": phase,
                "start": now - start, "end": None if end is None else now - end}

    def job(status: str, gid: int | None, iters: int, mean: float | None, slo: float, slowdown: float | None,
            held: list[str], reason: str | None = None) -> dict:
        return {"status": status, "group_id": gid, "iterations": iters, "mean_iter_s": mean, "slo_iter_s": slo,
                "slowdown": slowdown, "held": held, "epoch": 1, "reason": reason,
                "profile": {"declared": {"rollout": 10.0, "train": 8.0}, "measured": {"rollout": 9.5}}}

    timeline = []
    # group 0: a and b alternate on the rollout nodes and share the train node, period 31.5 s;
    # the first iterations began before the window (drawn clipped at its left edge)
    for k in range(10):
        t = 320 - k * 31.5
        timeline += [iv(0, "rollout", 0, "grpo-a", "rollout", t, t - 14),
                     iv(0, "train", 0, "grpo-a", "train", t - 14.5, t - 26),
                     iv(0, "rollout", 1, "ppo-b", "rollout", t - 10, t - 24),
                     iv(0, "train", 0, "ppo-b", "train", t - 26, t - 31)]
    timeline.append(iv(0, "rollout", 0, "grpo-a", "rollout", 5.0, None))            # running now
    timeline.append(iv(0, "rollout", 0, "grpo-a", "rollout", 420.0, 380.0))         # before the window: not drawn
    # group 1: a long rollout job on two rollout nodes, and the script-like id after it
    for k in range(4):
        t = 305 - k * 75
        timeline += [iv(1, "rollout", 0, "dapo-long-context-7b", "rollout", t, t - 50),
                     iv(1, "rollout", 1, "dapo-long-context-7b", "rollout", t, t - 46),
                     iv(1, "train", 0, "dapo-long-context-7b", "train", t - 50, t - 70),
                     iv(1, "rollout", 0, EVIL_ID, "rollout", t - 50, t - 68),
                     iv(1, "train", 0, EVIL_ID, "train", t - 70, t - 75)]
    timeline.append(iv(1, "rollout", 0, "dapo-long-context-7b", "rollout", 4.0, None))
    return {
        "now": now,
        "groups": [{"group_id": 0, "members": ["grpo-a", "ppo-b"], "rollout_nodes": 2, "train_nodes": 1,
                    "period_s": 31.5, "turn": {"rollout": ["grpo-a", "ppo-b"], "train": ["grpo-a"]}},
                   {"group_id": 1, "members": ["dapo-long-context-7b", EVIL_ID], "rollout_nodes": 2, "train_nodes": 1,
                    "period_s": 75.0, "turn": {"rollout": ["dapo-long-context-7b", None], "train": [None]}}],
        "jobs": {"grpo-a": job("running", 0, 12, 30.1, 40.0, 1.05, ["rollout"]),
                 "ppo-b": job("running", 0, 11, 33.0, 36.0, 1.12, []),
                 "dapo-long-context-7b": job("running", 1, 4, 78.2, 70.0, 1.31, ["rollout"]),
                 EVIL_ID: job("failed", 1, 3, None, 90.0, None, [], reason=EXIT_REASON)},
        "pools": {"rollout": {"nodes": 4, "gpus": 32, "busy_gpus": 24, "cost_per_hour": 32.0},
                  "train": {"nodes": 2, "gpus": 16, "busy_gpus": 8, "cost_per_hour": 45.6}},
        "cost_per_hour": 77.6,
        "timeline": timeline,
        "grants": 17, "refused": 2, "journal": "sqlite:///var/lib/rollmux/j.db", "recovered_records": 0,
    }


# -- Chromium ------------------------------------------------------------------------------
def chromium_binary() -> str:
    """The Chromium executable on PATH; fails naming the install line if there is none."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("chromium not found on PATH; install it (apt-get install chromium) "
                       "or run `make test`, which does")


def _run_cli(args: list[str]) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="rollmux-chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.run([chromium_binary(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"chromium exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    return proc


def dump_dom(url: str, cookie: str | None = None) -> str:
    """The DOM headless Chromium renders for `url`, optionally sending `cookie` ("name=value")."""
    if cookie is not None:
        with _devtools_page(url, cookie) as page:
            return page.evaluate("document.documentElement.outerHTML")
    return _run_cli([f"--virtual-time-budget={VIRTUAL_TIME_MS}", "--dump-dom", url]).stdout.decode()


def screenshot(url: str, path: str | os.PathLike, cookie: str | None = None) -> None:
    """Write a WIDTHxHEIGHT PNG of `url` as headless Chromium renders it, optionally sending `cookie`."""
    path = Path(path)
    if cookie is not None:
        with _devtools_page(url, cookie) as page:
            data = page.call("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))
        return
    _run_cli([f"--virtual-time-budget={VIRTUAL_TIME_MS}", f"--window-size={WIDTH},{HEIGHT}",
              f"--screenshot={path.resolve()}", url])
    if not path.exists():
        raise RuntimeError(f"chromium wrote no screenshot to {path}")


# -- the DevTools protocol, for pages that need a cookie ----------------------------------
class _WebSocket:
    """A minimal RFC 6455 client: text frames out (masked), whole messages in; enough for DevTools."""

    def __init__(self, url: str, timeout: float) -> None:
        u = urlsplit(url)
        self._sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
        self._sock.sendall(request.encode())
        self._in = self._sock.makefile("rb")
        status = self._in.readline()
        if b" 101 " not in status:
            raise ConnectionError(f"DevTools refused the WebSocket upgrade: {status!r}")
        while self._in.readline() not in (b"\r\n", b""):
            pass

    def _frame(self, opcode: int, payload: bytes) -> None:
        n, mask = len(payload), os.urandom(4)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
        else:
            head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
        masked = (np.frombuffer(payload, np.uint8) ^ np.resize(np.frombuffer(mask, np.uint8), n)).tobytes()
        self._sock.sendall(head + mask + masked)

    def _read(self, n: int) -> bytes:
        data = self._in.read(n)
        if len(data) < n:
            raise ConnectionError("DevTools closed the connection")
        return data

    def send(self, text: str) -> None:
        """Send one text message."""
        self._frame(0x1, text.encode())

    def recv(self) -> str:
        """The next whole text message (answering pings on the way)."""
        parts: list[bytes] = []
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(self._read(2), "big")
            elif n == 127:
                n = int.from_bytes(self._read(8), "big")
            mask = self._read(4) if b1 & 0x80 else None
            data = self._read(n)
            if mask:
                data = (np.frombuffer(data, np.uint8) ^ np.resize(np.frombuffer(mask, np.uint8), n)).tobytes()
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the connection")
            if opcode == 0x9:
                self._frame(0xA, data)
                continue
            if opcode == 0xA:
                continue
            parts.append(data)
            if b0 & 0x80:
                return b"".join(parts).decode()

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()


class DevToolsError(RuntimeError):
    """A DevTools command answered with an error."""


@dataclass
class _Page:
    ws: _WebSocket
    session: str = ""
    events: list[dict] = field(default_factory=list)
    next_id: int = 0

    def call(self, method: str, params: dict | None = None, browser: bool = False) -> dict:
        """Send one command (to the page's session unless `browser`) and return its result."""
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if not browser:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise DevToolsError(f"{method}: {reply['error'].get('message')}")
                return reply["result"]
            if "method" in reply:
                self.events.append(reply)

    def wait_event(self, method: str) -> dict:
        """The next `method` event of the page's session (the socket's timeout bounds the wait)."""
        while True:
            for i, ev in enumerate(self.events):
                if ev["method"] == method and ev.get("sessionId") == self.session:
                    return self.events.pop(i)
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)

    def evaluate(self, expression: str) -> object:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True})
        if "exceptionDetails" in result:
            raise DevToolsError(f"page raised: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")


# Resolves true once the page has set <body data-ready="1">, false at the deadline.
_READY_JS = """new Promise(resolve => {
  const ready = () => document.body && document.body.dataset.ready === "1";
  if (ready()) return resolve(true);
  const obs = new MutationObserver(() => { if (ready()) { obs.disconnect(); resolve(true); } });
  obs.observe(document.documentElement, {attributes: true, childList: true, subtree: true});
  setTimeout(() => { obs.disconnect(); resolve(ready()); }, %d);
})"""


@contextmanager
def _devtools_page(url: str, cookie: str) -> Iterator[_Page]:
    """A headless Chromium tab holding `cookie` for url's origin, navigated to `url` and ready."""
    name, sep, value = cookie.partition("=")
    if not sep or not name:
        raise ValueError("cookie must look like name=value")
    origin = "{0.scheme}://{0.netloc}/".format(urlsplit(url))
    with tempfile.TemporaryDirectory(prefix="rollmux-chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen([chromium_binary(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                 "--remote-debugging-port=0", "about:blank"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        lines: queue.Queue[str] = queue.Queue()

        def drain() -> None:  # keeps reading so Chromium never blocks on a full stderr pipe
            for raw in proc.stderr:
                lines.put(raw.decode(errors="replace"))
            lines.put("")

        threading.Thread(target=drain, daemon=True).start()
        ws, closing = None, False
        try:
            ws = _WebSocket(_devtools_url(lines), timeout=TIMEOUT_S)
            page = _open_tab(ws, url, name, value, origin)
            yield page
            page.call("Browser.close", browser=True)
            closing = True
        finally:
            if ws is not None:
                ws.close()
            if not closing:
                proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _devtools_url(lines: queue.Queue[str]) -> str:
    """The browser's DevTools websocket URL, read from Chromium's stderr lines ("" at its end)."""
    seen = []
    while True:
        line = lines.get(timeout=TIMEOUT_S)
        seen.append(line)
        if not line:
            raise RuntimeError("chromium exited before DevTools listened: " + "".join(seen)[-2000:])
        m = re.search(r"DevTools listening on (ws://\S+)", line)
        if m:
            return m.group(1)


def _open_tab(ws: _WebSocket, url: str, name: str, value: str, origin: str) -> _Page:
    """A new tab on the browser at `ws`, holding the cookie name=value for `origin`, navigated to `url`
    and ready (or at its deadline)."""
    page = _Page(ws)
    target = page.call("Target.createTarget", {"url": "about:blank"}, browser=True)["targetId"]
    page.session = page.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                             browser=True)["sessionId"]
    if not page.call("Network.setCookie", {"name": name, "value": value, "url": origin,
                                           "httpOnly": True, "sameSite": "Strict"}).get("success", True):
        raise DevToolsError("Network.setCookie refused the cookie")
    page.call("Emulation.setDeviceMetricsOverride",
              {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})
    page.call("Page.enable")
    page.call("Page.navigate", {"url": url})
    page.wait_event("Page.loadEventFired")
    for _ in range(5):  # a page that redirects itself (to /login) destroys the context we wait in
        try:
            page.evaluate(_READY_JS % int(TIMEOUT_S * 1000 / 2))
            break
        except DevToolsError:
            page.wait_event("Page.loadEventFired")
    return page


# -- reading the DOM -------------------------------------------------------------------------
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}


def _attr(keyword: str) -> str:
    """The attribute a find_all keyword names: class_ -> class, data_job_id -> data-job-id."""
    return keyword.rstrip("_").replace("_", "-")


@dataclass
class Node:
    """One element of a parsed page: tag, attributes, children (elements and text)."""

    tag: str
    attrs: dict[str, str]
    children: list = field(default_factory=list)

    def text(self) -> str:
        """All text under this element, concatenated."""
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self) -> Iterator[Node]:
        """This element and every element under it, in document order."""
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.iter()

    def find_all(self, tag: str | None = None, **attrs: str | None) -> list[Node]:
        """Elements under this one with the tag and attributes given (value None: present at all)."""
        out = []
        for n in self.iter():
            if tag is not None and n.tag != tag:
                continue
            if all(_attr(k) in n.attrs and (v is None or n.attrs[_attr(k)] == v) for k, v in attrs.items()):
                out.append(n)
        return out

    def classes(self) -> set[str]:
        """The element's class names."""
        return set(self.attrs.get("class", "").split())


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list) -> None:
        node = Node(tag, {k: v if v is not None else "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self.stack[-1].children.append(Node(tag, {k: v if v is not None else "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: str) -> Node:
    """Parse serialized HTML (as Chromium dumps it) into a Node tree."""
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root


# -- what a correct dashboard shows ----------------------------------------------------------
def visible_intervals(status: dict) -> list[dict]:
    """The timeline intervals the page draws: those overlapping the last five minutes."""
    now = status["now"]
    return [iv for iv in status.get("timeline", [])
            if (now if iv["end"] is None else min(iv["end"], now)) > max(iv["start"], now - WINDOW_S)]


def check_dashboard_dom(dom: str, status: dict) -> None:
    """Assert the dumped dashboard DOM shows `status`: header, groups, timeline, jobs, and nothing injected."""
    root = parse(dom)
    (body,) = root.find_all("body")
    assert body.attrs.get("data-ready") == "1", "the page never rendered a status"
    assert "data-pwned" not in body.attrs, "a job id was executed as markup"
    # nothing injected: our one inline script, no images, no inline event handlers
    assert len(root.find_all("script")) == 1
    assert not root.find_all("img")
    handlers = [(n.tag, a) for n in root.iter() for a in n.attrs if a.startswith("on")]
    assert not handlers, handlers

    summary = root.find_all(id="summary")[0].text()
    assert f"${status['cost_per_hour']:,.2f}/h" in summary
    for pool in status.get("pools", {}).values():
        assert f"${pool['cost_per_hour']:,.2f}/h" in summary
    assert str(status["grants"]) in summary and str(status["refused"]) in summary
    assert status["journal"] in summary

    sections = root.find_all("section", class_=None, data_group_id=None)
    assert sorted(s.attrs["data-group-id"] for s in sections) == sorted(str(g["group_id"]) for g in status["groups"])
    for g in status["groups"]:
        (card,) = [s for s in sections if s.attrs["data-group-id"] == str(g["group_id"])]
        assert "group" in card.classes()
        text = card.text()
        positions = [text.index(m) for m in g["members"]]
        assert positions == sorted(positions), "members out of cyclic order"
        for pool in ("rollout", "train"):
            for i, who in enumerate(g["turn"][pool]):
                assert f"{pool} {i}" in text
                assert (who if who is not None else "idle") in text

    (svg,) = root.find_all(id="timeline")[0].find_all("svg")
    labels = [t.text() for t in svg.find_all("text", class_="rowlabel")]
    expected = [f"g{g['group_id']} {pool}{i}" for g in status["groups"]
                for pool, n in (("rollout", g["rollout_nodes"]), ("train", g["train_nodes"])) for i in range(n)]
    assert labels[:len(expected)] == expected
    bars = [g for g in svg.find_all("g") if "bar" in g.classes()]
    drawn = visible_intervals(status)
    assert len(bars) == len(drawn)
    assert sorted(b.attrs["data-job-id"] for b in bars) == sorted(iv["job_id"] for iv in drawn)
    assert sum("running" in b.classes() for b in bars) == sum(iv["end"] is None for iv in drawn)
    assert {"rollout", "train"} >= {c for b in bars for c in b.classes()} - {"bar", "running"}
    ticks = [t.text() for t in svg.find_all("text", class_="tick")]
    assert ticks[0] == "−5 min" and ticks[-1] == "now"

    (table,) = root.find_all("table", id="jobs")
    rows = table.find_all("tr", data_job_id=None)
    assert sorted(r.attrs["data-job-id"] for r in rows) == sorted(status["jobs"])
    for r in rows:
        jid = r.attrs["data-job-id"]
        j = status["jobs"][jid]
        cells = [c for c in r.children if isinstance(c, Node) and c.tag == "td"]
        assert cells[0].text() == jid, "the job id must show as text, exactly"
        assert cells[1].text().startswith(j["status"])
        if m := j.get("profile", {}).get("measuring"):  # no phase times submitted: the row says how far measured
            assert f"measuring {m['iterations']}/{m['of']}" in cells[1].text(), jid
        over = j["mean_iter_s"] is not None and j["slo_iter_s"] is not None and j["mean_iter_s"] > j["slo_iter_s"]
        assert ("over-slo" in r.classes()) == over, jid
        assert ("over SLO" in r.text()) == over, jid


def check_screenshot(path: str | os.PathLike) -> None:
    """Assert `path` is a WIDTHxHEIGHT PNG with real content, not one blank colour."""
    path = Path(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 20_000, path.stat().st_size
    img = mpimg.imread(path)
    assert img.shape[:2] == (HEIGHT, WIDTH), img.shape
    pixels = img[..., :3].reshape(-1, 3)
    assert float(pixels.std(axis=0).max()) > 0.05
    assert len(np.unique((pixels * 255).astype(np.uint8), axis=0)) > 200
