"""The frozen manifest of a state dict, and the byte layout both sides agree on (DESIGN §8).

A sync moves one flat byte stream: every tensor's bytes, in manifest order. The manifest
(version, names, dtypes, shapes) travels on the control channel (the rendezvous store) so a
receiver can size its buffers and rebuild the state dict without the sender's Python objects.
Buckets are fixed-size windows of that stream; `pack` and `unpack` copy one window in or out,
so neither side ever holds a second full copy of the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator, Mapping

import torch

StateDict = dict[str, torch.Tensor]


class ManifestError(ValueError):
    """A state dict or manifest that cannot be synced (non-tensor value, unknown dtype, mismatch)."""


@dataclass(frozen=True)
class TensorSpec:
    """One entry of the manifest: a tensor's name, dtype name (e.g. 'float32') and shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def torch_dtype(self) -> torch.dtype:
        """The torch dtype this entry names."""
        dtype = getattr(torch, self.dtype, None)
        if not isinstance(dtype, torch.dtype):
            raise ManifestError(f"manifest entry {self.name!r}: unknown dtype {self.dtype!r}")
        return dtype

    @property
    def nbytes(self) -> int:
        """Bytes this tensor occupies in the stream."""
        numel = 1
        for dim in self.shape:
            numel *= dim
        return numel * self.torch_dtype.itemsize


@dataclass(frozen=True)
class Manifest:
    """What a sync carries: a version and the tensors in stream order."""

    version: int
    tensors: tuple[TensorSpec, ...]

    @classmethod
    def of(cls, state_dict: Mapping[str, torch.Tensor], version: int) -> "Manifest":
        """The manifest of a state dict (its iteration order is the stream order)."""
        specs = []
        for name, value in state_dict.items():
            if not isinstance(value, torch.Tensor):
                raise ManifestError(f"state_dict[{name!r}]: not a tensor ({type(value).__name__})")
            specs.append(TensorSpec(name, str(value.dtype).removeprefix("torch."), tuple(value.shape)))
        return cls(version, tuple(specs))

    @property
    def total_bytes(self) -> int:
        """Length of the byte stream."""
        return sum(t.nbytes for t in self.tensors)

    def to_json(self) -> str:
        """The manifest as JSON, for the control channel."""
        return json.dumps({"version": self.version,
                           "tensors": [[t.name, t.dtype, list(t.shape)] for t in self.tensors]})

    @classmethod
    def from_json(cls, text: str | bytes) -> "Manifest":
        """Parse what `to_json` wrote."""
        doc = json.loads(text)
        return cls(int(doc["version"]), tuple(TensorSpec(n, d, tuple(int(x) for x in s))
                                              for n, d, s in doc["tensors"]))

    def same_layout(self, other: "Manifest") -> bool:
        """Whether two manifests describe the same stream (versions may differ)."""
        return self.tensors == other.tensors


def byte_view(tensor: torch.Tensor) -> torch.Tensor:
    """A flat uint8 view of a contiguous tensor's storage (0-d tensors included)."""
    return tensor.reshape(-1).view(torch.uint8)


def empty_like_manifest(manifest: Manifest, device: torch.device) -> StateDict:
    """Freshly allocated tensors, one per manifest entry, to receive into."""
    return {t.name: torch.empty(t.shape, dtype=t.torch_dtype, device=device) for t in manifest.tensors}


class ByteStream:
    """The concatenated bytes of a list of tensors, addressable by [start, stop) windows."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        # Non-contiguous tensors are copied once here; a contiguous one is viewed, not copied.
        self._views = [byte_view(t.detach().contiguous()) for t in tensors]
        self._starts = []
        offset = 0
        for v in self._views:
            self._starts.append(offset)
            offset += v.numel()
        self.total = offset

    def _pieces(self, start: int, stop: int) -> Iterator[tuple[torch.Tensor, int, int, int]]:
        """(view, offset in view, offset in window, length) for each tensor the window touches."""
        for view, base in zip(self._views, self._starts):
            lo, hi = max(start, base), min(stop, base + view.numel())
            if lo < hi:
                yield view, lo - base, lo - start, hi - lo
            elif base >= stop:
                return

    def pack(self, start: int, stop: int, out: torch.Tensor) -> None:
        """Copy the stream's bytes [start, stop) into the uint8 tensor `out`."""
        for view, at, to, n in self._pieces(start, stop):
            out[to:to + n].copy_(view[at:at + n])

    def unpack(self, start: int, stop: int, src: torch.Tensor) -> None:
        """Copy the uint8 tensor `src` into the stream's bytes [start, stop)."""
        for view, at, to, n in self._pieces(start, stop):
            view[at:at + n].copy_(src[to:to + n])
