"""The Redis backend of the journal (production; DESIGN §8): a stream of records, a counter, a
snapshot hash, and a writer lease with a fencing token that every write checks (one writer per
store).

redis-py is imported when a store is opened, never at import time; `import redis` is absolute,
so it is the third-party package, not this module."""

from __future__ import annotations

import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit, urlunsplit

from rollmux.live.journal.base import (
    BaseStore,
    JournalCorrupt,
    JournalError,
    Record,
    check_snapshot_seq,
    damage_report,
    encode,
    hide_password,
    in_use,
    int_or_none,
    no_open_batch,
    parse_records,
    parse_snapshot,
)

PASSWORD_ENV = "ROLLMUX_REDIS_PASSWORD"  # the store's password when none is given (never argv: `ps` shows it)

# Every Redis write runs as a script that first checks the writer lease still carries this
# store's fencing token: a writer that stalled past its lease (and was replaced) writes nothing.
_FENCE = """
local lease = redis.call('GET', KEYS[1])
if not lease or string.sub(lease, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
  return redis.error_reply('lost the writer lease (it ran out, or another writer took the journal)')
end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if last ~= tonumber(ARGV[2]) then
  return redis.error_reply('the journal changed under this store (seq ' .. tostring(last) .. ')')
end
"""


class RedisStore(BaseStore):
    """Redis journal: a stream whose entry ids are `seq-0`, a seq counter, a snapshot hash and a writer lease."""

    LEASE_TTL_S = 10.0  # a dead writer's lease frees the journal after this long; renewed every TTL/3

    # KEYS: writer, seq, stream. ARGV: token, last seq, n, then (kind, payload, written_at) n times.
    # A script runs alone, so a batch lands whole. Nothing is written before the first XADD,
    # and if that one succeeds (its id is above the stream's) so do the later, higher ones.
    _COMMIT = _FENCE + """
for i = 1, tonumber(ARGV[3]) do
  local j = 1 + 3 * i
  redis.call('XADD', KEYS[3], string.format('%d-0', last + i), 'kind', ARGV[j], 'payload', ARGV[j + 1],
             'written_at', ARGV[j + 2])
end
redis.call('SET', KEYS[2], string.format('%d', last + tonumber(ARGV[3])))
return last + tonumber(ARGV[3])
"""
    # KEYS: writer, seq, snapshot. ARGV: token, last seq, seq, state, written_at.
    _SNAPSHOT = _FENCE + """
redis.call('HSET', KEYS[3], 'seq', ARGV[3], 'state', ARGV[4], 'written_at', ARGV[5])
"""
    # KEYS: writer, fence. ARGV: holder ("pid host"), ttl ms. Returns {token, ''} or {0, lease held}.
    _ACQUIRE = """
local held = redis.call('GET', KEYS[1])
if held then return {0, held} end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], string.format('%d ', token) .. ARGV[1], 'PX', ARGV[2])
return {token, ''}
"""
    # KEYS: writer. ARGV: token, ttl ms (0: release). Touches the lease only while it is ours.
    _RENEW = """
local lease = redis.call('GET', KEYS[1])
if not lease or string.sub(lease, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then return 0 end
if ARGV[2] == '0' then redis.call('DEL', KEYS[1]) else redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"""

    def __init__(self, url: str, readonly: bool = False, password: str | None = None) -> None:
        """`password`: Redis's (AUTH), default $ROLLMUX_REDIS_PASSWORD; one inside `url` wins over both."""
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        parts = urlsplit(url)
        query = parse_qs(parts.query, keep_blank_values=True)
        prefix = query.pop("prefix", ["rollmux"])[-1]
        self.url = hide_password(url)  # the real URL (with its password) is never kept
        self.readonly = readonly
        if password is None:
            password = os.environ.get(PASSWORD_ENV) or None
        self._secrets = [s for s in (parts.password, unquote(parts.password or ""), password) if s]
        if not prefix:
            raise JournalError(f"journal store {self.url}: empty ?prefix=")
        self.prefix = prefix
        self._seq_key, self._stream_key, self._snap_key, self._writer_key, self._fence_key = (
            f"{prefix}:{k}" for k in ("seq", "records", "snapshot", "writer", "fence"))
        self._lock = threading.RLock()
        self._batch: list[tuple[str, str, float]] = []
        self._token = ""
        self._closed = False
        self._release: Callable[[], Any] = lambda: None
        # redis-py would pass ?prefix= on to the connection, so it is taken out first.
        bare = urlunsplit(parts._replace(query=urlencode(query, doseq=True)))
        self._redis_error = redis.RedisError
        try:
            # No automatic retries: a retried commit whose first reply was lost would journal twice.
            # Bytes, not str: a payload that is not UTF-8 must reach the corruption check, not crash the read.
            self._client = redis.Redis.from_url(bare, password=password, retry=Retry(NoBackoff(), 0),
                                                socket_connect_timeout=5,
                                                socket_timeout=30, decode_responses=False)
        except ValueError as exc:
            raise JournalError(f"journal store {self.url}: invalid redis URL ({self._scrub(exc)})") from None
        try:
            self._client.ping()
        except redis.RedisError as exc:
            self._client.close()
            raise JournalError(f"cannot reach redis at {self.url}: {self._scrub(exc)}") from None
        self._commit_script, self._snapshot_script, self._acquire_script, self._renew_script = (
            self._client.register_script(s) for s in (self._COMMIT, self._SNAPSHOT, self._ACQUIRE, self._RENEW))
        try:
            if not readonly:
                self._take_lease()
            self._durable = self._read_counter()  # the only writer: its commits keep this current
        except JournalError:
            self.close()
            raise

    def _take_lease(self) -> None:
        """Take the writer lease (or refuse naming its holder) and start renewing it until close."""
        with self._errors("cannot take the writer lease"):
            token, held = self._acquire_script(keys=[self._writer_key, self._fence_key],
                                               args=[f"{os.getpid()} {socket.gethostname()}",
                                                     int(self.LEASE_TTL_S * 1000)])
        if not token:
            raise JournalError(in_use(self.url, held.decode(errors="replace").split(" ", 1)[-1]))
        self._token = str(token)
        stop = threading.Event()
        # Neither the finalizer nor the renewing thread holds the store: an unclosed store can be
        # collected, and its lease is released then (or at exit) rather than held for good.
        self._release = weakref.finalize(self, _release_lease, stop, self._renew_script, self._writer_key,
                                         self._token)
        threading.Thread(target=_keep_lease, args=(weakref.ref(self), stop, self.LEASE_TTL_S / 3),
                         name=f"rollmux-journal-lease-{self.prefix}", daemon=True).start()

    def stage(self, kind: str, payload: dict) -> int:
        """Buffer one record in the open batch (nothing reaches Redis before commit); returns its seq."""
        self._writable(f"stage {kind!r}")
        with self._lock:
            text = self._checked(kind, payload)
            try:
                if self._closed:
                    raise JournalError(f"{self.url}: cannot stage {kind!r} (store is closed)")
                if self._durable is None:
                    self._durable = self._read_counter()
                if self._durable is None:
                    raise JournalCorrupt(damage_report(self.url, "the seq counter is not a number"))
            except JournalError:
                self.rollback()
                raise
            self._batch.append((kind, text, time.time()))
            return self._durable + len(self._batch)

    def commit(self) -> None:
        """Append the whole batch in one fenced Lua script call: all of it lands or none."""
        self._writable("commit")
        with self._lock:
            batch, self._batch = self._batch, []  # dropped either way: a failed commit rolls back
            if not batch:
                return
            args: list[object] = [self._token, self._durable, len(batch)]
            for record in batch:
                args.extend(record)
            try:
                with self._errors(f"cannot commit {len(batch)} record(s)"):
                    self._durable = int(self._commit_script(keys=[self._writer_key, self._seq_key, self._stream_key],
                                                            args=args))
            except JournalError:
                self._durable = None  # unknown after a lost reply: read the counter again
                raise

    def rollback(self) -> None:
        """Drop the buffered batch; its seqs are reused."""
        with self._lock:
            self._batch.clear()

    def pending(self) -> int:
        """How many records are staged and not yet committed."""
        return len(self._batch)

    def scan(self, after: int = 0) -> tuple[list[Record], str | None]:
        """The good committed records with seq > after, and the first damage (one line) or None."""
        with self._errors("cannot read records"):
            pipe = self._client.pipeline(transaction=True)  # MULTI: stream and counter as of one instant
            # From "-" (or exclusive of after-0) so a stray entry such as 0-1 or 3-5 is seen, not skipped.
            pipe.xrange(self._stream_key, min="-" if after <= 0 else f"({after}-0", max="+")
            pipe.get(self._seq_key)
            entries, counter = pipe.execute()
        good, problem = parse_records(self.url, (_stream_row(eid, fields) for eid, fields in entries), after)
        if problem is None:
            last = good[-1].seq if good else max(after, 0)
            count = int_or_none(counter or b"0")
            if count is None:
                problem = damage_report(self.url, f"the seq counter {counter!r} is not a number")
            elif count > last:
                problem = damage_report(self.url, f"record {last + 1} is missing (the seq counter is at {count})")
            elif good and count < last:
                problem = damage_report(self.url, f"the seq counter ({count}) is behind record {last}")
        return good, problem

    def save_snapshot(self, seq: int, state: dict) -> None:
        """Store a compacted state as of record `seq` (replaces the previous snapshot)."""
        self._writable("save a snapshot")
        text = encode(f"snapshot at seq {seq}", state)
        with self._lock:
            no_open_batch(self.url, len(self._batch))
            with self._errors("cannot save snapshot"):
                last = self._durable if self._durable is not None else self._read_counter()
                if last is None:
                    raise JournalCorrupt(damage_report(self.url, "the seq counter is not a number"))
                check_snapshot_seq(self.url, seq, last)
                self._snapshot_script(keys=[self._writer_key, self._seq_key, self._snap_key],
                                      args=[self._token, last, seq, text, time.time()])

    def snapshot(self) -> tuple[int, dict] | None:
        """The latest snapshot (seq, state), or None; JournalCorrupt if it is damaged."""
        with self._errors("cannot read snapshot"):
            fields = self._client.hgetall(self._snap_key)
        if not fields:
            return None
        missing = [f for f in ("seq", "state") if f.encode() not in fields]
        seq = int_or_none(fields.get(b"seq", b""))
        if missing or seq is None:
            why = f"missing field(s) {', '.join(missing)}" if missing else f"seq {fields[b'seq']!r} is not a number"
            raise JournalCorrupt(damage_report(self.url, f"the snapshot is corrupt ({why})"))
        return parse_snapshot(self.url, seq, fields[b"state"])

    def close(self) -> None:
        """Release the writer lease and the connections; later calls raise JournalError."""
        with self._lock:
            self._batch.clear()
            self._closed = True
            self._release()
            self._client.close()

    def _renew_lease(self) -> bool:
        """Extend the writer lease by a TTL; False if it is no longer ours (then it is left alone)."""
        with self._errors("cannot renew the writer lease"):
            return bool(self._renew_script(keys=[self._writer_key], args=[self._token, int(self.LEASE_TTL_S * 1000)]))

    def _read_counter(self) -> int | None:
        """The last committed seq, or None if the counter is damaged."""
        with self._errors("cannot read the seq counter"):
            return int_or_none(self._client.get(self._seq_key) or b"0")

    def _scrub(self, exc: BaseException) -> str:
        """An error's text with the password (if the URL has one) hidden."""
        text = str(exc)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """Turn Redis errors into a JournalError naming the server (never its password)."""
        if self._closed:  # redis-py would silently reconnect
            raise JournalError(f"{self.url}: {doing} (store is closed)")
        try:
            yield
        except self._redis_error as exc:
            raise JournalError(f"{self.url}: {doing} ({self._scrub(exc)})") from None


