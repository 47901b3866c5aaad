"""Direct packing (DESIGN §5, Algorithm 1 case 1): the job on rollout nodes its group already has."""

from __future__ import annotations

from rollmux.core.placement.newcomer import Newcomer


def shapes(nc: Newcomer, new_t: int = 0) -> list[tuple]:
    """The job on `nc.k0` existing rollout nodes (none fresh) and its group's first training
    nodes, plus `new_t` added ones (training scaling): Δ = their price, else 0. A group offers
    it when it has at least k0 rollout nodes."""
    return nc.shaped(nc.k0, range(0, 1), new_t)
