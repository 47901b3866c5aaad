"""What `rollmux demo` prints and writes, as units (tests/test_packaging.py runs the demo itself once):
progress on stderr, a line per job and iteration; the JSON alone where --json says; the timeline
picture only where --png says; "cluster up" naming the Ray nodes started, by pool."""

from __future__ import annotations

from types import SimpleNamespace

from typer.testing import CliRunner

from rollmux.cli import app
from rollmux.harness import demo
from rollmux.harness.demo_jobs import progress_line
from rollmux.harness.demo_launch import PoolCluster, Progress, started_by_pool

ROWS = [{"job": "heavy", "phase": "rollout", "node": "rollout-0", "slots": [0], "start": 0.0, "end": 0.4},
        {"job": "heavy", "phase": "train", "node": "train-0", "slots": [0], "start": 0.4, "end": 0.7}]


def test_the_demo_says_what_it_does_on_stderr_only(capsys):
    demo.sayer()("heavy it 3/12 rollout 0.41 s train 0.30 s")
    got = capsys.readouterr()
    assert got.out == "" and got.err == "demo: heavy it 3/12 rollout 0.41 s train 0.30 s\n"


def test_a_progress_line_names_the_iteration_and_its_phases_seconds():
    line = progress_line(3, 12, 0.4123, 0.2999)
    assert line.split(" ", 1)[1] == "it 3/12 rollout 0.41 s train 0.30 s"


def test_progress_forwards_each_jobs_complete_progress_lines_labelled(tmp_path):
    said: list[str] = []
    progress = Progress(said.append)
    heavy, solo = tmp_path / "heavy.log", tmp_path / "solo-small.log"
    heavy.write_text("ray warning\n" + progress_line(1, 2, 0.5, 0.25) + "\n" + progress_line(2, 2, 0.5, 0.25)[:12])
    progress.follow("heavy", heavy)
    progress.follow("solo small", solo)  # (no log yet)
    assert progress.poll() == 1
    with open(heavy, "a") as f:  # the partial line completes
        f.write(progress_line(2, 2, 0.5, 0.25)[12:] + "\n")
    solo.write_text(progress_line(1, 2, 0.1, 0.2) + "\n")
    assert progress.poll() == 2 and progress.poll() == 0
    assert said == ["heavy it 1/2 rollout 0.50 s train 0.25 s", "heavy it 2/2 rollout 0.50 s train 0.25 s",
                    "solo small it 1/2 rollout 0.10 s train 0.20 s"]


def test_the_timeline_picture_is_drawn_only_where_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert demo.picture(ROWS, None) is None and list(tmp_path.iterdir()) == []
    png = tmp_path / "out" / "t.png"
    png.parent.mkdir()
    assert demo.picture(ROWS, png) == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and list(tmp_path.iterdir()) == [png.parent]


def test_the_cli_asks_for_no_picture_without_png_and_prints_nothing_with_json(tmp_path, monkeypatch):
    asked: dict = {}

    def fake_run_demo(**kw):
        asked.update(kw)
        return {"jobs": []}
    monkeypatch.setattr(demo, "run_demo", fake_run_demo)
    res = CliRunner().invoke(app, ["demo", "--iterations", "10", "--json", str(tmp_path / "out.json")])
    assert res.exit_code == 0, res.output
    assert asked["png_out"] is None and asked["json_out"] == tmp_path / "out.json"
    assert res.stdout == ""


def _raylet(node_id: str, resources: dict | None) -> SimpleNamespace:
    return SimpleNamespace(node_id=node_id, _ray_params=SimpleNamespace(resources=resources))


def test_cluster_up_lists_the_ray_nodes_started_by_pool():
    raylets = [_raylet("h" * 56, None), _raylet("r0" + "0" * 54, {"rollout_pool": 1}),
               _raylet("t0" + "0" * 54, {"train_pool": 1}), _raylet("r1" + "1" * 54, {"rollout_pool": 1})]
    cluster = PoolCluster.__new__(PoolCluster)  # (no Ray: the listing reads what the raylets were started with)
    cluster.head, cluster.started = raylets[0].node_id, started_by_pool(raylets)
    cluster.nodes = {p: ids for p, ids in cluster.started.items() if p != "head"}
    assert cluster.started == {"head": ["h" * 56], "rollout": ["r0" + "0" * 54, "r1" + "1" * 54],
                               "train": ["t0" + "0" * 54]}
    assert cluster.describe() == ("4 Ray nodes: head hhhhhhhh; rollout: rollout-0 r0000000, rollout-1 r1111111; "
                                  "train: train-0 t0000000")
