"""Rolling back what a failed operation did, without replaying the journal (DESIGN §8).

A mixin of `SchedulerCore`. Memory must always equal what the journal holds once committed,
so a decision that could not be journaled is undone. A full replay of the journal on the
scheduler thread costs time in proportion to the journal's history (about 20 us a record),
and a token lookup made meanwhile saw a half-built state. Instead the core keeps, in memory:

- a **checkpoint**: the state as of one committed record (`LiveState.dump()` as JSON text),
  taken at load and again after every `max(REBASE_EVERY, jobs)` committed records;
- the **committed tail**: every record committed after the checkpoint;
- the **pending** records: staged in the open batch, in order, each operation's after the last's.

A refused operation stages nothing. When an operation fails (a journal write error, or a bug),
its own records are dropped: the journal's open batch is rolled back and the earlier operations'
records of the batch are staged again, and a new state is built *aside* from the checkpoint,
the committed tail and those earlier records, then swapped in with its token map. Only the
failed operation's caller (and the calls its records answered) get `Unavailable`; the batch's
other operations commit as if nothing happened. A failed commit fails its whole batch.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from itertools import chain
from typing import Any

from rollmux.core.vocabulary import JobStatus
from rollmux.live.handoff import settle
from rollmux.live.journal import JournalError
from rollmux.live.live_state import LiveState
from rollmux.live.refusals import Unavailable

log = logging.getLogger("rollmux.service")

REBASE_EVERY = 256  # committed records after which the checkpoint is taken again (at least: one per job)

Mark = tuple[int, int]  # (pending records, held replies) when an operation began


class Rollback:
    """The checkpoint, the committed tail and the pending records; undoing one operation (a mixin)."""

    state: LiveState
    journal: Any
    env: Any
    _replies: list
    _waiting: dict
    _token_of: dict[str, str]
    _seen: dict[str, float]
    _open: dict
    _tail_sent: set
    _queue: deque
    _gen: int
    _last_seq: int

    def _index_leases(self) -> None: ...
    def _request(self, job_id: str, phase: str) -> None: ...
    def _drain(self) -> None: ...
    def _record(self, record) -> Any: ...
    def _schedule_flush(self) -> None: ...

    # -- what memory is made of ---------------------------------------------------------------
    def _checkpoint(self) -> None:
        """Copy the committed state aside (nothing may be staged): a rollback starts from it."""
        self._base = (self._last_seq, json.dumps(self.state.dump(), separators=(",", ":")))
        self._committed: list[tuple[str, dict]] = []
        self._pending: list[tuple[str, dict]] = []
        if not hasattr(self, "rollbacks"):
            self.rollbacks: deque[float] = deque(maxlen=100)  # milliseconds each rollback took

    def _committed_batch(self) -> None:
        """The open batch committed: its records join the tail (and a long tail a new checkpoint)."""
        self._committed.extend(self._pending)
        self._pending = []
        if len(self._committed) >= max(REBASE_EVERY, len(self.state.jobs)):
            self._checkpoint()

    def _mark(self) -> Mark:
        """Where an operation begins: what it stages and answers comes after this."""
        return len(self._pending), len(self._replies)

    def _restored(self, kept: list[tuple[str, dict]]) -> LiveState:
        """A new state, built aside: the checkpoint, then the committed tail and `kept` replayed."""
        state = LiveState(self.env, self.state.spec, self.state.cfg)
        state.load(json.loads(self._base[1]))
        for kind, payload in chain(self._committed, kept):  # (JSON-native, as the journal reads them back)
            state.apply(kind, json.loads(json.dumps(payload)), replay=True)
        state.commit = self._record
        return state

    def _restage(self, kept: list[tuple[str, dict]]) -> bool:
        """Stage the earlier operations' records of the dropped batch again; False if that fails too."""
        try:
            for kind, payload in kept:
                self.journal.stage(kind, payload)
        except JournalError as exc:
            log.error("journal: the batch's other records could not be staged again, they fail too: %s", exc)
            self.journal.rollback()
            return False
        return True

    # -- undoing ------------------------------------------------------------------------------
    def _rebuild(self, why: BaseException, mark: Mark | None = None) -> None:
        """Undo the operation that began at `mark` (None: the whole open batch) and fail its callers."""
        t0 = time.perf_counter()
        log.error("rolling back %s: %s", "the batch" if mark is None else "one operation", why)
        keep, keep_replies = mark or (0, 0)
        try:
            self.journal.rollback()
        except JournalError as exc:  # the batch is lost either way; the memory rebuilt is what is committed
            log.error("journal rollback failed: %s", exc)
            keep = keep_replies = 0
        kept = self._pending[:keep]
        if kept and not self._restage(kept):
            kept, keep_replies = [], 0
        failed, self._replies = self._replies[keep_replies:], self._replies[:keep_replies]
        self._swap(kept)
        self._answer(failed, Unavailable(f"the journal could not record the decision; nothing changed, "
                                         f"ask again ({why})"))
        self.rollbacks.append((time.perf_counter() - t0) * 1e3)

    def _swap(self, kept: list[tuple[str, dict]]) -> None:
        """Put in place the state rebuilt from the checkpoint, the committed tail and `kept` (staged)."""
        self._gen += 1
        state = self._restored(kept)
        token_of = {r.token_hash: j for j, r in state.jobs.items()}
        self._token_of, self.state = token_of, state  # swapped whole: a lookup sees the old map or the new
        self._pending = kept
        self._last_seq = self._base[0] + len(self._committed) + len(kept)
        self._after_restore()

    def _after_restore(self) -> None:
        """What the core derives from its state, derived again from the restored one."""
        self._queue = deque(j for j, r in self.state.jobs.items() if r.status in (JobStatus.QUEUED, JobStatus.MOVING))
        self._index_leases()
        self._open.clear()
        self._tail_sent.clear()
        # Jobs the rollback forgot (a submission undone) are not watched; the rest keep their beat.
        self._seen = {j: t for j, t in self._seen.items() if j in self.state.jobs and self.state.jobs[j].active}

    def _answer(self, failed: list, err: Unavailable) -> None:
        """Fail the undone replies; ask the restored controllers for every permit still waited for."""
        answers = [(fut, None, err) for fut, _, _ in failed if not fut.done()]
        again = []
        for (jid, phase), fut in list(self._waiting.items()):
            job = self.state.jobs.get(jid)
            if fut.done() or job is None or not job.active:
                self._waiting.pop((jid, phase))
                answers.append((fut, None, err))
            elif phase in job.held:  # the restored state kept a grant it had (its reply was lost)
                self._waiting.pop((jid, phase))
                answers.append((fut, job.held[phase], None))
            elif job.group_id is not None:
                again.append((jid, phase))
        try:
            for jid, phase in again:
                self._request(jid, phase)
            self._drain()
        except JournalError as exc:  # the store still fails: what was asked again cannot be written either
            answers += self._give_up(exc, err)
        settle(answers)
        if self.journal.pending():  # what the drain decided is no request's: commit it
            self._schedule_flush()

    def _give_up(self, exc: JournalError, err: Unavailable) -> list:
        """Drop everything uncommitted and rebuild once more without asking again: every call still
        waiting or unanswered is told to ask again (a store that keeps failing costs no thread)."""
        log.error("journal: still failing while a rollback asked again for the waiting permits; "
                  "every waiting call is told to ask again: %s", exc)
        try:
            self.journal.rollback()
        except JournalError as again:
            log.error("journal rollback failed: %s", again)
        self._swap([])
        answers = [(fut, None, err) for fut, _, _ in self._replies if not fut.done()]
        answers += [(fut, None, err) for fut in self._waiting.values() if not fut.done()]
        self._replies, self._waiting = [], {}
        return answers

    def _on_error(self, exc: BaseException) -> None:
        """A callback of the scheduler thread raised (a bug, or a store that failed outside any
        operation): the uncommitted batch is undone so that memory equals the journal, and the
        thread goes on serving."""
        log.error("the scheduler thread caught %s: %s", type(exc).__name__, exc, exc_info=exc)
        try:
            self._rebuild(exc)
        except Exception as again:  # noqa: BLE001 -- the rebuild itself failed: drop all that is uncommitted
            settle(self._give_up(JournalError(str(again)), Unavailable(f"the scheduler recovered from an "
                                                                       f"error; ask again ({exc})")))
