"""SyncGroup over real gloo on loopback: bit-identical weights and the bytes each strategy moves.

Ranks run as threads of this process (one group each, a shared in-memory store), and once as
spawned processes over a TCPStore, as a deployment runs them.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import queue
import socket
import threading

import pytest
import torch
import torch.distributed as dist

from rollmux.weightsync import Manifest, ManifestError, SyncGroup
from rollmux.weightsync.synthetic import synthetic_state_dict

TIMEOUT_S = 120  # a hang fails the test instead of blocking the suite


def odd_model(seed: int = 0) -> dict[str, torch.Tensor]:
    """Odd sizes (shard and bucket edges fall inside tensors) and mixed dtypes."""
    g = torch.Generator().manual_seed(seed)
    return {"embed": torch.randn(37, 11, generator=g), "bias": torch.randn(101, generator=g).to(torch.bfloat16),
            "norm": torch.randn(13, generator=g).to(torch.float16), "scale": torch.tensor(0.75),
            "ids": torch.randint(0, 2**40, (7,), generator=g), "mask": torch.rand(9, generator=g) > 0.5,
            "empty": torch.empty(0, 5), "head": torch.randn(6, 19, generator=g).t()}  # non-contiguous


def run_threads(n: int, m: int, states: list[dict], strategy: str, bucket_mb: float) -> tuple[list, list]:
    """N training and M rollout threads; each training rank sends every state in turn.

    Returns (per training rank: [SyncStats...], per rollout rank: [(state_dict, SyncStats)...]).
    """
    store = dist.HashStore()
    sent: list[list] = [[] for _ in range(n)]
    got: list[list] = [[] for _ in range(m)]
    errors: list[BaseException] = []

    def member(role: str, rank: int) -> None:
        try:
            group = SyncGroup(role, rank, n, m, store=store, bind_addr="127.0.0.1", strategy=strategy,
                              bucket_mb=bucket_mb, timeout_s=TIMEOUT_S)
            for sd in states:
                if role == "train":
                    sent[rank].append(group.send(sd))
                else:
                    got[rank].append(group.receive())
            group.close()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=member, args=("train", i), daemon=True) for i in range(n)]
    threads += [threading.Thread(target=member, args=("rollout", j), daemon=True) for j in range(m)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S + 30)
    assert not any(t.is_alive() for t in threads), "a sync rank hung"
    if errors:
        raise errors[0]
    return sent, got


def assert_identical(received: dict, expected: dict) -> None:
    assert list(received) == list(expected)
    for k, v in expected.items():
        r = received[k]
        assert r.dtype == v.dtype and r.shape == v.shape and r.is_contiguous(), k
        assert torch.equal(r, v), k


@pytest.mark.parametrize("strategy", ["flat", "topology"])
@pytest.mark.parametrize("n,m", [(1, 1), (2, 2), (2, 3), (3, 2), (4, 4), (3, 5)])
@pytest.mark.parametrize("bucket_bytes", [97, 1000, 2**20])
def test_every_rollout_rank_gets_bit_identical_weights(strategy, n, m, bucket_bytes):
    model = odd_model()
    _, got = run_threads(n, m, [model], strategy, bucket_bytes / 2**20)
    for (sd, stats) in (g[0] for g in got):
        assert stats.strategy == strategy and stats.version == 1
        assert_identical(sd, model)


@pytest.mark.parametrize("n,m", [(2, 3), (3, 2), (4, 4), (3, 5)])
def test_topology_sends_one_nth_across_per_training_rank_and_flat_m_copies(n, m):
    model = synthetic_state_dict(200_000, seed=1)
    bucket = 30_011  # odd: shard edges fall inside tensors
    total = sum(t.numel() * t.element_size() for t in model.values())
    n_buckets = -(-total // bucket)

    sent, got = run_threads(n, m, [model], "topology", bucket / 2**20)
    cross = [s[0].cross_sent for s in sent]
    assert sum(cross) == total  # one copy crosses the link
    assert all(abs(c - total / n) <= n * n_buckets for c in cross), cross  # 1/N each
    assert sum(g[0][1].cross_recv for g in got) == total
    assert all(g[0][1].pool_recv > 0 for g in got)  # the rest came over the pool's network
    for g in got:
        assert_identical(g[0][0], model)

    sent, got = run_threads(n, m, [model], "flat", bucket / 2**20)
    assert sum(s[0].cross_sent for s in sent) == m * total  # M copies cross
    assert all(g[0][1].cross_recv == total and g[0][1].pool_recv == 0 for g in got)


def test_successive_versions_arrive_in_order():
    first, second = odd_model(0), odd_model(1)
    second["embed"] = second["embed"] * 3
    _, got = run_threads(2, 3, [first, second], "topology", 500 / 2**20)
    for rank in got:
        (a, sa), (b, sb) = rank
        assert (sa.version, sb.version) == (1, 2)
        assert_identical(a, first)
        assert_identical(b, second)


class _NoWire:
    """A transport that must never be used (the check below fails before any transfer)."""

    device = torch.device("cpu")

    def __getattr__(self, name):
        raise AssertionError(f"transport.{name} used")


def test_a_training_rank_with_another_layout_is_refused():
    store = dist.HashStore()
    lead = odd_model()
    store.set("weightsync/v1", json.dumps({"manifest": Manifest.of(lead, 1).to_json(),
                                           "strategy": "topology", "bucket_bytes": 100}))
    other = dict(lead, embed=torch.zeros(37, 12))
    group = SyncGroup("train", 1, 2, 2, store=store, transport=_NoWire())
    with pytest.raises(ManifestError, match="training rank 1's state dict differs in layout"):
        group.send(other)


@pytest.mark.parametrize("kwargs,message", [
    (dict(role="trainer", rank=0, n_train=1, n_rollout=1), "role: must be 'train' or 'rollout'"),
    (dict(role="train", rank=2, n_train=2, n_rollout=1), "rank: a train rank must be in 0..1"),
    (dict(role="rollout", rank=-1, n_train=1, n_rollout=3), "rank: a rollout rank must be in 0..2"),
    (dict(role="train", rank=0, n_train=0, n_rollout=1), "n_train: must be a positive integer"),
    (dict(role="train", rank=0, n_train=1, n_rollout=1, strategy="ring"), "strategy: must be one of"),
    (dict(role="train", rank=0, n_train=1, n_rollout=1, bucket_mb=0), "bucket_mb: must be positive"),
    (dict(role="train", rank=0, n_train=1, n_rollout=1, backend="mpi"), "backend: must be gloo or nccl"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SyncGroup(**kwargs, store=dist.HashStore())


def test_each_side_calls_its_own_method():
    train = SyncGroup("train", 0, 1, 1, store=dist.HashStore(), transport=_NoWire())
    with pytest.raises(RuntimeError, match="only rollout ranks receive"):
        train.receive()
    rollout = SyncGroup("rollout", 0, 1, 1, store=dist.HashStore(), transport=_NoWire())
    with pytest.raises(RuntimeError, match="only training ranks send"):
        rollout.send({})


# -- separate processes, as a deployment runs them ------------------------------------------------

def _process_rank(role: str, rank: int, n: int, m: int, port: int, results) -> None:
    """A spawned rank: flat then topology over a TCPStore; rollout ranks report identity and bytes."""
    try:
        model = synthetic_state_dict(300_000, seed=5)
        with SyncGroup(role, rank, n, m, master_port=port, bind_addr="127.0.0.1", bucket_mb=0.05,
                       timeout_s=TIMEOUT_S) as group:
            for strategy in ("flat", "topology"):
                if role == "train":
                    stats = group.send(model, strategy=strategy)
                    results.put((role, rank, strategy, True, stats.cross_sent, stats.model_bytes))
                else:
                    sd, stats = group.receive()
                    same = list(sd) == list(model) and all(torch.equal(sd[k], model[k]) for k in model)
                    results.put((role, rank, strategy, same, stats.cross_recv, stats.model_bytes))
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        results.put((role, rank, "error", False, repr(exc), 0))


def test_spawned_processes_over_tcp_store_get_identical_weights():
    n, m = 2, 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_process_rank, args=(role, r, n, m, port, results))
             for role, k in (("train", n), ("rollout", m)) for r in range(k)]
    for p in procs:
        p.start()
    reports = []
    try:
        for _ in range(2 * (n + m)):
            reports.append(results.get(timeout=TIMEOUT_S + 60))
    except queue.Empty:
        pytest.fail(f"only {len(reports)} of {2 * (n + m)} reports arrived: {reports}")
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    assert not [r for r in reports if r[2] == "error"], reports
    assert all(r[3] for r in reports), reports
    total = reports[0][5]
    by = {(r[0], r[2]): 0 for r in reports}
    for r in reports:
        by[(r[0], r[2])] += r[4]
    assert by[("train", "flat")] == m * total and by[("rollout", "flat")] == m * total
    assert by[("train", "topology")] == total and by[("rollout", "topology")] == total
