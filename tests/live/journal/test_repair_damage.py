"""Page-level damage of an SQLite journal (torn, truncated, overwritten pages): `rollmux journal
check` names the first bad page and record, `repair` keeps the damaged file aside and recovers
every intact record a replay can use, and the service starts on the repaired store."""

from __future__ import annotations

import json
import sqlite3
import struct
from pathlib import Path

import httpx
import pytest
from factories import make_job

from rollmux.core.spec import default_cluster
from rollmux.live.journal import open_store
from rollmux.live.journal.repair import check_store, repair_store
from rollmux.live.local import ProcessServer
from rollmux.live.service import SchedulerCore

TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01, "offload_s": 0.0}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[bytes, dict[int, tuple[str, str]]]:
    """A journal written by the service (eight jobs, ten iterations, two finished): its bytes and records."""
    path = tmp_path_factory.mktemp("journal") / "j.db"
    core = SchedulerCore(default_cluster().model_dump(), store=str(path), snapshot_every=0)
    tok = {f"j{i}": core.submit(make_job(f"j{i}", rollout=100, train=100, slo=2.0).model_dump(exclude_none=True))
           ["token"] for i in range(8)}
    for _ in range(10):
        for jid in tok:
            for phase in ("rollout", "train"):
                core.acquire(jid, phase, tok[jid])
                core.release(jid, phase, TIMINGS, tok[jid])
    core.finish("j6", tok["j6"])
    core.finish("j7", tok["j7"])
    core.shutdown()
    conn = sqlite3.connect(path)
    records = {seq: (kind, text) for seq, kind, text in conn.execute("SELECT seq, kind, payload FROM records")}
    conn.close()
    return path.read_bytes(), records


