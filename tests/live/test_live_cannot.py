"""The live plane respects the modes a job cannot take (`JobSpec.cannot`): the same core as the simulator
decides, so a job that cannot run co-located is never placed co-located through the service either."""

from __future__ import annotations

import pytest

from rollmux.core.config import SchedulerConfig
from rollmux.core.spec import default_cluster
from rollmux.core.vocabulary import Mode
from rollmux.live.service import SchedulerCore, ServiceError
from factories import TRAIN_HEAVY_COLO, make_job

TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01, "offload_s": 0.0}


def _record(cannot: list[str] | None = None) -> dict:
    """A train-heavy 8:8 job the shipped profile runs co-located (cheaper on its own H800 node)."""
    rec = make_job("x", rollout=100.0, train=300.0, slo=2.0, colo=TRAIN_HEAVY_COLO).model_dump(
        mode="json", exclude_none=True)
    if cannot is not None:
        rec["cannot"] = cannot
    return rec


def _core(store: str | None = None) -> SchedulerCore:
    return SchedulerCore(default_cluster().model_dump(), SchedulerConfig.profile("shipped"), store=store)


@pytest.mark.parametrize("cannot, case, mode, rollout_nodes", [
    (None, "colocated", "colocated", []), (["colocate"], "isolated", "disaggregated", [0])])
def test_a_job_that_cannot_run_colocated_is_placed_disaggregated(cannot, case, mode, rollout_nodes):
    core = _core()
    try:
        got = core.submit(_record(cannot))
        assert (got["case"], got["mode"], got["rollout_nodes"]) == (case, mode, rollout_nodes)
        grant = core.acquire("x", "rollout", got["token"])
        assert grant["pool"] == ("train" if cannot is None else "rollout")
        core.release("x", "rollout", TIMINGS, got["token"])
        assert core.status()["jobs"]["x"]["status"] == "running"
    finally:
        core.shutdown()


def test_a_job_that_cannot_migrate_its_tail_is_never_told_its_rollout_is_tail_bound():
    cfg = SchedulerConfig.profile("shipped").with_overrides({"colocation.enabled": False})
    core = SchedulerCore(default_cluster().model_dump(), cfg)
    try:
        tok = {}
        for j, cannot in (("a", ["tail_migration"]), ("b", [])):  # complementary: one rollout node shared
            rec = make_job(j, rollout=100, train=100, slo=2.0, tail_frac=0.3, cannot=cannot).model_dump(
                mode="json", exclude_none=True)
            got = core.submit(rec)
            assert got["group_id"] == 0 and got["rollout_nodes"] == [0]
            tok[j] = got["token"]
        for j, share, tail in (("a", 0.0, False), ("b", 0.3, True)):
            assert core.acquire(j, "rollout", tok[j])["tail_share"] == share
            assert core.request("progress", core.caller(tok[j], j), j, 9, 10).result() == {"tail": tail}
            core.release(j, "rollout", TIMINGS, tok[j])
    finally:
        core.shutdown()


def test_the_modes_a_job_cannot_take_survive_a_restart(tmp_path):
    store = str(tmp_path / "journal.db")
    core = _core(store)
    try:
        assert core.submit(_record(["tail_migration", "colocate"]))["case"] == "isolated"
        groups = core.dump()["groups"]
    finally:
        core.shutdown()
    again = SchedulerCore(None, store=store)
    try:
        assert again.dump()["groups"] == groups
        assert again.state.planning_spec("x").cannot == (Mode.COLOCATE, Mode.TAIL_MIGRATION)
    finally:
        again.shutdown()


def test_an_unknown_mode_is_refused_naming_the_field():
    core = _core()
    try:
        with pytest.raises(ServiceError, match="field cannot.*unknown mode 'bogus'"):
            core.submit(_record(["bogus"]))
    finally:
        core.shutdown()
