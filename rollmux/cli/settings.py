"""The scheduler's settings on the command line: a named profile, `--set`, and flags that
override it (core/config.py; DESIGN §10). `simulate` and `serve` share all of it."""

from __future__ import annotations

from typing import Any, Mapping, Optional

import typer
import yaml

from rollmux.core.config import ConfigError, SchedulerConfig
from rollmux.errors import InputError

# Each scheduler flag overrides one setting of the chosen profile (a flag left out keeps the
# profile's value): flag -> (setting, help). A flag of a yes/no setting is `--x/--no-x`.
FLAGS: dict[str, tuple[str, str]] = {
    "--max-group-size": ("placement.max_group_size", "Most jobs per co-execution group."),
    "--migration": ("intra_group.migration", "Long-tail migration at run time."),
    "--plan-quantile": ("admission.quantile", "Rollout quantile planned with --plan worst; 1.0 = worst case."),
    "--plan": ("admission.plan", "SLO admission: worst (every rollout at its cap) or mean (each member's mean "
                                 "iteration time within its SLO with confidence, core/placement/admission.py)."),
    "--plan-z": ("admission.z", "--plan mean: one-sided normal quantile of the confidence term (3.09 ~ 99.9%)."),
    "--shrink": ("regroup.shrink", "Release nodes a group no longer needs when members leave."),
    "--regroup": ("regroup.enabled", "Dissolve a group whose remaining members fit elsewhere for less."),
    "--migration-scale": ("regroup.migration_scale", "Stretch every migration's time; 1 = calibrated."),
    "--regroup-margin": ("regroup.margin", "A regroup must save this many times what its migrations cost."),
    "--repair": ("regroup.repair", "Re-plan groups from measured phase times; move members they cannot keep."),
    "--consolidate": ("regroup.consolidate", "On any departure, also try to dissolve groups of at most N members."),
    "--train-scaling": ("shapes.train_scaling", "A job may join a group by adding the training nodes it lacks."),
    "--elastic-rollout": ("shapes.elastic_rollout", "A job may roll out on fewer or more rollout nodes than "
                                                    "nominal; live, its rollout permits name the nodes it has now."),
    "--order": ("intra_group.order", "Order inside a group: rr (round robin) or slo (a tight member may run "
                                     "more often per meta-iteration, core/slo_order.py)."),
    "--colocate": ("colocation.enabled", "An arrival may run co-located on training nodes (veRL mode) when that "
                                         "is cheaper at its SLO; live, its rollout permits then name pool 'train'."),
    "--colo-margin": ("colocation.margin", "Co-located only below this share of the disaggregated cost (unset: "
                                           "1 with --colo-pair, 0.75 without)."),
    "--colo-regroup": ("colocation.regroup", "A co-located job may later move into a group (a priced migration)."),
    "--colo-pair": ("colocation.pair", "An arrival that would run co-located may found a group with a "
                                       "co-located job, which migrates into it (priced), when that saves more."),
    "--colo-fold": ("colocation.fold", "A group's last member may move to co-location (a priced migration) when "
                                       "that saves; an arrival may then found a group with two co-located jobs."),
    "--colo-narrow": ("colocation.narrow", "With --elastic-rollout, a 16:8 job may run co-located on its "
                                           "training GPUs' nodes, its rollout narrowed."),
    "--colo-speed": ("colocation.speed", "Co-located phases run this many times as fast as calibrated."),
    "--compact": ("compaction.enabled", "A group gives back an idle rollout node its members can do without."),
    "--stretch-pricing": ("placement.pricing", "Place each job where it adds least per iteration, the members' "
                                               "stretch included; off: the first valid option in Δ order."),
}
SETTING_OF_FLAG = {flag: setting for flag, (setting, _) in FLAGS.items()}
_YES_NO = {"--stretch-pricing"}  # (placement.pricing is stretch or delta)
_BOUNDS = {"--max-group-size": {"min": 1}, "--plan-quantile": {"min": 0.5, "max": 1.0}, "--plan-z": {"min": 0.0},
           "--migration-scale": {"min": 0.0}, "--regroup-margin": {"min": 0.0}, "--consolidate": {"min": 0},
           "--colo-margin": {"min": 0.0}}
STATIC = {"regroup.shrink": False, "regroup.enabled": False, "regroup.repair": False, "compaction.enabled": False}
PROFILE_HELP = "Named configuration: shipped (the default: the best measured), paper (the published system) or groups."


def _option(flag: str) -> Any:
    """The typer option of a scheduler flag: unset by default, so the profile's value stands."""
    setting, text = FLAGS[flag]
    section, _, key = setting.partition(".")
    default = getattr(getattr(SchedulerConfig(), section), key)
    decl = f"{flag}/--no-{flag[2:]}" if isinstance(default, bool) or flag in _YES_NO else flag
    return typer.Option(None, decl, help=f"{text} [default: the profile's]", **_BOUNDS.get(flag, {}))


OPTION = {flag: _option(flag) for flag in FLAGS}
PROFILE = typer.Option("shipped", "--profile", help=PROFILE_HELP)
SETS = typer.Option(None, "--set", help="SETTING=VALUE overriding one setting of the profile, e.g. "
                                        "colocation.pair=false (repeatable; core/config.py).")


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
