"""The files a journal creates (the database, its -wal and -shm, the lock) are the owner's only,
whatever the umask."""

from __future__ import annotations

import os
import stat

import pytest

from rollmux.live.journal import open_store


@pytest.fixture
def umask_022():
    """The default umask of most systems (files 0644), restored after the test."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_journal_and_its_wal_shm_and_lock_are_0600(tmp_path, umask_022):
    path = tmp_path / "j.db"
    store = open_store(str(path))
    try:
        store.append("config", {"v": 1})
        modes = {name: _mode(f"{path}{name}") for name in ("", "-wal", "-shm", ".lock")}
    finally:
        store.close()
    assert modes == {"": 0o600, "-wal": 0o600, "-shm": 0o600, ".lock": 0o600}


def test_a_journal_an_older_version_left_0644_is_made_0600_when_opened(tmp_path, umask_022):
    path = tmp_path / "j.db"
    open_store(str(path)).close()
    for name in ("", ".lock"):
        os.chmod(f"{path}{name}", 0o644)
    open_store(str(path)).close()
    assert (_mode(path), _mode(f"{path}.lock")) == (0o600, 0o600)


def test_a_repaired_journal_and_its_backup_are_0600(tmp_path, umask_022):
    from rollmux.live.journal.repair import repair_store
    path = tmp_path / "j.db"
    store = open_store(str(path))
    store.append("config", {"v": 1})
    store.close()
    path.write_bytes(path.read_bytes()[:5000])  # truncated: repaired page by page
    report = repair_store(str(path))
    assert (_mode(path), _mode(report.backup)) == (0o600, 0o600)
