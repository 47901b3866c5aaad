"""A job's state on its device or in host memory, and the trainer-to-generator weight handoff.

Library-agnostic pieces an adapter reuses (docs/adapters.md): `Offloadable` moves a module's
tensors (and its optimizer's state) to host copies and back, and measures their bytes for the
shim's `host_memory` hook; `WeightSync` runs a `rollmux.weightsync` group of one training rank and
one rollout rank per generator copy inside one process.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from typing import Any, Callable, Iterator

import torch

from rollmux.weightsync import SyncGroup

SYNC_STRATEGY = "topology"


def host_copy(t: torch.Tensor) -> torch.Tensor:
    """A host copy of `t` (pinned when CUDA is there, so the copy back can be asynchronous)."""
    host = t.detach().to("cpu", copy=True)
    return host.pin_memory() if torch.cuda.is_available() else host


class Offloadable:
    """A module's tensors (and its optimizer's state, once the Trainer built one): resident, or in host copies.

    Tied tensors (an LM head sharing the embedding's weight) are one tensor under two names: each
    moves once, and the state dict read from the host copies names it under both."""

    def __init__(self, module: torch.nn.Module, optimizer: Callable[[], Any] = lambda: None) -> None:
        self.module, self._optimizer = module, optimizer
        self.device = next(module.parameters()).device
        self.host: dict[str, dict] | None = None  # {"model": name -> tensor, "optim": (param id, key) -> tensor}

    @property
    def resident(self) -> bool:
        """Whether the live tensors hold the state (measured on the parameters, not a flag)."""
        return all(p.numel() > 0 for p in self.module.parameters())

    def _tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Every parameter and buffer once, under its first name."""
        return [*self.module.named_parameters(), *self.module.named_buffers()]

    def _canonical(self) -> dict[str, str]:
        """Every name a tensor has (tied ones included) -> the name `_tensors` gives it."""
        first = {id(t): name for name, t in self._tensors()}
        every = [*self.module.named_parameters(remove_duplicate=False),
                 *self.module.named_buffers(remove_duplicate=False)]
        return {name: first[id(t)] for name, t in every}

    def _optim_state(self) -> dict:
        opt = self._optimizer()
        return {} if opt is None else getattr(opt, "optimizer", opt).state  # accelerate wraps torch's optimizer

    def offload(self) -> None:
        """Move every tensor to its host copy; the live tensors become empty (the objects stay)."""
        if self.host is not None:
            return
        host: dict[str, dict] = {"model": {}, "optim": {}}
        for name, t in self._tensors():
            host["model"][name] = host_copy(t.data)
            t.data = torch.empty(0, dtype=t.dtype, device=t.device)
        for p, st in self._optim_state().items():
            for k, v in st.items():
                if isinstance(v, torch.Tensor):
                    host["optim"][(id(p), k)] = host_copy(v)
                    st[k] = torch.empty(0, dtype=v.dtype, device=v.device)
        self.host = host

    def onload(self) -> None:
        """Copy the host copies back into the live tensors and release them."""
        if self.host is None:
            return
        host, self.host = self.host, None
        for name, t in self._tensors():
            t.data = host["model"][name].to(self.device, copy=True)
        for p, st in self._optim_state().items():
            for k in st:
                if (id(p), k) in host["optim"]:
                    st[k] = host["optim"][(id(p), k)].to(self.device, copy=True)

    def twin(self) -> "Offloadable":
        """Another copy of the module with the same weights, where these are (resident or in host
        copies); its optimizer state is not copied (a generator copy has none)."""
        twin = Offloadable(copy.deepcopy(self.module))  # offloaded: a copy of empty tensors, cheap
        if self.host is not None:
            twin.host = {"model": {k: host_copy(v) for k, v in self.host["model"].items()}, "optim": {}}
        return twin

    @contextlib.contextmanager
    def host_view(self) -> Iterator[torch.nn.Module]:
        """Inside the block the module's tensors are its host copies (while offloaded), so code that
        reads the module's weights (a library's weight push) reads them without an onload."""
        if self.host is None:
            yield self.module
            return
        live = self._tensors()
        for name, t in live:
            t.data = self.host["model"][name]
        try:
            yield self.module
        finally:
            for _, t in live:
                t.data = torch.empty(0, dtype=t.dtype, device=self.device)

    def host_bytes(self) -> int:
        """Bytes the host copies hold (0 while resident)."""
        if self.host is None:
            return 0
        return sum(t.nbytes for part in self.host.values() for t in part.values())

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The module's state dict, from the live tensors or the host copies (not copied)."""
        live = self.module.state_dict()
        if self.host is None:
            return {k: v.detach() for k, v in live.items()}
        canonical = self._canonical()
        return {k: self.host["model"][canonical[k]] for k in live}

    def load(self, weights: dict[str, torch.Tensor]) -> None:
        """New weights: into the live tensors, or into the host copies while offloaded."""
        if self.host is None:
            self.module.load_state_dict(weights)
            return
        missing = set(self.module.state_dict()) ^ set(weights)
        if missing:
            raise KeyError(f"Offloadable.load: the weights' names differ from the module's: {sorted(missing)[:5]}")
        canonical = self._canonical()
        self.host["model"].update({canonical[k]: v.to("cpu") for k, v in weights.items()})


def in_threads(fn: Callable[[Any], Any], items: list) -> list:
    """fn(item) for every item at once, one thread each (a collective's ranks); the first error is raised."""
    out: list = [None] * len(items)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            out[i] = fn(items[i])
        except BaseException as exc:  # noqa: BLE001 -- re-raised below, in the caller's thread
            errors.append(exc)
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


class WeightSync:
    """Training rank 0 and one rollout rank per generator slot, in a `rollmux.weightsync` group of their own."""

    def __init__(self, slots: int, strategy: str = SYNC_STRATEGY) -> None:
        store = torch.distributed.HashStore()  # in-process ranks; a deployment passes a TCPStore
        ranks = [("train", 0)] + [("rollout", j) for j in range(slots)]
        groups = in_threads(lambda r: SyncGroup(r[0], r[1], 1, slots, store=store, strategy=strategy), ranks)
        self.train, self.rollout = groups[0], groups[1:]
        self.seconds: list[float] = []

    def push(self, weights: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """Send `weights` to every rollout rank; what each received (bit-identical to `weights`)."""
        got = in_threads(lambda i: self.train.send(weights) if i < 0 else self.rollout[i].receive(),
                          [-1, *range(len(self.rollout))])
        self.seconds.append(got[0].seconds)
        return [w for w, _ in got[1:]]

    def close(self, wait: bool = True) -> None:
        """Leave the group: every rank at once, meeting at a barrier; `wait=False` (after a failure, when a
        rank may never get there) only releases each rank's process groups."""
        if wait:
            in_threads(lambda g: g.close(), [self.train, *self.rollout])
        else:
            for g in (self.train, *self.rollout):
                g.transport.close()

