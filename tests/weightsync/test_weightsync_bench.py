"""`rollmux bench sync` on a real throttled link between two network namespaces (the suite runs as root)."""
from __future__ import annotations

import json
import os
import subprocess

import pytest
from typer.testing import CliRunner

from rollmux.cli import app
from rollmux.weightsync import testbed
from rollmux.weightsync.testbed import sweep_stale, throttled_pools

runner = CliRunner()


def our_namespaces() -> list[str]:
    """Testbed namespaces this test process created and still holds."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in listing.splitlines() if line.startswith(f"rmxsync-{os.getpid()}x")]


def test_topology_beats_flat_on_a_throttled_link_and_weights_are_identical(tmp_path):
    out = tmp_path / "sync.json"
    res = runner.invoke(app, ["bench", "sync", "--train-ranks", "2", "--rollout-ranks", "2", "--model-mb", "8",
                              "--link-mbit", "100", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert {"train_ranks", "rollout_ranks", "model_mb", "link_mbit", "flat_s", "topology_s", "speedup",
            "identical"} <= set(doc)
    assert (doc["train_ranks"], doc["rollout_ranks"], doc["model_mb"], doc["link_mbit"]) == (2, 2, 8, 100)
    assert doc["identical"] is True
    assert doc["speedup"] > 1.5, doc
    # The veth carried one copy under topology and two under flat: the rollout ranks' all-gather
    # stayed on their namespace's own network, off the throttled link.
    model_mb = doc["model_bytes"] / 2**20
    assert model_mb <= doc["topology_link_mb"] < 1.1 * model_mb, doc
    assert 2 * model_mb <= doc["flat_link_mb"] < 2.2 * model_mb, doc
    assert doc["topology_cross_mb_per_train_rank"] == pytest.approx([model_mb / 2] * 2, abs=0.01)
    assert "speedup" in res.output and "topology" in res.output
    assert our_namespaces() == []  # torn down


def test_the_testbed_throttles_and_is_removed_even_on_failure():
    with pytest.raises(RuntimeError, match="boom"):
        with throttled_pools(50) as tb:
            names = our_namespaces()
            assert sorted(names) == sorted([tb.namespace("train"), tb.namespace("rollout")])
            qdisc = subprocess.run(["tc", "-n", tb.namespace("train"), "qdisc", "show", "dev",
                                    tb.interface("train")], capture_output=True, text=True).stdout
            assert "tbf" in qdisc and "50Mbit" in qdisc, qdisc
            raise RuntimeError("boom")
    assert our_namespaces() == []


def test_a_killed_runs_namespaces_are_swept():
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid is gone: namespaces named after it are leftovers
    name = f"rmxsync-{dead.pid}x0-train"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert name in sweep_stale()
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_without_root_it_says_so_in_one_line_and_exits_2(monkeypatch):
    monkeypatch.setattr(testbed.os, "geteuid", lambda: 1000)
    res = runner.invoke(app, ["bench", "sync", "--train-ranks", "1", "--rollout-ranks", "1", "--model-mb", "1"])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "needs root" in lines[0], res.output


@pytest.mark.parametrize("flag,value,message", [
    ("--train-ranks", "0", "--train-ranks: must be an integer from 1 to 64"),
    ("--rollout-ranks", "65", "--rollout-ranks: must be an integer from 1 to 64"),
    ("--model-mb", "-1", "--model-mb: must be a positive number"),
    ("--link-mbit", "0", "--link-mbit: must be a positive number"),
])
def test_bad_flags_are_named_with_exit_2(flag, value, message):
    res = runner.invoke(app, ["bench", "sync", flag, value])
    assert res.exit_code == 2 and message in res.output, res.output
