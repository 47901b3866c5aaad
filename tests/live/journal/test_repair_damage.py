"""Page-level damage of an SQLite journal (torn, truncated, overwritten pages): `rollmux journal
check` names the first bad page and record, `repair` keeps the damaged file aside and recovers
every intact record (replayed, or kept unreplayed past a gap), and the service starts on the
repaired store knowing every job a surviving record names."""

from __future__ import annotations

import json
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from factories import make_job

from rollmux.core.spec import default_cluster
from rollmux.live.journal import open_store
from rollmux.live.journal.repair import check_store, repair_store
from rollmux.live.local import ProcessServer
from rollmux.live.service import SchedulerCore


def timings(n: int) -> dict:
    """A release's timings, different in each iteration `n` (so that no two records have the same bytes)."""
    return {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01 + 0.001 * n, "offload_s": 0.0}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[bytes, dict[int, tuple[str, str]]]:
    """A journal written by the service (eight jobs, ten iterations, two finished): its bytes and records."""
    path = tmp_path_factory.mktemp("journal") / "j.db"
    core = SchedulerCore(default_cluster().model_dump(), store=str(path), snapshot_every=0)
    tok = {f"j{i}": core.submit(make_job(f"j{i}", rollout=100, train=100, slo=2.0).model_dump(exclude_none=True))
           ["token"] for i in range(8)}
    for n in range(10):
        for jid in tok:
            for phase in ("rollout", "train"):
                core.acquire(jid, phase, tok[jid])
                core.release(jid, phase, timings(n), tok[jid])
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


def _live_leaves(data: bytes) -> list[int]:
    """The leaf pages (1-based) of the records table in a sound journal, as SQLite's dbstat lists them
    (a freed page may still hold an older copy of a row: only these hold the live ones)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.deserialize(data[:18] + b"\x01\x01" + data[20:])  # WAL mode off: a deserialized copy has no WAL
        return [n for (n,) in conn.execute("SELECT pageno FROM dbstat WHERE name = 'records' AND pagetype = 'leaf'")]
    finally:
        conn.close()


def _intact(bad: bytes, records: dict, data: bytes) -> list[int]:
    """Every record whose leaf page the damage left as it was."""
    pages = {n: data[(n - 1) * SIZE:n * SIZE] for n in _live_leaves(data)}
    out = []
    for seq in sorted(records):
        page = next(n for n, chunk in pages.items() if records[seq][1].encode() in chunk)
        if bad[(page - 1) * SIZE:page * SIZE] == pages[page]:
            out.append(seq)
    return out


def _stored(path: Path, table: str = "records") -> dict[int, tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return {seq: (kind, text) for seq, kind, text in conn.execute(f"SELECT seq, kind, payload FROM {table}")}
    finally:
        conn.close()


def _replayed(path: Path, records: dict) -> dict[int, tuple[str, str]]:
    """The repaired journal's records that are the damaged one's own, at their own seqs (a prefix)."""
    out = {}
    for seq, row in sorted(_stored(path).items()):
        if records.get(seq) != row:
            break
        out[seq] = row
    return out


def _named(value: object) -> set[str]:
    """Every job id a record's payload names."""
    if isinstance(value, dict):
        return set().union(*(({v} if k == "job_id" and isinstance(v, str) else _named(v)) for k, v in value.items()))
    if isinstance(value, list):
        return set().union(set(), *(_named(v) for v in value))
    return set()


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
    recovered = {**_replayed(path, records), **_stored(path, "salvaged")}
    assert set(_intact(bad, records, data)) <= set(recovered)
    assert all(records[seq] == row for seq, row in recovered.items())


def test_records_written_after_the_replayed_run_are_submits_and_departures_read_from_the_pages(damaged):
    path, _, records, _ = damaged
    report = repair_store(str(path))
    after = [row for seq, row in _stored(path).items() if seq not in _replayed(path, records)]
    assert all(row in records.values() for row in after)  # no job's submit was lost here: nothing reissued
    assert {kind for kind, _ in after} <= {"submit", "leave"} and not report.reissued


def test_repair_says_what_it_lost(damaged):
    path, _, records, _ = damaged
    report = repair_store(str(path))
    recovered = set(_replayed(path, records)) | set(_stored(path, "salvaged"))
    missing = set(range(1, max(recovered, default=0) + 1)) - recovered
    assert report.lost == len(missing) and report.kept == len(_stored(path))
    if missing:
        assert (report.first_lost, report.last_lost) == (min(missing), max(missing))


def test_the_repaired_journal_checks_ok(damaged):
    repair_store(str(damaged[0]))
    assert check_store(str(damaged[0])).ok


def test_the_service_starts_on_the_repaired_store_with_every_job_a_record_survived_for(damaged):
    path, bad, records, data = damaged
    report = repair_store(str(path))
    if not _stored(path):  # nothing replays (record 1 is lost): a fresh service on it (config given again) starts
        assert open_store(str(path), readonly=True).records() == []
        return
    intact = _intact(bad, records, data)
    named = set().union(*(_named(json.loads(records[seq][1])) for seq in intact))
    left = {json.loads(records[seq][1])["job_id"] for seq in intact if records[seq][0] == "leave"}
    core = SchedulerCore(None, store=str(path))
    try:
        assert named <= set(core.state.jobs) and not report.unplaced
        assert left == {j for j, r in core.state.jobs.items() if not r.active}  # a surviving departure holds
    finally:
        core.shutdown()