def _keep_lease(ref: weakref.ref, stop: threading.Event, period: float) -> None:
    """Renew a store's lease every `period` s until it closes, is collected, or loses the lease."""
    while not stop.wait(period):
        store = ref()
        if store is None:
            return
        try:
            if not store._renew_lease():
                return  # taken over: the fence refuses this store's writes from now on
        except JournalError:
            pass  # redis unreachable for now: try again; if the lease runs out meanwhile, writes are refused
        del store  # hold no reference while waiting, so an unclosed store can still be collected


def _release_lease(stop: threading.Event, renew: Any, writer_key: str, token: str) -> None:
    """Stop renewing and delete the lease if it is still ours (on close, collection or exit)."""
    stop.set()
    try:
        renew(keys=[writer_key], args=[token, 0])
    except Exception:  # noqa: BLE001 - best effort: an unreleased lease expires by itself
        pass


def _stream_row(eid: bytes, fields: dict) -> tuple[int, object, object, str | None]:
    """A Redis stream entry as a (seq, kind, payload text, damage) row."""
    ms, _, sub = eid.decode().partition("-")
    if sub != "0":
        return int(ms), None, None, f"stream entry {eid.decode()} is not a journal record (ids are <seq>-0)"
    missing = [f for f in ("kind", "payload") if f.encode() not in fields]
    if missing:
        return int(ms), None, None, f"record {ms} is corrupt (missing field(s) {', '.join(missing)})"
    try:
        kind: object = fields[b"kind"].decode()
    except UnicodeDecodeError:
        kind = fields[b"kind"]
    return int(ms), kind, fields[b"payload"], None
