"""Futures across the scheduler thread and the HTTP event loop, in as few wake-ups as possible.

Every request crosses from the event loop to the scheduler thread and its answer
comes back. One wake-up per request each way costs about half the server's
throughput (benchmarks/README.md, "Permit latency"), so both directions go in batches: `Inbox` runs every queued call in one scheduler
callback, and `settle` hands each event loop all its answers in one
`call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict, deque
from concurrent.futures import Future
from typing import Any, Callable, Iterable

Answer = tuple[Any, Any, BaseException | None]  # (future, value, exception)


def _set(fut: Any, value: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


def _settle_here(answers: list[Answer]) -> None:
    for fut, value, exc in answers:
        _set(fut, value, exc)


def settle(answers: Iterable[Answer]) -> None:
    """Resolve futures from the scheduler thread: concurrent ones at once (and the asyncio
    bridge an event loop hung on one as `.aio`), asyncio ones in one hop per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Answer]] = defaultdict(list)
    for fut, value, exc in answers:
        if isinstance(fut, asyncio.Future):
            by_loop[fut.get_loop()].append((fut, value, exc))
            continue
        _set(fut, value, exc)
        bridge = getattr(fut, "aio", None)
        if bridge is not None:
            by_loop[bridge.get_loop()].append((bridge, value, exc))
    for loop, batch in by_loop.items():
        if not loop.is_closed():
            loop.call_soon_threadsafe(_settle_here, batch)


def bridge(fut: Future, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
    """The asyncio future (one per concurrent future, however often it is awaited) that
    `settle` resolves with it; call on the loop's thread."""
    aio = getattr(fut, "aio", None)
    if aio is None:
        aio = fut.aio = loop.create_future()
        if fut.done():  # settled before the bridge existed: settle never saw it
            exc = fut.exception()
            _set(aio, None if exc else fut.result(), exc)
    return aio


class Inbox:
    """Calls posted from any thread, run in order by one callback on the scheduler thread."""

    def __init__(self, schedule: Callable[[Callable[[], None]], None]) -> None:
        self._calls: deque[Callable[[], None]] = deque()
        self._lock = threading.Lock()
        self._due = False
        self._schedule = schedule

    def post(self, call: Callable[[], None]) -> None:
        """Queue `call`; the first call of a batch wakes the scheduler thread."""
        self._calls.append(call)
        with self._lock:
            if self._due:
                return
            self._due = True
        self._schedule(self._run)

    def _run(self) -> None:
        with self._lock:
            self._due = False  # before draining: a call posted from now on schedules a new run
        while self._calls:
            self._calls.popleft()()
