"""A Store that fails on demand: the fault-injection seam of the tests and of `rollmux chaos`
(a failed journal write must change nothing; DESIGN §8, "journaled before it takes effect")."""

from __future__ import annotations

from typing import Any, Callable

from rollmux.live.journal.base import JournalError, Store


class FailingStore:
    """A Store that fails on demand (tests' fault-injection seam); everything else goes to `inner`.

    stage/append fail when fail_on(kind, payload) is true; commit fails while fail_commit is
    True or a positive count (each failure uses one up), save_snapshot likewise with fail_snapshot.
    A failure writes nothing and rolls the inner batch back, as a real failure would.
    """

    def __init__(self, inner: Store, fail_on: Callable[[str, dict], bool] = lambda kind, payload: False,
                 fail_commit: bool | int = False, fail_snapshot: bool | int = False) -> None:
        self.inner = inner
        self.fail_on = fail_on
        self.fail_commit = fail_commit
        self.fail_snapshot = fail_snapshot
        self.injected = 0  # failures raised so far

    def stage(self, kind: str, payload: dict) -> int:
        """inner.stage, unless fail_on(kind, payload)."""
        if self.fail_on(kind, payload):
            raise self._fail(f"staging {kind!r}")
        return self.inner.stage(kind, payload)

    def append(self, kind: str, payload: dict) -> int:
        """stage + commit through this wrapper, so either can be made to fail."""
        seq = self.stage(kind, payload)
        self.commit()
        return seq

    def commit(self) -> None:
        """inner.commit, unless fail_commit says to fail this one."""
        if self._take("fail_commit"):
            raise self._fail(f"committing {self.inner.pending()} record(s)")
        self.inner.commit()

    def save_snapshot(self, seq: int, state: dict) -> None:
        """inner.save_snapshot, unless fail_snapshot says to fail this one."""
        if self._take("fail_snapshot"):
            raise self._fail(f"saving the snapshot at seq {seq}")
        self.inner.save_snapshot(seq, state)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # url, records, scan, snapshot, rollback, pending, close, ...

    def __repr__(self) -> str:
        return f"FailingStore({self.inner!r})"

    def _take(self, flag: str) -> bool:
        """Whether the flag says fail now; a count goes down by one per failure."""
        value = getattr(self, flag)
        if value is True or (type(value) is int and value > 0):
            if value is not True:
                setattr(self, flag, value - 1)
            return True
        return False

    def _fail(self, doing: str) -> JournalError:
        """Roll the inner batch back and make the injected error."""
        self.inner.rollback()
        self.injected += 1
        return JournalError(f"{self.inner.url}: injected failure {doing}")
