"""The scheduler's settings on the command line: a named profile, `--set`, and flags that
override it (core/config.py; DESIGN §10). `simulate` and `serve` share all of it."""

from __future__ import annotations

from typing import Any, Mapping, Optional

import typer
import yaml

from rollmux.core.config import ConfigError, SchedulerConfig
from rollmux.errors import InputError

# Each scheduler flag overrides one setting of the chosen profile; a flag left out keeps the
# profile's value.
SETTING_OF_FLAG = {
    "--max-group-size": "placement.max_group_size",
    "--migration": "intra_group.migration",
    "--plan-quantile": "admission.quantile",
    "--plan": "admission.plan",
    "--plan-z": "admission.z",
    "--shrink": "regroup.shrink",
    "--regroup": "regroup.enabled",
    "--migration-scale": "regroup.migration_scale",
    "--regroup-margin": "regroup.margin",
    "--repair": "regroup.repair",
    "--consolidate": "regroup.consolidate",
    "--train-scaling": "shapes.train_scaling",
    "--elastic-rollout": "shapes.elastic_rollout",
    "--order": "intra_group.order",
    "--colocate": "colocation.enabled",
    "--colo-margin": "colocation.margin",
    "--colo-regroup": "colocation.regroup",
    "--colo-pair": "colocation.pair",
    "--colo-narrow": "colocation.narrow",
    "--colo-speed": "colocation.speed",
    "--compact": "compaction.enabled",
    "--stretch-pricing": "placement.pricing",
}
STATIC = {"regroup.shrink": False, "regroup.enabled": False, "regroup.repair": False, "compaction.enabled": False}
PROFILE_HELP = "Named configuration: shipped (the default: the best measured), paper (the published system) or groups."


def _flag(default_help: str) -> str:
    return f"{default_help} [default: the profile's]"


PROFILE = typer.Option("shipped", "--profile", help=PROFILE_HELP)
SETS = typer.Option(None, "--set", help="SETTING=VALUE overriding one setting of the profile, e.g. "
                                        "colocation.pair=false (repeatable; core/config.py).")
MAX_GROUP_SIZE = typer.Option(None, "--max-group-size", min=1, help=_flag("Most jobs per co-execution group."))
MIGRATION = typer.Option(None, "--migration/--no-migration", help=_flag("Long-tail migration at run time."))
PLAN_QUANTILE = typer.Option(None, "--plan-quantile", min=0.5, max=1.0, help=_flag(
    "Rollout quantile used for SLO admission with --plan worst; 1.0 = worst case."))
PLAN = typer.Option(None, "--plan", help=_flag(
    "SLO admission: worst (every rollout at its cap) or mean (each member's mean iteration time within its SLO "
    "with confidence, core/admission.py)."))
PLAN_Z = typer.Option(None, "--plan-z", min=0.0, help=_flag(
    "--plan mean: one-sided normal quantile of the confidence term (3.09 ~ 99.9%)."))
SHRINK = typer.Option(None, "--shrink/--no-shrink", help=_flag(
    "Release nodes a group no longer needs when members leave."))
REGROUP = typer.Option(None, "--regroup/--no-regroup", help=_flag(
    "Dissolve a group whose remaining members fit elsewhere for less."))
MIGRATION_SCALE = typer.Option(None, "--migration-scale", min=0.0, help=_flag(
    "Stretch every migration's time (state moved + cold start); 1 = calibrated."))
REGROUP_MARGIN = typer.Option(None, "--regroup-margin", min=0.0, help=_flag(
    "A regroup must save this many times what its migrations cost."))
REPAIR = typer.Option(None, "--repair/--no-repair", help=_flag(
    "Re-plan groups from measured phase times; move members a drifted group cannot keep."))
CONSOLIDATE = typer.Option(None, "--consolidate", min=0, help=_flag(
    "On any departure, also try to dissolve groups of at most N members."))
TRAIN_SCALING = typer.Option(None, "--train-scaling/--no-train-scaling", help=_flag(
    "A job may join a group by adding the training nodes it lacks (core/shapes.py)."))
ELASTIC_ROLLOUT = typer.Option(None, "--elastic-rollout/--no-elastic-rollout", help=_flag(
    "A job may roll out on fewer or more rollout nodes than nominal (core/elastic.py); live, its rollout "
    "permits name the nodes it has now, and compaction may give nodes back."))
