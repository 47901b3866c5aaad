"""A seeded stand-in for a model's state dict, and a digest to compare copies across processes.

The shapes are odd on purpose (shard and bucket boundaries fall inside tensors) and the dtypes
mixed (float32, bfloat16, float16, int64, a 0-d scalar), as a real checkpoint's are.
"""

from __future__ import annotations

import hashlib
from typing import Mapping

import torch

from .manifest import StateDict, byte_view

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def synthetic_state_dict(model_bytes: int, seed: int = 0, layers: int = 8) -> StateDict:
    """About `model_bytes` of weights in `layers` odd-shaped layers, every value from a seeded generator."""
    if model_bytes < 1:
        raise ValueError(f"model_bytes: must be positive (got {model_bytes!r})")
    gen = torch.Generator().manual_seed(seed)
    sd: StateDict = {"embed.scale": torch.tensor(0.5, dtype=torch.float16)}
    budget = max(1, model_bytes // layers)
    for k in range(layers):
        dtype = _DTYPES[k % len(_DTYPES)]
        numel = max(1, budget // dtype.itemsize)
        rows = 2 * int(torch.randint(max(1, int(numel ** 0.5) // 4), max(2, int(numel ** 0.5)), (1,),
                                     generator=gen)) + 1
        cols = max(1, numel // rows)
        # randn, not random bytes: a NaN would make torch.equal fail on identical copies.
        sd[f"layers.{k}.weight"] = torch.randn(rows, cols, generator=gen).to(dtype)
        sd[f"layers.{k}.bias"] = torch.randn(rows, generator=gen).to(torch.bfloat16)
    sd["step"] = torch.randint(0, 2**40, (3,), generator=gen, dtype=torch.int64)
    return sd


def state_dict_bytes(state_dict: Mapping[str, torch.Tensor]) -> int:
    """Total bytes of a state dict's tensors."""
    return sum(t.numel() * t.element_size() for t in state_dict.values())


def digest(state_dict: Mapping[str, torch.Tensor]) -> str:
    """A hash of every tensor's name, dtype, shape and bytes, in order (equal digests: identical copies)."""
    h = hashlib.blake2b(digest_size=16)
    for name, t in state_dict.items():
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(byte_view(t.detach().contiguous()).cpu().numpy())  # the buffer, not a copy
    return h.hexdigest()
