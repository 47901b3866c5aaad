"""The options of a placement (DESIGN §5, Algorithm 1 and its extensions), one module per case.

Joined options put the job into a candidate group (placement/candidates.py):

* direct packing (`direct`): on existing rollout nodes and the group's training nodes, Δ = 0;
* rollout scaling (`rollout_scaling`): with fresh rollout nodes, Δ = their price;
* elastic rollout (`elastic`): on another count of rollout nodes than its nominal one, its
  rollout time scaled by core/elastic.py (docs/decisions/elastic-rollout.md);
* training scaling (`train_scaling`): into a group with fewer training nodes than the job
  needs, by adding them (docs/decisions/train-scaling.md).

A group of the job's own (`isolated`: nominal, the always-valid fallback, or on fewer rollout
nodes), the co-located mode (`colocated`, docs/decisions/colocation.md) and a new group
founded with a co-located job that moves in (`paired`, docs/decisions/colocation-pair.md)
complete them.

Each joined case yields the job's *shapes* of that case (placement/newcomer.py `shaped`), plain
tuples ordered as the search tries them under Δ pricing:

    (Δ $/h, added training nodes, elastic (k != nominal), -k, fresh rollout nodes)

so at equal Δ the nominal shape comes before elastic ones and more rollout nodes before fewer.
A candidate group offers a joined shape when it has at least k - fresh rollout nodes and the
shape adds exactly the training nodes it lacks (`train_scaling.added_nodes`). An option is a
shape completed by where it puts the job, shape + (candidate position, k); a group of the
job's own is one already (position ISOLATED, after every joined option at equal Δ and shape).
Every option of a search is distinct, and the search tries them in tuple order
(placement/search.py `ordered`).
"""

from __future__ import annotations

# An option's candidate position for a group of the job's own: after every joined one at equal Δ.
ISOLATED = 1 << 30
