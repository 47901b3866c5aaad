"""The pure parts of weight sync: who sends which bytes (plan), the manifest, the byte stream."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmux.weightsync.manifest import ByteStream, Manifest, ManifestError, empty_like_manifest
from rollmux.weightsync.plan import buckets, check_strategy, flat_plan, shard_bounds, topology_plan

sizes = st.integers(min_value=1, max_value=5000)
ranks = st.integers(min_value=1, max_value=9)


@settings(max_examples=200, deadline=None)
@given(length=sizes, n=ranks, m=ranks)
def test_topology_sends_each_byte_across_once_each_training_rank_its_own_shard(length, n, m):
    p = topology_plan(length, n, m)
    covered = sorted((t.start, t.stop) for t in p.transfers)
    # Disjoint, contiguous, covering the bucket: one copy crosses the link.
    assert covered[0][0] == 0 and covered[-1][1] == length
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))
    for i in range(n):
        lo, hi = shard_bounds(length, n, i)
        assert sum(t.nbytes for t in p.sent_by(i)) == hi - lo
        assert abs((hi - lo) - length / n) < n  # 1/N, within N bytes
    for j in range(m):
        got = p.received_by(n + j)
        lo, hi = j * -(-length // m), min(length, (j + 1) * -(-length // m))
        assert sum(t.nbytes for t in got) == max(0, hi - lo)
        assert all(lo <= t.start and t.stop <= hi for t in got)  # only into its own chunk
    assert p.chunk == (-(-length // m) if m > 1 else 0)


@settings(max_examples=100, deadline=None)
@given(length=sizes, n=ranks, m=ranks)
def test_flat_sends_a_whole_copy_to_every_rollout_rank(length, n, m):
    p = flat_plan(length, n, m)
    assert [(t.src, t.dst, t.start, t.stop) for t in p.transfers] == \
        [(j % n, n + j, 0, length) for j in range(m)]
    assert sum(t.nbytes for t in p.transfers) == m * length and p.chunk == 0


def test_equal_pools_pair_each_training_rank_with_its_rollout_rank():
    p = topology_plan(1001, 4, 4)
    assert [(t.src, t.dst) for t in p.transfers] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert [t.nbytes for t in p.transfers] == [251, 251, 251, 248]


def test_buckets_cover_the_stream():
    assert buckets(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert buckets(0, 4) == []


def test_unknown_strategy_is_named():
    with pytest.raises(ValueError, match="strategy: must be one of flat, topology"):
        check_strategy("ring")


def _mixed() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return {"w": torch.randn(5, 7, generator=g), "h": torch.randn(3, generator=g).to(torch.bfloat16),
            "s": torch.tensor(2.5, dtype=torch.float16), "i": torch.arange(4, dtype=torch.int64),
            "b": torch.tensor([True, False, True]), "e": torch.empty(0, 3),
            "t": torch.randn(4, 6, generator=g).t()}  # non-contiguous


def test_manifest_round_trips_through_json():
    m = Manifest.of(_mixed(), version=7)
    back = Manifest.from_json(m.to_json())
    assert back == m and back.version == 7
    assert [t.dtype for t in m.tensors] == ["float32", "bfloat16", "float16", "int64", "bool", "float32",
                                            "float32"]
    assert m.total_bytes == 140 + 6 + 2 + 32 + 3 + 0 + 96


def test_manifest_refuses_a_non_tensor_and_an_unknown_dtype():
    with pytest.raises(ManifestError, match=r"state_dict\['lr'\]: not a tensor"):
        Manifest.of({"lr": 0.1}, 1)
    with pytest.raises(ManifestError, match="unknown dtype 'float99'"):
        Manifest.from_json('{"version": 1, "tensors": [["x", "float99", [2]]]}').total_bytes


@pytest.mark.parametrize("window", [1, 3, 17, 1000])
def test_byte_stream_pack_then_unpack_rebuilds_every_tensor(window):
    src = _mixed()
    m = Manifest.of(src, 1)
    dst = empty_like_manifest(m, torch.device("cpu"))
    a, b = ByteStream(list(src.values())), ByteStream(list(dst.values()))
    for lo, hi in buckets(a.total, window):
        buf = torch.empty(hi - lo, dtype=torch.uint8)
        a.pack(lo, hi, buf)
        b.unpack(lo, hi, buf)
    for k in src:
        assert dst[k].dtype == src[k].dtype and dst[k].shape == src[k].shape and torch.equal(dst[k], src[k]), k
