"""Direct packing (DESIGN §5, Algorithm 1 case 1): the job on rollout nodes its group already has."""

from __future__ import annotations

from rollmux.core.group import Group
from rollmux.core.placement.newcomer import Newcomer


def options(g: Group, pos: int, nc: Newcomer, new_t: int = 0) -> list[tuple]:
    """The job on `nc.k0` of candidate `g`'s existing rollout nodes (none fresh) and its first
    training nodes, plus `new_t` added ones (training scaling): Δ = their price, else 0. None
    when the group has fewer rollout nodes than the job needs."""
    if g.n_rollout < nc.k0:
        return []
    return nc.shaped(pos, nc.k0, range(0, 1), new_t)
