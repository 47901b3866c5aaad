"""A journal that keeps nothing: for throwaway services (tests, benchmarks' in-memory rows).

It honours the Store protocol's batching (stage, commit, rollback, pending) so the
core's group commit runs the same way, but it cannot be replayed: a rebuild after a
failure has nothing to rebuild from (it never fails on its own).
"""

from __future__ import annotations

from rollmux.live.journal.base import JournalError


class MemoryStore:
    """In-memory stand-in when no store is configured (tests, throwaway services)."""

    url = "memory:"

    def __init__(self) -> None:
        self.seq = self._staged = 0

    def stage(self, kind: str, payload: dict) -> int:
        self._staged += 1
        return self.seq + self._staged

    def commit(self) -> None:
        self.seq, self._staged = self.seq + self._staged, 0

    def rollback(self) -> None:
        self._staged = 0

    def pending(self) -> int:
        return self._staged

    def append(self, kind: str, payload: dict) -> int:
        self.stage(kind, payload)
        self.commit()
        return self.seq

    def records(self, after: int = 0) -> list:
        if self.seq:  # memory only: there is nothing to rebuild from
            raise JournalError("memory: an in-memory journal cannot be replayed")
        return []

    def snapshot(self) -> None:
        return None

    def save_snapshot(self, seq: int, state: dict) -> None:
        pass

    def close(self) -> None:
        pass
