"""The clock/executor seam: one small environment, two implementations.

Scheduling code (group controllers, the cluster scheduler, job drivers) only
calls `now()` and `call_at()/call_later()`. `SimEnvironment` advances virtual
time from event to event; `WallClockEnvironment` runs the same callbacks at
real wall-clock times, so the code that drives the simulator also drives the
live plane (SimPy's design: one process code, two clocks).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from abc import ABC, abstractmethod
from typing import Any, Callable


class Environment(ABC):
    """A clock plus a scheduler of callbacks."""

    @abstractmethod
    def now(self) -> float:
        """Current time in seconds."""

    @abstractmethod
    def call_at(self, when: float, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn(*args) at time `when` (or at once if `when` is past)."""

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn(*args) after `delay` seconds."""
        self.call_at(self.now() + max(0.0, delay), fn, *args)

    @abstractmethod
    def run(self, until: float | None = None) -> None:
        """Process events until none are left (or time `until`)."""


class _Queue:
    """A time-ordered event heap; ties run in scheduling order (deterministic)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[..., Any], tuple]] = []
        self._seq = itertools.count()

    def push(self, when: float, fn: Callable[..., Any], args: tuple) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), fn, args))

    def peek_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def pop(self) -> tuple[float, Callable[..., Any], tuple]:
        when, _, fn, args = heapq.heappop(self._heap)
        return when, fn, args

    def __len__(self) -> int:
        return len(self._heap)


class SimEnvironment(Environment):
    """Virtual time: jumps straight to the next event."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._queue = _Queue()
        self.events_processed = 0

    def now(self) -> float:
        """Current virtual time."""
        return self._now

    def call_at(self, when: float, fn: Callable[..., Any], *args: Any) -> None:
        """Schedule fn(*args) at virtual time `when` (never in the past)."""
        q = self._queue  # _Queue.push inlined: this runs for every simulated event
        heapq.heappush(q._heap, (when if when > self._now else self._now, next(q._seq), fn, args))

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> None:
        """Schedule fn(*args) `delay` seconds from now."""
        q = self._queue
        heapq.heappush(q._heap, (self._now + (delay if delay > 0.0 else 0.0), next(q._seq), fn, args))

    def run(self, until: float | None = None) -> None:
        """Process events in time order until the queue is empty or `until`."""
        heap, pop = self._queue._heap, heapq.heappop  # the queue's methods inlined: the hot loop
        while heap:
            if until is not None and heap[0][0] > until:
                self._now = until
                return
            when, _, fn, args = pop(heap)
            self._now = when
            self.events_processed += 1
            fn(*args)

    @property
    def pending(self) -> int:
        """Events still queued."""
        return len(self._queue)


class WallClockEnvironment(Environment):
    """Real time: callbacks run at their wall-clock time on the thread calling run().

    Other threads (e.g. RPC handlers of the live plane) may schedule callbacks;
    `time_scale` < 1 compresses time for demos and tests.
    """

    def __init__(self, time_scale: float = 1.0) -> None:
        self._t0 = time.monotonic()
        self._scale = time_scale
        self._queue = _Queue()
        self._cv = threading.Condition()
        self._stopped = False
        self._serving = False
        self._on_error: Callable[[Exception], None] | None = None

    def serve(self, on_error: Callable[[Exception], None] | None = None) -> None:
        """Run callbacks until stop() is called, waiting when idle (for a service thread); with
        `on_error`, a callback that raises is handed to it and the thread goes on."""
        self._serving, self._on_error = True, on_error
        try:
            self.run()
        finally:
            self._serving, self._on_error = False, None

    def now(self) -> float:
        """Seconds since the environment started (scaled)."""
        return (time.monotonic() - self._t0) / self._scale

    def call_at(self, when: float, fn: Callable[..., Any], *args: Any) -> None:
        """Schedule fn(*args) at `when`; safe to call from any thread."""
        with self._cv:
            self._queue.push(when, fn, args)
            self._cv.notify()

    def stop(self) -> None:
        """Make run() return after the current callback."""
        with self._cv:
            self._stopped = True
            self._cv.notify()

    def run(self, until: float | None = None) -> None:
        """Run callbacks as their time comes; return when stopped, at `until`, or idle without `until`."""
        while True:
            with self._cv:
                while True:
                    if self._stopped:
                        return
                    t = self._queue.peek_time()
                    if t is None and until is None:
                        if not self._serving:
                            return
                        self._cv.wait()  # a service waits for callbacks from other threads
                        continue
                    target = until if t is None or (until is not None and t > until) else t
                    wait = (target - self.now()) * self._scale
                    if wait <= 0:
                        if target is until and (t is None or t > until):
                            return
                        break
                    self._cv.wait(timeout=wait)
                _, fn, args = self._queue.pop()
            try:
                fn(*args)
            except Exception as exc:
                if self._on_error is None:
                    raise
                self._on_error(exc)