def _pages(data: bytes, kind: int) -> list[int]:
    """0-based indexes of the pages of one b-tree kind (0x0D table leaf, 0x05 table interior)."""
    size = struct.unpack(">H", data[16:18])[0]
    return [i for i in range(1, len(data) // size) if data[i * size] == kind]


def _overwrite(data: bytes, at: int, chunk: bytes) -> bytes:
    return data[:at] + chunk + data[at + len(chunk):]


def _flip(data: bytes, at: int, n: int) -> bytes:
    return _overwrite(data, at, bytes(b ^ 0xFF for b in data[at:at + n]))


SIZE = 4096
DAMAGE = {
    "truncated_at_half": lambda d: d[:len(d) // 2],
    "truncated_mid_page": lambda d: d[:len(d) * 3 // 4 + 1234],
    "truncated_after_two_pages": lambda d: d[:2 * SIZE + 100],
    "header_flipped": lambda d: _flip(d, 0, 32),
    "interior_page_flipped": lambda d: _flip(d, _pages(d, 0x05)[0] * SIZE, 64),
    "leaf_page_flipped": lambda d: _flip(d, _pages(d, 0x0D)[-3] * SIZE + 1500, 200),
    "leaf_page_zeroed": lambda d: _overwrite(d, _pages(d, 0x0D)[4] * SIZE, bytes(SIZE)),
    "schema_page_overwritten": lambda d: _overwrite(d, 100, b"\x07" * 300),
}


@pytest.fixture(params=sorted(DAMAGE))
def damaged(request, pristine, tmp_path) -> tuple[Path, bytes, dict[int, tuple[str, str]], bytes]:
    """A damaged copy of the journal: its path, its bytes, the pristine records and bytes."""
    data, records = pristine
    bad = DAMAGE[request.param](data)
    assert bad != data
    path = tmp_path / "j.db"
    path.write_bytes(bad)
    return path, bad, records, data


def _intact(bad: bytes, records: dict, data: bytes) -> list[int]:
    """The records from record 1 up to the first whose page the damage touched (found by their bytes)."""
    out = []
    for seq in sorted(records):
        at = data.find(records[seq][1].encode())
        page = at // SIZE
        if at < 0 or bad[page * SIZE:(page + 1) * SIZE] != data[page * SIZE:(page + 1) * SIZE]:
            break
        out.append(seq)
    return out


def _stored(path: Path) -> dict[int, tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return {seq: (kind, text) for seq, kind, text in conn.execute("SELECT seq, kind, payload FROM records")}
    finally:
        conn.close()


def test_check_names_the_first_bad_page_or_record(damaged):
    report = check_store(str(damaged[0]))
    assert not report.ok and ("page" in report.first_bad or "record" in report.first_bad)


def test_repair_keeps_the_damaged_file_byte_for_byte(damaged):
    path, bad, _, _ = damaged
    report = repair_store(str(path))
    assert Path(report.backup).read_bytes() == bad


def test_repair_recovers_every_intact_record_and_nothing_else(damaged):
    path, bad, records, data = damaged
    repair_store(str(path))
    stored = _stored(path)
    assert set(_intact(bad, records, data)) <= set(stored)
    assert all(records[seq] == row for seq, row in stored.items())


def test_repair_says_what_it_lost(damaged):
    path, _, records, _ = damaged
    report = repair_store(str(path))
    assert report.kept + report.lost <= len(records) and report.kept == len(_stored(path))
    if report.lost:
        assert (report.first_lost, report.last_lost) >= (report.kept + 1, report.first_lost)


def test_the_repaired_journal_checks_ok(damaged):
    repair_store(str(damaged[0]))
    assert check_store(str(damaged[0])).ok


def test_the_service_starts_on_the_repaired_store_with_every_job_a_record_survived_for(damaged):
    path = damaged[0]
    repair_store(str(path))
    submitted = {json.loads(text)["job"]["job_id"] for kind, text in _stored(path).values() if kind == "submit"}
    if not _stored(path):  # nothing survived: a fresh service on it (config given again) starts
        assert open_store(str(path), readonly=True).records() == []
        return
    core = SchedulerCore(None, store=str(path))
    try:
        assert submitted <= set(core.state.jobs)
    finally:
        core.shutdown()


def _late_journal(path: Path) -> dict[str, str]:
    """Four jobs iterate, then three more are submitted (j-late-*), and one of those finishes; the tokens."""
    core = SchedulerCore(default_cluster().model_dump(), store=str(path), snapshot_every=0)
    try:
        early = {f"j{i}": core.submit(make_job(f"j{i}", rollout=100, train=100, slo=2.0)
                                      .model_dump(exclude_none=True))["token"] for i in range(4)}
        for _ in range(12):
            for jid, tok in early.items():
                for phase in ("rollout", "train"):
                    core.acquire(jid, phase, tok)
                    core.release(jid, phase, TIMINGS, tok)
        late = {f"late{i}": core.submit(make_job(f"late{i}", rollout=100, train=100, slo=2.0)
                                        .model_dump(exclude_none=True))["token"] for i in range(3)}
        core.finish("late2", late["late2"])
    finally:
        core.shutdown()
    return late


def test_jobs_submitted_past_a_gap_are_placed_anew_with_their_tokens(tmp_path):
    path = tmp_path / "j.db"
    late = _late_journal(path)
    data = path.read_bytes()
    path.write_bytes(_overwrite(data, _pages(data, 0x0D)[2] * SIZE, bytes(SIZE)))  # a page well before the end
    report = repair_store(str(path))
    assert report.lost > 0 and set(report.requeued) == {"late0", "late1"}  # late2 left: not placed again
    assert "late0" in report.summary()
    core = SchedulerCore(None, store=str(path))
    try:
        for jid in ("late0", "late1"):
            assert core.identify(late[jid]) == jid  # the job's own token still works
            assert core.state.jobs[jid].active and core.state.jobs[jid].group_id is not None  # placed at start
        assert "late2" not in core.state.jobs
    finally:
        core.shutdown()


def test_rollmux_serve_on_the_repaired_store_answers_each_surviving_job_with_its_own_token(tmp_path):
    path = tmp_path / "j.db"
    late = _late_journal(path)
    data = path.read_bytes()
    path.write_bytes(_overwrite(data, _pages(data, 0x0D)[2] * SIZE, bytes(SIZE)))
    repair_store(str(path))
    server = ProcessServer(str(path), tmp_path, profile=None)  # the journal's own cluster and configuration
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for jid in ("late0", "late1"):
                got = http.get(f"/v1/jobs/{jid}", headers={"Authorization": f"Bearer {late[jid]}"})
                assert got.status_code == 200 and got.json()["status"] == "running"
            assert http.get("/v1/jobs/late2", headers={"Authorization": f"Bearer {late['late2']}"}).status_code == 401
    finally:
        server.signal()
