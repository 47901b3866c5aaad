"""Fixtures of the journal's tests."""

from __future__ import annotations

import pytest

from rollmux.live.journal import open_store


@pytest.fixture
def store(url):
    """An open store of each backend (the `url` fixture), closed after the test."""
    s = open_store(url)
    yield s
    s.close()
