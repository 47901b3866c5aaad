"""SyncGroup: hand a state dict from N training ranks to M rollout ranks (DESIGN §8).

Training ranks call `send(state_dict)`, rollout ranks `receive()`. Training rank 0 publishes the
control record (manifest, strategy, bucket size) in the store under the version's key; the others
check their own state dict has the same layout. Bytes then move bucket by bucket as `plan` says;
under the topology strategy a rollout rank all-gathers bucket k while bucket k+1 crosses the link.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, Mapping

import torch
import torch.distributed as dist

from .manifest import ByteStream, Manifest, ManifestError, StateDict, empty_like_manifest
from .plan import STRATEGIES, BucketPlan, Strategy, Transfer, buckets, check_strategy, plan
from .transport import Backend, TorchTransport, Transport, Work

Role = Literal["train", "rollout"]


@dataclass(frozen=True)
class SyncStats:
    """One rank's view of one sync: time, and the bytes it moved on each network."""

    strategy: Strategy
    version: int
    seconds: float
    model_bytes: int
    cross_sent: int   # bytes this rank sent over the inter-pool link
    cross_recv: int   # bytes this rank received over it
    pool_sent: int    # bytes this rank contributed to its pool's all-gather (to each peer, summed)
    pool_recv: int    # bytes it received from its pool peers
    buckets: int


def _check_sizes(role: str, rank: int, n_train: int, n_rollout: int) -> None:
    """ValueError naming the argument when the group's shape makes no sense."""
    for name, n in (("n_train", n_train), ("n_rollout", n_rollout)):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"{name}: must be a positive integer (got {n!r})")
    if role not in ("train", "rollout"):
        raise ValueError(f"role: must be 'train' or 'rollout' (got {role!r})")
    size = n_train if role == "train" else n_rollout
    if not isinstance(rank, int) or not 0 <= rank < size:
        raise ValueError(f"rank: a {role} rank must be in 0..{size - 1} (got {rank!r})")


