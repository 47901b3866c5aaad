"""Weight sync from the training pool to the rollout pool over torch.distributed (DESIGN §8).

Two strategies, one code path for Gloo (CPU) and NCCL (CUDA), on process groups of the sync's
own (never the trainer's default group):

- ``"flat"``: every rollout rank receives a whole copy across the inter-pool link, from training
  rank ``j mod N``; M copies cross the slow link.
- ``"topology"``: the weights, flattened into buckets, are cut into N shards; training rank i sends
  its 1/N across the link (scatter) and the rollout ranks all-gather over their own fast network;
  one copy crosses the slow link, so with the link the bottleneck the sync is about M times faster.

A frozen manifest (version, names, dtypes, shapes) goes through the rendezvous store; receivers
rebuild a state dict bit-identical to the sender's. Usage, one process per rank (N = M = 2)::

    from rollmux.weightsync import SyncGroup

    # training rank i (i = 0 hosts the rendezvous store at master_addr:master_port)
    with SyncGroup("train", i, 2, 2, master_addr="10.0.0.1", master_port=29600) as g:
        stats = g.send(model.state_dict())          # SyncStats: seconds, cross_sent bytes...

    # rollout rank j
    with SyncGroup("rollout", j, 2, 2, master_addr="10.0.0.1", master_port=29600) as g:
        weights, stats = g.receive()                # the sender's strategy and version apply
        rollout_model.load_state_dict(weights)

Pass ``strategy="flat"`` to compare, ``backend="nccl"`` on GPUs, ``bind_addr=`` to pick the
address (and so the network) peers reach this rank by, ``store=`` to reuse a store of your own.
`rollmux bench sync` measures both strategies over a throttled link between two network
namespaces (`rollmux.weightsync.testbed`, `rollmux.weightsync.bench`).

This package imports nothing else from rollmux; torch is loaded on first use of a name below.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# name -> submodule; resolved on first access, so `import rollmux.weightsync.testbed` needs no torch.
_EXPORTS = {
    "SyncGroup": "sync", "SyncStats": "sync",
    "Manifest": "manifest", "TensorSpec": "manifest", "ManifestError": "manifest",
    "STRATEGIES": "plan", "Transfer": "plan",
    "TorchTransport": "transport", "Transport": "transport",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Load an exported name from its submodule on first use (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
