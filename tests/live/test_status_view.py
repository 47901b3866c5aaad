"""`rollmux status` tables render the service's status."""

from __future__ import annotations

from factories import GROUPS, TRAIN_HEAVY_COLO, config, make_job
from rich.console import Console

from rollmux.core.spec import default_cluster
from rollmux.live.service import SchedulerCore
from rollmux.live.status_view import groups_table, jobs_table, summary_line


def _render(*things) -> str:
    console = Console(width=200, record=True)
    for t in things:
        console.print(t)
    return console.export_text()


def test_status_tables_show_groups_turns_and_jobs_against_their_slo():
    core = SchedulerCore(default_cluster().model_dump())
    try:
        toks = {j: core.submit(make_job(j).model_dump(exclude_none=True))["token"] for j in "ab"}
        core.acquire("a", "rollout", toks["a"])
        core.release("a", "rollout", {"wait_s": 0, "onload_s": 0, "run_s": 0.5, "offload_s": 0}, toks["a"])
        st = core.status()
    finally:
        core.shutdown()
    text = _render(groups_table(st), jobs_table(st), summary_line(st))
    assert "a b" in text                      # members in cyclic order
    assert "b | a" in text                    # b's turn on the rollout node, a's on the train node
    assert "0.5 s" in text                    # a's measured rollout
    assert "2 requests refused" not in text and "permits granted" in text


def test_a_colocated_job_is_a_row_of_its_own():
    core = SchedulerCore(default_cluster().model_dump(), cfg=config(GROUPS, colocate=True))
    try:
        core.submit(make_job("x", rollout=100, train=300, colo=TRAIN_HEAVY_COLO).model_dump(exclude_none=True))
        st = core.status()
    finally:
        core.shutdown()
    text = _render(groups_table(st))
    assert "0 (co-located)" in text and "x (rollout and training)" in text
