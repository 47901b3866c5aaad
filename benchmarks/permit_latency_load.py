"""The load side of benchmarks/permit_latency.py: a lean HTTP/1.1 keep-alive client (`Conn`) on
asyncio streams, batch submission, the tiny job profile, and the table's statistics and rows.

httpx's AsyncClient spends most of its CPU scanning its connection pool (O(connections) per
request), which would measure the client, not the server; `Conn` writes one request per call.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable

import numpy as np

from rollmux.live.codec import live_job_record

PHASES = ("rollout", "train")
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.0, "offload_s": 0.0}
TARGETS = {"lone": ("p50_ms", "<=", 3.0), "loaded": ("per_s", ">=", 1000.0),
           "waiting": ("p99_ms", "<", 200.0)}


def tiny_job(job_id: str, slo: float) -> dict:
    """A tiny live job: 20 s rollout and train, 1 s sync, one node per pool."""
    return live_job_record(job_id, 20.0, 20.0, slo, sync_s=1.0)


class Conn:
    """One keep-alive HTTP/1.1 connection of one caller (its bearer token), on asyncio streams."""

    def __init__(self, url: str, token: str) -> None:
        host, port = url.split("://", 1)[1].rsplit(":", 1)
        self.host, self.port, self.token = host, int(port), token
        self._r: asyncio.StreamReader | None = None
        self._w: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        """Connect (again)."""
        self.close()
        self._r, self._w = await asyncio.open_connection(self.host, self.port)

    async def call(self, method: str, path: str, body: dict | None = None,
                   sent: Callable[[], None] | None = None) -> tuple[int, Any]:
        """(status, parsed JSON body or None); `sent()` once the request is written. Reconnects first if
        the server closed the idle connection (uvicorn's keep-alive timeout)."""
        data = json.dumps(body).encode() if body is not None else b""
        request = (f"{method} {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
                   f"authorization: Bearer {self.token}\r\ncontent-type: application/json\r\n"
                   f"content-length: {len(data)}\r\n\r\n").encode() + data
        if self._w is None or self._r is None or self._r.at_eof():
            await self.open()
        assert self._r is not None and self._w is not None
        self._w.write(request)
        if sent is not None:
            sent()
        head = await self._r.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding":
                raise RuntimeError(f"{path}: chunked responses are not expected from the API")
        raw = await self._r.readexactly(length) if length else b""
        return status, (json.loads(raw) if raw else None)

    def close(self) -> None:
        """Close the socket (if open)."""
        if self._w is not None:
            self._w.close()
        self._r = self._w = None


async def submit_all(url: str, admin: str, records: list[dict], concurrency: int = 8) -> list[dict]:
    """Submit job records with the admin token over `concurrency` connections; the answers in order."""
    out: list[dict | None] = [None] * len(records)
    it = iter(enumerate(records))

    async def worker() -> None:
        conn = Conn(url, admin)
        for i, rec in it:
            status, body = await conn.call("POST", "/v1/jobs", rec)
            if status != 201:
                raise RuntimeError(f"submit {rec['job_id']}: {status} {body}")
            out[i] = body
        conn.close()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out  # type: ignore[return-value]


def run_async(coro: Any) -> Any:
    """Run a coroutine on uvloop if it is installed, else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def latency_stats(lat_s: list[float]) -> dict:
    """p50/p99/mean in ms of a list of seconds."""
    a = np.array(lat_s) * 1e3
    pct = lambda q: round(float(np.percentile(a, q)), 3) if a.size else None  # noqa: E731
    return {"n": int(a.size), "p50_ms": pct(50), "p99_ms": pct(99),
            "mean_ms": round(float(a.mean()), 3) if a.size else None}


def table_row(store: str, scenario: str, call: str, stats: dict, per_s: float | None = None, target: bool = True,
               **extra: Any) -> dict:
    """One table row, with its target (if the scenario has one) and whether it was met."""
    row = {"store": store, "scenario": scenario, "call": call, **stats,
           "per_s": None if per_s is None else round(per_s, 1), "target": None, "met": None, **extra}
    if target and scenario in TARGETS:
        key, op, bound = TARGETS[scenario]
        row["target"] = f"{'permits/s' if key == 'per_s' else key.split('_')[0]} {op} {bound:g}" + (
            "" if key == "per_s" else " ms")
        value = row[key]
        row["met"] = None if value is None else bool(value <= bound if op == "<=" else
                                                      value >= bound if op == ">=" else value < bound)
    return row

