"""The scheduler settings a version 1 or 2 `config` journal record meant (core/records.py's `upgrade`).

Those records held flat fields; each is read here as the sectioned setting it now is
(core/config.py), and a setting they lack keeps what those services ran.
"""

from __future__ import annotations

from rollmux.core.config import SchedulerConfig

# A version 1 or 2 `config` record's flat fields -> the setting each now is.
_LEGACY = {
    "max_group_size": "placement.max_group_size", "shrink": "regroup.shrink", "regroup": "regroup.enabled",
    "migration_scale": "regroup.migration_scale", "regroup_margin": "regroup.margin",
    "repair": "regroup.repair", "batch_order": "placement.batch_order", "consolidate": "regroup.consolidate",
    "train_scaling": "shapes.train_scaling", "elastic_rollout": "shapes.elastic_rollout",
    "colocate": "colocation.enabled", "colo_speed": "colocation.speed", "colo_margin": "colocation.margin",
    "colo_narrow": "colocation.narrow", "colo_regroup": "colocation.regroup", "colo_pair": "colocation.pair",
    "compact": "compaction.enabled", "compact_every_s": "compaction.every_s",
}
_LEGACY_INTRA = {
    "migration": "intra_group.migration", "tail_worker_frac": "intra_group.tail_worker_frac",
    "start_ratio": "intra_group.start_ratio", "migration_overhead_s": "intra_group.migration_overhead_s",
    "best_order_max": "intra_group.best_order_max", "order": "intra_group.order", "max_rate": "intra_group.max_rate",
    "plan": "admission.plan", "plan_quantile": "admission.quantile", "plan_z": "admission.z",
    "plan_chains": "admission.chains", "plan_length": "admission.length",
}


def legacy_config(flat: dict, version: int) -> SchedulerConfig:
    """The SchedulerConfig a version 1 or 2 config record meant: every field it holds, by its
    current setting; a setting it lacks keeps what those services ran (their defaults)."""
    old = {"admission.plan": "worst", "placement.pricing": "delta", "shapes.elastic_rollout": False,
           "colocation.enabled": False, "colocation.regroup": False, "colocation.pair": False,
           "regroup.repair": False, "compaction.enabled": False}
    overrides = dict(old)
    overrides.update({_LEGACY[k]: v for k, v in flat.items() if k in _LEGACY})
    overrides.update({_LEGACY_INTRA[k]: v for k, v in flat.get("intra", {}).items() if k in _LEGACY_INTRA})
    if flat.get("stretch_pricing"):
        overrides["placement.pricing"] = "stretch"
    if version < 2:
        # Version 1 services journaled the flat config's former default (elastic_rollout on) and
        # ignored it: their jobs were placed on nominal shapes, and so they stay.
        overrides["shapes.elastic_rollout"] = False
    return SchedulerConfig().with_overrides(overrides)
