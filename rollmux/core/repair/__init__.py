"""The repair side (DESIGN §5a): what the scheduler does to groups after placement.

Beside placement (core/placement/), on the same admission and pricing: moving jobs between
groups (`moves`: reserved slots, priced migrations, owed stalls), regrouping at departures
(`regroup`: shrink and dissolve), co-located pairing's mover side (`pairing`) and rollout
compaction (`compaction`). These modules call the placement package's public functions;
placement never imports them.
"""
