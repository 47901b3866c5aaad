"""The wire under weight sync: torch.distributed process groups of its own (DESIGN §8, STYLE §3).

Never the trainer's default group: the sync builds its own groups from its own store (a TCPStore
the first training rank hosts, or one the caller passes), the way TRL's vLLM client builds a
stateless group beside the trainer's. Two groups: *world* (every training and rollout rank, for
the transfers across the inter-pool link) and *pool* (the rollout ranks only, for the all-gather
on their fast network). Gloo moves CPU tensors, NCCL CUDA tensors; the device follows the backend,
and the strategies above never branch on it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal, Protocol

import torch
import torch.distributed as dist

Backend = Literal["gloo", "nccl"]


class Work(Protocol):
    """A pending operation (torch's c10d Work)."""

    def wait(self) -> bool:
        """Block until it completes."""


class Transport(Protocol):
    """What the strategies need: point-to-point across the link and an all-gather in the pool."""

    device: torch.device

    def send(self, tensor: torch.Tensor, dst: int, tag: int) -> Work:
        """Start sending `tensor` to sync rank `dst`."""

    def recv(self, tensor: torch.Tensor, src: int, tag: int) -> Work:
        """Start receiving into `tensor` from sync rank `src`."""

    def pool_all_gather(self, out: list[torch.Tensor], tensor: torch.Tensor) -> Work:
        """Start an all-gather of `tensor` over the rollout pool into `out` (one per rollout rank)."""

    def barrier(self) -> None:
        """Block until every sync rank reaches it."""

    def synchronize(self) -> None:
        """Wait for the device to finish queued work (a no-op on CPU)."""

    def close(self) -> None:
        """Release the groups."""


def device_for(backend: Backend, device: torch.device | str | None = None) -> torch.device:
    """The device tensors travel on: CPU for gloo, the current (or given) CUDA device for NCCL."""
    if backend == "gloo":
        return torch.device("cpu")
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise ValueError("backend: nccl needs a CUDA device, and none is available")
        return torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    raise ValueError(f"backend: must be gloo or nccl (got {backend!r})")


def _new_group(backend: Backend, store: dist.Store, rank: int, size: int, timeout: timedelta,
               bind_addr: str | None) -> dist.ProcessGroup:
    """One process group on `store`, outside torch's global registry (so never the default group)."""
    if backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, size, opts)
    opts = dist.ProcessGroupGloo._Options()
    opts._timeout = timeout
    # Bind to the given address: in a network namespace the host name may resolve to nothing
    # reachable, and the address picks the interface (and so the link) peers reach this rank by.
    device = (dist.ProcessGroupGloo.create_device(hostname=bind_addr) if bind_addr
              else dist.ProcessGroupGloo.create_default_device())
    opts._devices = [device]
    return dist.ProcessGroupGloo(store, rank, size, opts)


class TorchTransport:
    """Transport over torch.distributed groups built from a store of the sync's own."""

    def __init__(self, store: dist.Store, sync_rank: int, n_train: int, n_rollout: int,
                 backend: Backend = "gloo", bind_addr: str | None = None,
                 device: torch.device | str | None = None, timeout_s: float = 300.0) -> None:
        self.device = device_for(backend, device)
        self.backend = backend
        timeout = timedelta(seconds=timeout_s)
        # Constructing a group is its rendezvous: it returns once every member has joined.
        self._world: dist.ProcessGroup | None = _new_group(backend, dist.PrefixStore("weightsync/world", store), sync_rank,
                                 n_train + n_rollout, timeout, bind_addr)
        self._pool = None
        if sync_rank >= n_train and n_rollout > 1:
            self._pool = _new_group(backend, dist.PrefixStore("weightsync/pool", store),
                                    sync_rank - n_train, n_rollout, timeout, bind_addr)

    def send(self, tensor: torch.Tensor, dst: int, tag: int) -> Work:
        """Start sending `tensor` to sync rank `dst`."""
        return self._world.send([tensor], dst, tag)

    def recv(self, tensor: torch.Tensor, src: int, tag: int) -> Work:
        """Start receiving into `tensor` from sync rank `src`."""
        return self._world.recv([tensor], src, tag)

    def pool_all_gather(self, out: list[torch.Tensor], tensor: torch.Tensor) -> Work:
        """Start an all-gather over the rollout pool."""
        if self._pool is None:
            raise RuntimeError("pool_all_gather: this rank is not in a rollout pool of two or more")
        return self._pool.allgather([out], [tensor])

    def barrier(self) -> None:
        """A one-element all-reduce over every sync rank (works the same on gloo and NCCL)."""
        self._world.allreduce([torch.zeros(1, device=self.device)]).wait()
        self.synchronize()

    def synchronize(self) -> None:
        """Wait for the CUDA stream under NCCL; nothing to do on CPU."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def close(self) -> None:
        """Shut the groups down (NCCL frees its communicators; gloo closes its sockets)."""
        for pg in (self._pool, self._world):
            if pg is not None and hasattr(pg, "shutdown"):
                pg.shutdown()
        self._pool = self._world = None
