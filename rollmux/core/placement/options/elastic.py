"""Elastic rollout (beyond Algorithm 1, DESIGN §5): the job rolls out on another count of rollout nodes.

With `shapes.elastic_rollout` a job may join a group on fewer or more rollout nodes than it
declares, its rollout time scaled by core/elastic.py's model (the member's `rollout_factor`;
training keeps its time). Evidence: docs/decisions/elastic-rollout.md.
"""

from __future__ import annotations

from rollmux.core.placement.newcomer import Newcomer


def shapes(nc: Newcomer, new_t: int = 0) -> list[tuple]:
    """The job on each allowed count k != `nc.k0` of rollout nodes, any number of them fresh,
    plus `new_t` added training nodes: Δ = the price of every added node."""
    out: list[tuple] = []
    for k in nc.counts:
        if k != nc.k0:
            out += nc.shaped(k, range(0, k + 1), new_t)
    return out
