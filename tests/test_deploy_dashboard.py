"""deploy/grafana/rollmux.json against a real service's GET /metrics: every metric name in every panel's PromQL
is a series the service exports (a query on a name it does not export draws an empty panel, silently), and
the exposition holds no `_created` series."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from factories import make_job
from prometheus_client.parser import text_string_to_metric_families

from rollmux.core.spec import default_cluster
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore
from rollmux.live.telemetry import Telemetry

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "rollmux.json"
ADMIN = "admin-token-for-tests-0123456789"
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01, "offload_s": 0.0}
# PromQL words that are not metric names: operators, modifiers, and what follows `by`/`without`/`on`/...
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
            "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are not functions, keywords, label names
    (in `{...}` or after by/without/on/ignoring/group_*), durations (`[5m]`) or strings."""
    expr = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)  # strings (label values, label_replace's arguments)
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range and subquery durations
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        following = expr[m.end():].lstrip()
        if m[0].lower() not in KEYWORDS and not following.startswith("("):
            names.add(m[0])
    return names


@pytest.fixture(scope="module")
def service():
    """A ThreadServer with telemetry and one job that ran an iteration: (http client, the full exposition)."""
    holder: dict = {}
    telemetry = Telemetry(lambda: holder["core"].request("metrics").result(timeout=10))
    core = holder["core"] = SchedulerCore(default_cluster().model_dump(), admin_token=ADMIN, telemetry=telemetry)
    token = core.submit(make_job("dash-job").model_dump(exclude_none=True))["token"]
    for phase in ("rollout", "train"):
        permit = core.acquire("dash-job", phase, token=token)
        core.release("dash-job", phase, {**TIMINGS, "grant_no": permit["grant_no"]}, token=token)
    with ThreadServer(core, telemetry) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        # What a scrape with the token gets (serve --metrics-token-file, as deploy/k8s runs it): every series.
        yield http, telemetry.exposition(per_job=True)[0].decode()


def exported(text: str) -> set[str]:
    """Every sample name of an exposition (counters' _total, histograms' _bucket/_sum/_count, info's _info)."""
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel of the dashboard."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], t["expr"]) for p in panels for t in p.get("targets", [])]


def test_every_panel_queries_something():
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert len(panels) >= 10 and len({p["id"] for p in panels}) == len(panels)
    for p in panels:
        assert p["targets"] and all(metric_names(t["expr"]) for t in p["targets"]), p["title"]


def test_every_metric_a_query_reads_is_one_the_service_exports(service):
    _, text = service
    names = exported(text)
    missing = {(title, name) for title, expr in queries() for name in metric_names(expr) if name not in names}
    assert not missing, f"queried but not exported: {sorted(missing)}"


def test_the_dashboard_shows_every_metric_the_service_exports(service):
    _, text = service
    read = {n for _, e in queries() for n in metric_names(e)}
    unread = [f.name for f in text_string_to_metric_families(text) if not {s.name for s in f.samples} & read]
    assert not unread, f"exported but on no panel: {unread}"


def test_a_name_the_service_does_not_export_is_caught(service):
    _, text = service
    assert metric_names('sum by (le) (rate(rollmux_permit_wait_bucket{job="x"}[5m])) / on(pool) up') == {
        "rollmux_permit_wait_bucket", "up"}
    assert not {"rollmux_permit_wait_bucket", "up"} & exported(text)


def test_metrics_hold_no_created_series(service):
    http, text = service
    served = http.get("/metrics")
    assert served.status_code == 200 and "rollmux_admissions_total" in served.text
    for body in (served.text, text):
        assert not [ln for ln in body.splitlines() if "_created" in ln]