ORDER = typer.Option(None, "--order", help=_flag(
    "Order inside a group: rr (round robin) or slo (a tight member may run more often per meta-iteration, "
    "core/slo_order.py)."))
COLOCATE = typer.Option(None, "--colocate/--no-colocate", help=_flag(
    "An arrival may run co-located on training nodes (veRL mode) when that is cheaper at its SLO "
    "(core/colocate.py); live, its rollout permits then name pool 'train'."))
COLO_MARGIN = typer.Option(None, "--colo-margin", min=0.0, help=_flag(
    "Co-located only when below this share of the disaggregated cost (unset: 1 with --colo-pair, 0.75 without)."))
COLO_REGROUP = typer.Option(None, "--colo-regroup/--no-colo-regroup", help=_flag(
    "A co-located job may later move into a group (a priced migration) when that costs less per iteration."))
COLO_PAIR = typer.Option(None, "--colo-pair/--no-colo-pair", help=_flag(
    "An arrival that would run co-located may found a group with a co-located job, which migrates into it "
    "(priced), when that saves more (core/pairing.py)."))
COLO_NARROW = typer.Option(None, "--colo-narrow/--no-colo-narrow", help=_flag(
    "With --elastic-rollout, a co-located job with more rollout than training GPUs may run on its training "
    "GPUs' nodes, its rollout narrowed (core/colo_model.py)."))
COLO_SPEED = typer.Option(None, "--colo-speed", help=_flag(
    "Co-located phases run this many times as fast as calibrated (sensitivity)."))
COMPACT = typer.Option(None, "--compact/--no-compact", help=_flag(
    "A group gives back an idle rollout node when the members pinned there can narrow onto their other nodes "
    "within their SLOs (core/compaction.py)."))
STRETCH_PRICING = typer.Option(None, "--stretch-pricing/--no-stretch-pricing", help=_flag(
    "Place each job where it adds least per iteration, the members' stretch included (core/marginal.py); "
    "off: the first valid option in Δ order."))


def given_flags(params: Mapping[str, Any]) -> dict[str, Any]:
    """The scheduler flags among a command's parameters (by name, e.g. `colo_pair` for `--colo-pair`)."""
    return {flag: params[flag[2:].replace("-", "_")] for flag in SETTING_OF_FLAG
            if flag[2:].replace("-", "_") in params}


def _parsed_sets(sets: Optional[list[str]]) -> dict[str, Any]:
    """`--set SETTING=VALUE` items as overrides (VALUE read as YAML: true, 3, 0.5, text)."""
    overrides: dict[str, Any] = {}
    for item in sets or ():
        setting, eq, value = item.partition("=")
        if not eq:
            raise InputError("--set", f"expected SETTING=VALUE, got {item!r}")
        try:
            overrides[setting.strip()] = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            raise InputError("--set", f"{setting.strip()}: not a value: {value!r}") from None
    return overrides


def scheduler_config(profile: str, flags: Mapping[str, Any], static: bool = False,
                     sets: Optional[list[str]] = None) -> SchedulerConfig:
    """The profile with `--static`, every `--set` and every given flag (`SETTING_OF_FLAG` name ->
    value, None: not given) as overrides; InputError naming the flag or setting of the first bad one."""
    overrides: dict[str, Any] = dict(STATIC) if static else {}
    overrides.update(_parsed_sets(sets))
    for flag, value in flags.items():
        if value is not None:
            setting = SETTING_OF_FLAG[flag]
            overrides[setting] = ({True: "stretch", False: "delta"}[value]
                                  if setting == "placement.pricing" else value)
    try:
        return SchedulerConfig.profile(profile).with_overrides(overrides)
    except ConfigError as exc:
        given = [f for f, setting in SETTING_OF_FLAG.items() if setting == exc.setting and flags.get(f) is not None]
        set_names = {item.partition("=")[0].strip() for item in sets or ()}
        where = ("--profile" if exc.setting == "profile" else f"{given[0]} ({exc.setting})" if given
                 else f"--set {exc.setting}" if exc.setting in set_names else exc.setting)
        raise InputError(where, exc.message) from None