def _late_journal(path: Path) -> dict[str, str]:
    """Four jobs iterate, then three more are submitted (j-late-*), and one of those finishes; the tokens."""
    core = SchedulerCore(default_cluster().model_dump(), store=str(path), snapshot_every=0)
    try:
        early = {f"j{i}": core.submit(make_job(f"j{i}", rollout=100, train=100, slo=2.0)
                                      .model_dump(exclude_none=True))["token"] for i in range(4)}
        for n in range(12):
            for jid, tok in early.items():
                for phase in ("rollout", "train"):
                    core.acquire(jid, phase, tok)
                    core.release(jid, phase, timings(n), tok)
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
    assert report.lost > 0 and set(report.requeued) == {"late0", "late1", "late2"} and report.left == ("late2",)
    assert "late0" in report.summary()
    core = SchedulerCore(None, store=str(path))
    try:
        for jid in ("late0", "late1"):
            assert core.identify(late[jid]) == jid  # the job's own token still works
            assert core.state.jobs[jid].active and core.state.jobs[jid].group_id is not None  # placed at start
        assert core.state.jobs["late2"].status == "done"  # it finished past the gap: known, as it left
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
            got = {jid: http.get(f"/v1/jobs/{jid}", headers={"Authorization": f"Bearer {tok}"})
                   for jid, tok in late.items()}
            assert {jid: (r.status_code, r.json()["status"]) for jid, r in got.items()} == {
                "late0": (200, "running"), "late1": (200, "running"), "late2": (200, "done")}
    finally:
        server.signal()


def _burst_journal(path: Path) -> dict[int, tuple[str, str]]:
    """Thirty jobs submitted one after another (a submit, then its placement, each): the records."""
    core = SchedulerCore(default_cluster().model_dump(), store=str(path), snapshot_every=0)
    try:
        for i in range(30):
            core.submit(make_job(f"b{i:02d}", rollout=100, train=100, slo=2.0).model_dump(exclude_none=True))
    finally:
        core.shutdown()
    return _stored(path)


def test_a_job_whose_submit_is_lost_is_queued_again_under_a_new_token_read_from_its_placement(tmp_path):
    path = tmp_path / "j.db"
    records = _burst_journal(path)
    data = path.read_bytes()
    pages = {n: data[(n - 1) * SIZE:n * SIZE] for n in _live_leaves(data)}
    page_of = {seq: next(n for n, chunk in pages.items() if text.encode() in chunk)
               for seq, (_, text) in records.items()}
    # A job whose submit ends one leaf page and whose placement (the next record) starts the next.
    seq = next(q for q in sorted(records)[1:] if records[q][0] == "submit" and records[q + 1][0] == "place"
               and page_of[q] != page_of[q + 1] and page_of[q] != page_of[1])
    job = json.loads(records[seq][1])["job"]["job_id"]
    path.write_bytes(_overwrite(data, (page_of[seq] - 1) * SIZE, bytes(SIZE)))
    report = repair_store(str(path))
    assert job in report.reissued and report.tokens_file is not None and job in report.summary()
    tokens = json.loads(Path(report.tokens_file).read_text())
    assert Path(report.tokens_file).stat().st_mode & 0o777 == 0o600 and tokens[job] not in report.summary()
    core = SchedulerCore(None, store=str(path))
    try:
        assert core.identify(tokens[job]) == job and core.state.jobs[job].active
    finally:
        core.shutdown()


def test_a_second_page_repair_keeps_what_the_first_kept_unreplayed(tmp_path):
    path = tmp_path / "j.db"
    _late_journal(path)
    data = path.read_bytes()
    path.write_bytes(_overwrite(data, _pages(data, 0x0D)[2] * SIZE, bytes(SIZE)))
    repair_store(str(path))
    first = _stored(path, "salvaged")
    again = path.read_bytes()
    path.write_bytes(_flip(again, 0, 32))  # the repaired file's header damaged in turn
    report = repair_store(str(path))
    assert first and set(first.items()) <= set(_stored(path, "salvaged").items()) and report.salvaged >= len(first)


def test_journal_check_counts_what_a_page_repair_kept_unreplayed(tmp_path):
    path = tmp_path / "j.db"
    _late_journal(path)
    data = path.read_bytes()
    path.write_bytes(_overwrite(data, _pages(data, 0x0D)[2] * SIZE, bytes(SIZE)))
    repaired = subprocess.run([sys.executable, "-m", "rollmux.cli", "journal", "repair", str(path)],
                              capture_output=True, text=True, timeout=120)
    check = subprocess.run([sys.executable, "-m", "rollmux.cli", "journal", "check", str(path)],
                           capture_output=True, text=True, timeout=120)
    salvaged = len(_stored(path, "salvaged"))
    assert repaired.returncode == 0 and f"{salvaged} more kept unreplayed in table 'salvaged'" in repaired.stdout
    assert check.returncode == 0 and f"{salvaged} more kept unreplayed by a repair: ok" in check.stdout
