"""Fixtures of the live plane's tests."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture(params=["sqlite", "redis"])
def url(request, tmp_path):
    """A fresh, empty store URL of each backend (a new file, or a new key prefix)."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'journal.db'}"  # sqlite:///abs/path
    port = request.getfixturevalue("redis_port")
    return f"redis://127.0.0.1:{port}/0?prefix=test-{uuid.uuid4().hex}"
