"""A finite inter-pool link shared by concurrent weight syncs (processor sharing).

Every active transfer gets an equal share of the link's bandwidth; when one
starts or ends the others' shares change, so completions are recomputed then.
Only the earliest completion is ever scheduled; a stale event is recognised by
its token and ignored.
"""

from __future__ import annotations

from typing import Callable

from rollmux.core.env import Environment


class SharedLink:
    """`gbps` of bandwidth split evenly among the transfers in flight."""

    def __init__(self, env: Environment, gbps: float) -> None:
        self.env, self.gbps = env, gbps
        self._left: dict[str, float] = {}  # transfer -> gigabits still to send
        self._done: dict[str, Callable[[], None]] = {}
        self._t = 0.0
        self._token = 0
        self.peak_transfers = 0

    def send(self, key: str, gigabits: float, on_done: Callable[[], None]) -> None:
        """Start sending `gigabits` under `key`; `on_done()` runs when the last bit arrives."""
        self._advance()
        self._left[key] = max(gigabits, 0.0)
        self._done[key] = on_done
        self.peak_transfers = max(self.peak_transfers, len(self._left))
        self._schedule()

    def cancel(self, key: str) -> None:
        """Drop the transfer under `key`, if any (its job left): the others share the link from now on."""
        if key not in self._left:
            return
        self._advance()
        del self._left[key], self._done[key]
        self._schedule()

    def _advance(self) -> None:
        now = self.env.now()
        if self._left:
            sent = (now - self._t) * self.gbps / len(self._left)
            for k in self._left:
                self._left[k] -= sent
        self._t = now

    def _schedule(self) -> None:
        self._token += 1
        if self._left:
            rate = self.gbps / len(self._left)
            first = min(self._left.values())
            self.env.call_later(max(first, 0.0) / rate, self._fire, self._token)

    def _fire(self, token: int) -> None:
        if token != self._token:
            return  # the shares changed after this event was scheduled
        self._advance()
        finished = [k for k, left in self._left.items() if left <= 1e-6 * self.gbps]  # within a microsecond: done (float noise)
        callbacks = [self._done.pop(k) for k in finished]
        for k in finished:
            del self._left[k]
        self._schedule()
        for cb in callbacks:
            cb()