class SyncGroup:
    """One rank's membership in a weight-sync group of N training and M rollout ranks.

    Every member must call the same sequence: each `send` on the training ranks is matched by a
    `receive` on every rollout rank, and `close` is called by all (it waits for all).
    """

    def __init__(self, role: Role, rank: int, n_train: int, n_rollout: int, *,
                 master_addr: str = "127.0.0.1", master_port: int = 29600,
                 strategy: Strategy = "topology", backend: Backend = "gloo",
                 bind_addr: str | None = None, store: dist.Store | None = None,
                 device: torch.device | str | None = None, bucket_mb: float = 16.0,
                 timeout_s: float = 300.0, transport: Transport | None = None) -> None:
        _check_sizes(role, rank, n_train, n_rollout)
        if bucket_mb <= 0:
            raise ValueError(f"bucket_mb: must be positive (got {bucket_mb!r})")
        self.role, self.rank, self.n_train, self.n_rollout = role, rank, n_train, n_rollout
        self.strategy = check_strategy(strategy)
        self.bucket_bytes = max(1, int(bucket_mb * 2**20))
        self.sync_rank = rank if role == "train" else n_train + rank
        if store is None:
            # The first training rank hosts the store; nobody waits for the others here, the
            # groups' construction below is the rendezvous.
            store = dist.TCPStore(master_addr, master_port, n_train + n_rollout,
                                  is_master=self.sync_rank == 0, timeout=timedelta(seconds=timeout_s),
                                  wait_for_workers=False)
        self._store = store
        self.transport: Transport = transport or TorchTransport(
            store, self.sync_rank, n_train, n_rollout, backend=backend, bind_addr=bind_addr,
            device=device, timeout_s=timeout_s)
        self.version = 0

    # -- training side ---------------------------------------------------------------------

    def send(self, state_dict: Mapping[str, torch.Tensor], strategy: Strategy | None = None) -> SyncStats:
        """Send the state dict to every rollout rank; every training rank calls it with the same layout."""
        if self.role != "train":
            raise RuntimeError("send: only training ranks send; rollout ranks call receive()")
        t0 = time.perf_counter()
        strategy = check_strategy(strategy or self.strategy)
        self.version += 1
        manifest = Manifest.of(state_dict, self.version)
        key = f"weightsync/v{self.version}"
        if self.rank == 0:
            self._store.set(key, json.dumps({"manifest": manifest.to_json(), "strategy": strategy,
                                             "bucket_bytes": self.bucket_bytes}))
        else:
            published = Manifest.from_json(json.loads(self._store.get(key))["manifest"])
            if not published.same_layout(manifest):
                raise ManifestError(f"send: training rank {self.rank}'s state dict differs in layout "
                                    "from training rank 0's (names, dtypes or shapes)")
        stream = ByteStream([state_dict[t.name] for t in manifest.tensors])
        windows = buckets(stream.total, self.bucket_bytes)
        pending: list[tuple[Work, torch.Tensor]] = []
        sent = 0
        for k, (b0, b1) in enumerate(windows):
            works = []
            for t, buf in self._pack(plan(strategy, b1 - b0, self.n_train, self.n_rollout), stream, b0):
                works.append((self.transport.send(buf, t.dst, k), buf))
                sent += t.nbytes
            # Bucket k goes out while bucket k-1 drains: at most two buckets in flight.
            _wait(pending)
            pending = works
        _wait(pending)
        self.transport.synchronize()
        return SyncStats(strategy, self.version, time.perf_counter() - t0, stream.total,
                         cross_sent=sent, cross_recv=0, pool_sent=0, pool_recv=0, buckets=len(windows))

    def _pack(self, bucket: BucketPlan, stream: ByteStream, b0: int) -> list[tuple[Transfer, torch.Tensor]]:
        """This rank's transfers of a bucket, each with its bytes packed on the transport's device."""
        out, packed = [], {}
        for t in bucket.sent_by(self.sync_rank):
            # A flat bucket goes whole to several rollout ranks: pack it once.
            if (t.start, t.stop) not in packed:
                buf = torch.empty(t.nbytes, dtype=torch.uint8, device=self.transport.device)
                stream.pack(b0 + t.start, b0 + t.stop, buf)
                packed[(t.start, t.stop)] = buf
            out.append((t, packed[(t.start, t.stop)]))
        return out

    # -- rollout side ----------------------------------------------------------------------

    def receive(self) -> tuple[StateDict, SyncStats]:
        """Receive the next version's state dict (the sender's strategy and bucket size apply)."""
        if self.role != "rollout":
            raise RuntimeError("receive: only rollout ranks receive; training ranks call send()")
        t0 = time.perf_counter()
        self.version += 1
        control = json.loads(self._store.get(f"weightsync/v{self.version}"))
        manifest = Manifest.from_json(control["manifest"])
        strategy = check_strategy(control["strategy"])
        out = empty_like_manifest(manifest, self.transport.device)
        stream = ByteStream([out[t.name] for t in manifest.tensors])
        windows = buckets(stream.total, int(control["bucket_bytes"]))
        plans = [plan(strategy, b1 - b0, self.n_train, self.n_rollout) for b0, b1 in windows]
        cross = pool = 0
        gathering = None
        # Bucket k+1's receives are posted before bucket k is waited on, so the link never waits
        # for this rank to ask for the next bucket.
        posted = self._post_recvs(plans[0], 0) if windows else None
        for k, ((b0, b1), bucket) in enumerate(zip(windows, plans)):
            nxt = self._post_recvs(plans[k + 1], k + 1) if k + 1 < len(windows) else None
            works, buf = posted
            _wait(works)
            cross += sum(t.nbytes for t in bucket.received_by(self.sync_rank))
            posted = nxt
            if not bucket.chunk:
                stream.unpack(b0, b1, buf)
                continue
            # The link carries bucket k+1 while the pool all-gathers bucket k.
            _finish_gather(gathering, stream)
            gathered = torch.empty(bucket.chunk * self.n_rollout, dtype=torch.uint8, device=buf.device)
            work = self.transport.pool_all_gather(list(gathered.split(bucket.chunk)), buf)
            gathering = (work, gathered, buf, b0, b1)
            pool += bucket.chunk * (self.n_rollout - 1)
        _finish_gather(gathering, stream)
        self.transport.synchronize()
        stats = SyncStats(strategy, manifest.version, time.perf_counter() - t0, stream.total,
                          cross_sent=0, cross_recv=cross, pool_sent=pool, pool_recv=pool,
                          buckets=len(windows))
        return out, stats

    def _post_recvs(self, bucket: BucketPlan, tag: int) -> tuple[list[tuple[Work, torch.Tensor]], torch.Tensor]:
        """Post this rank's receives of a bucket into a fresh buffer: the whole bucket, or its chunk."""
        size, base = bucket.length, 0
        if bucket.chunk:
            size, base = bucket.chunk, (self.sync_rank - self.n_train) * bucket.chunk
        buf = torch.empty(size, dtype=torch.uint8, device=self.transport.device)
        works = [(self.transport.recv(buf[t.start - base:t.stop - base], t.src, tag), buf)
                 for t in bucket.received_by(self.sync_rank)]
        return works, buf

    # -- both ------------------------------------------------------------------------------

    def barrier(self) -> None:
        """Block until every member of the group reaches it."""
        self.transport.barrier()

    def close(self) -> None:
        """Leave the group; waits for every member first, so the store's host leaves last."""
        self.transport.barrier()
        self.transport.close()

    def __enter__(self) -> "SyncGroup":
        """The group itself; leaving the block closes it."""
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Close with everyone on success; on an error only release this rank's groups."""
        if exc_type is None:
            self.close()
        else:
            # Others may never reach a barrier after a failure: just release this rank's groups.
            self.transport.close()


def _wait(works: list[tuple[Work, torch.Tensor]]) -> None:
    """Wait on every pending operation (the tensors ride along so they outlive the operation)."""
    for work, _ in works:
        work.wait()


def _finish_gather(pending, stream: ByteStream) -> None:
    """Wait for a bucket's all-gather and copy its real bytes (not the padding) into the stream."""
    if pending is not None:
        work, gathered, _mine, b0, b1 = pending
        work.wait()
        stream.unpack(b0, b1, gathered[:b1 - b0])


__all__ = ["SyncGroup", "SyncStats", "STRATEGIES"]
