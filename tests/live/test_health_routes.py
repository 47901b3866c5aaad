"""GET /healthz and /readyz through the real HTTP server: both answer without a token and name no job;
/readyz says 503, in one line, once the scheduler thread has stopped or the journal is closed."""

from __future__ import annotations

import httpx
import pytest
from factories import make_job

from rollmux.core.spec import default_cluster
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore

ADMIN = "admin-token-for-tests-0123456789"
JOB = "tenant-named-job"


@pytest.fixture
def served(tmp_path):
    """A ThreadServer on a SQLite journal with JOB placed, and an HTTP client without any token."""
    core = SchedulerCore(default_cluster().model_dump(), store=f"sqlite://{tmp_path / 'journal.db'}",
                         admin_token=ADMIN)
    core.submit(make_job(JOB).model_dump(exclude_none=True))
    server = ThreadServer(core)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            yield core, http
    finally:
        server.stop()


def _one_line_naming_no_job(text: str) -> bool:
    return text.count("\n") == 1 and text.endswith("\n") and JOB not in text


def test_healthz_answers_200_without_a_token(served):
    _, http = served
    r = http.get("/healthz")
    assert r.status_code == 200 and r.text == "ok\n"


def test_readyz_answers_200_without_a_token_on_a_healthy_server(served):
    _, http = served
    r = http.get("/readyz")
    assert r.status_code == 200 and r.text == "ready\n"


def test_readyz_is_503_once_the_scheduler_thread_has_stopped(served):
    core, http = served
    core.env.stop()  # the scheduler thread's loop returns, as if it had died
    core._thread.join(timeout=10)
    r = http.get("/readyz")
    core._stopping.set()  # (the server's teardown then skips waiting 5 s for the dead thread to answer)
    assert r.status_code == 503 and "scheduler thread has stopped" in r.text
    assert _one_line_naming_no_job(r.text)


def test_readyz_is_503_once_the_journal_is_closed(served):
    core, http = served
    core.journal.close()
    r = http.get("/readyz")
    assert r.status_code == 503 and "journal" in r.text and "journal.db" in r.text
    assert _one_line_naming_no_job(r.text)


def test_readyz_is_503_while_the_core_shuts_down(served):
    core, http = served
    core.shutdown()  # the HTTP server still answers; the core no longer schedules
    r = http.get("/readyz")
    assert r.status_code == 503 and "shutting down" in r.text


def test_healthz_still_answers_when_the_core_cannot_serve(served):
    core, http = served
    core.shutdown()
    assert http.get("/healthz").status_code == 200
