"""One pool of the sync benchmark: `python -m rollmux.weightsync.bench_worker ...` (run by bench.py).

Started once per pool inside that pool's namespace, it imports torch once, builds the weights
(training pool), then forks one process per rank, so eight ranks cost two torch imports, not
eight. Each rank runs the flat strategy, then the topology one, in the same group, each between
two barriers; the launcher prints one JSON line with every rank's seconds and byte counts, the
digest of the weights it holds afterwards, and (training rank 0) the bytes its namespace's end of
the link sent meanwhile: the whole train-to-rollout traffic.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import queue
import sys
import traceback

from .plan import STRATEGIES
from .testbed import tx_bytes


def _args(argv: list[str] | None) -> argparse.Namespace:
    """The launcher's command line."""
    p = argparse.ArgumentParser(prog="rollmux.weightsync.bench_worker")
    p.add_argument("--role", choices=("train", "rollout"), required=True)
    p.add_argument("--n-train", type=int, required=True)
    p.add_argument("--n-rollout", type=int, required=True)
    p.add_argument("--master-addr", required=True)
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("--bind-addr", required=True)
    p.add_argument("--model-bytes", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bucket-mb", type=float, default=4.0)
    p.add_argument("--timeout-s", type=float, default=300.0)
    p.add_argument("--link-if", default="", help="Training rank 0 counts this interface's sent bytes.")
    return p.parse_args(argv)


def _rank(a: argparse.Namespace, rank: int, weights, held: str) -> dict:
    """One rank's two syncs; its report."""
    from .sync import SyncGroup
    from .synthetic import digest

    count_link = a.link_if and a.role == "train" and rank == 0
    group = SyncGroup(a.role, rank, a.n_train, a.n_rollout, master_addr=a.master_addr,
                      master_port=a.master_port, bind_addr=a.bind_addr, bucket_mb=a.bucket_mb,
                      timeout_s=a.timeout_s)
    out = {"role": a.role, "rank": rank}
    for strategy in STRATEGIES:
        group.barrier()
        tx0 = tx_bytes(a.link_if) if count_link else 0
        if weights is not None:
            stats = group.send(weights, strategy=strategy)
        else:
            received, stats = group.receive()
        group.barrier()
        tx1 = tx_bytes(a.link_if) if count_link else 0
        if weights is None:
            held = digest(received)
            del received
        out[strategy] = {"seconds": stats.seconds, "model_bytes": stats.model_bytes,
                         "cross_sent": stats.cross_sent, "cross_recv": stats.cross_recv,
                         "pool_sent": stats.pool_sent, "digest": held, "link_tx_bytes": tx1 - tx0}
    group.close()
    return out


def _child(a: argparse.Namespace, rank: int, weights, held: str, results) -> None:
    """A forked rank: its report, or its error, goes back on the queue."""
    try:
        results.put(("ok", _rank(a, rank, weights, held)))
    except BaseException:  # noqa: BLE001 - reported to the launcher, which fails the run
        results.put(("error", f"{a.role} rank {rank}: {traceback.format_exc().strip().splitlines()[-1]}"))
        sys.exit(1)


def main(argv: list[str] | None = None) -> None:
    """Fork the pool's ranks, gather their reports, print them as one JSON line."""
    a = _args(argv)
    import torch  # after argument parsing: --help stays fast

    from .synthetic import digest, synthetic_state_dict

    # Many ranks share few cores: one intra-op thread each keeps packing from oversubscribing.
    torch.set_num_threads(1)
    weights = synthetic_state_dict(a.model_bytes, a.seed) if a.role == "train" else None
    held = digest(weights) if weights is not None else ""
    # Fork after the import and the weights: children share both; no thread or group exists yet.
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    n = a.n_train if a.role == "train" else a.n_rollout
    procs = [ctx.Process(target=_child, args=(a, r, weights, held, results)) for r in range(n)]
    for p in procs:
        p.start()
    reports = []
    try:
        while len(reports) < n:
            try:
                status, body = results.get(timeout=a.timeout_s + 60)
            except queue.Empty:
                raise SystemExit(f"{a.role} pool: no report within {a.timeout_s + 60:.0f} s")
            if status != "ok":
                raise SystemExit(body)
            reports.append(body)
    finally:
        for p in procs:  # only the ranks forked above
            if p.is_alive() and len(reports) < n:
                p.kill()
            p.join()
    sys.stdout.write(json.dumps(sorted(reports, key=lambda r: r["rank"])) + "\n")


if __name__ == "__main__":
    main()
