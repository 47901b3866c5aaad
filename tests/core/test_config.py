"""One configuration (core/config.py): sections, named profiles, overrides, one validation."""

from __future__ import annotations

import dataclasses

import pydantic
import pytest

from rollmux.core.config import PROFILES, ConfigError, IntraConfig, SchedulerConfig
from rollmux.core.spec import default_cluster


def test_the_defaults_are_the_shipped_profile():
    assert SchedulerConfig.profile("shipped") == SchedulerConfig()
    assert SchedulerConfig().describe() == "shipped"


def test_the_paper_profile_is_the_published_system():
    paper = SchedulerConfig.profile("paper")
    assert paper.admission.plan == "worst" and paper.placement.pricing == "delta"
    assert not (paper.shapes.elastic_rollout or paper.shapes.train_scaling)
    assert not (paper.colocation.enabled or paper.regroup.enabled or paper.regroup.shrink
                or paper.regroup.repair or paper.compaction.enabled)
    assert paper.describe() == "paper"


def test_every_profile_is_valid_and_names_only_real_settings():
    for name in PROFILES:
        assert SchedulerConfig.profile(name).changes(SchedulerConfig()) == PROFILES[name]


def test_an_unknown_profile_names_the_choices():
    with pytest.raises(ConfigError, match="unknown profile 'fast'.*shipped, paper, groups") as exc:
        SchedulerConfig.profile("fast")
    assert exc.value.setting == "profile"


def test_overrides_replace_settings_by_dotted_name_and_describe_says_which():
    cfg = SchedulerConfig.profile("paper").with_overrides({"placement.max_group_size": 3, "admission.plan": "mean"})
    assert cfg.placement.max_group_size == 3 and cfg.admission.plan == "mean"
    assert cfg.describe() == "paper (admission.plan=mean, placement.max_group_size=3)"
    assert cfg.changes(SchedulerConfig.profile("paper")) == {"admission.plan": "mean", "placement.max_group_size": 3}


@pytest.mark.parametrize("overrides, setting, message", [
    ({"admission.bogus": 1}, "admission.bogus", "no such setting"),
    ({"nosection.x": 1}, "nosection.x", "no such setting"),
    ({"placement.max_group_size": 0}, "placement.max_group_size", "greater than or equal to 1"),
    ({"colocation.speed": float("nan")}, "colocation.speed", "finite"),
    ({"admission.plan": "median"}, "admission.plan", "'worst' or 'mean'"),
    ({"admission.quantile": 0.9}, "admission.quantile", "'worst' only"),
    ({"intra_group.order": "slo"}, "intra_group.order", "'worst' only"),
])
def test_a_bad_setting_is_named(overrides, setting, message):
    with pytest.raises(ConfigError, match=message) as exc:
        SchedulerConfig().with_overrides(overrides)
    assert exc.value.setting == setting and str(exc.value).startswith(f"setting {setting}: ")


def test_the_configuration_is_frozen():
    cfg = SchedulerConfig()
    with pytest.raises(pydantic.ValidationError):
        cfg.regroup.margin = 3.0


def test_it_round_trips_through_plain_data_as_the_journal_keeps_it():
    cfg = SchedulerConfig.profile("groups").with_overrides({"colocation.margin": 0.5})
    assert SchedulerConfig.model_validate(cfg.model_dump()) == cfg


def test_the_colocation_margin_follows_pairing_unless_set():
    assert SchedulerConfig().colocation.effective_margin == 1.0
    assert SchedulerConfig().with_overrides({"colocation.pair": False}).colocation.effective_margin == 0.75
    assert SchedulerConfig().with_overrides({"colocation.margin": 0.6}).colocation.effective_margin == 0.6


def test_the_planner_view_takes_the_clusters_switch_cost_and_the_admission_settings():
    cluster = default_cluster().model_copy(update={"warm_switch_s": 7.0})
    intra = SchedulerConfig.profile("paper").with_overrides({"admission.z": 2.0}).intra_for(cluster)
    assert intra.warm_switch_s == 7.0 and intra.plan == "worst" and intra.plan_z == 2.0
    assert SchedulerConfig().intra_for(cluster).plan == "mean"


def test_the_planner_view_is_validated_by_the_settings_rules():
    intra = SchedulerConfig().intra_for(default_cluster())
    with pytest.raises(ValueError, match="intra_group.tail_worker_frac"):
        dataclasses.replace(intra, tail_worker_frac=0.0)
    with pytest.raises(ValueError, match="warm_switch_s"):
        dataclasses.replace(intra, warm_switch_s=-1.0)
    assert {f.name for f in dataclasses.fields(IntraConfig)} >= {"plan", "plan_quantile", "order", "migration"}
