"""docs/adapters.md's TRL section: its Python block run verbatim, outside RollMux and as a RollMux job
(the environment `rollmux run` sets, against the HTTP service in this process), and the files its
commands name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytest.importorskip("trl")

from trl_support import EXAMPLE_PATH, ROOT, folder  # noqa: E402, F401

from rollmux.adapters.trl import ENVIRONMENT  # noqa: E402
from rollmux.core.spec import default_cluster  # noqa: E402
from rollmux.live.client import HttpPermitClient  # noqa: E402
from rollmux.live.local import ThreadServer  # noqa: E402
from rollmux.live.service import SchedulerCore  # noqa: E402

DOC = ROOT / "docs" / "adapters.md"
ADMIN_TOKEN = "admin-token-for-the-trl-docs-0123456789"


def section() -> str:
    """The TRL section's text."""
    text = DOC.read_text()
    return text[text.index("## 2. TRL"):text.index("## 3.")]


def blocks(kind: str) -> list[str]:
    """The section's fenced blocks of `kind`."""
    return re.findall(rf"^```{kind}\n(.*?)^```", section(), re.M | re.S)


def run_snippet(model_dir: Path, cwd: Path, monkeypatch) -> dict:
    """The section's one Python block, executed as written in `cwd` (MODEL_DIR: the example's model folder)."""
    (code,) = blocks("python")
    monkeypatch.chdir(cwd)
    scope = {"MODEL_DIR": str(model_dir)}
    exec(compile(code, str(DOC), "exec"), scope)
    return scope


def _no_rollmux(monkeypatch) -> None:
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


def test_the_snippet_trains_as_trl_outside_rollmux(folder, tmp_path, monkeypatch):
    _no_rollmux(monkeypatch)
    trainer = run_snippet(folder, tmp_path, monkeypatch)["trainer"]
    assert trainer.rollmux is None and trainer.state.global_step == 2
    assert (tmp_path / "grpo-out" / "final" / "model.safetensors").is_file()


def test_the_snippet_under_rollmux_runs_every_phase_and_finishes(folder, tmp_path, monkeypatch):
    _no_rollmux(monkeypatch)
    record = yaml.safe_load((ROOT / "examples" / "trl_grpo.yaml").read_text())
    with ThreadServer(SchedulerCore(default_cluster().model_dump(), admin_token=ADMIN_TOKEN)) as server:
        admin = HttpPermitClient(server.url, admin_token=ADMIN_TOKEN)
        token = admin.submit(record)["token"]
        (tmp_path / "job.token").write_text(token + "\n")
        monkeypatch.setenv("ROLLMUX_URL", server.url)
        monkeypatch.setenv("ROLLMUX_JOB_ID", record["job_id"])
        monkeypatch.setenv("ROLLMUX_TOKEN_FILE", str(tmp_path / "job.token"))
        trainer = run_snippet(folder, tmp_path, monkeypatch)["trainer"]
        view = admin.job(record["job_id"])
        admin.close()
    assert [h.phase for h in trainer.rollmux.shim.history] == ["init"] + ["rollout", "train", "sync"] * 2
    assert (view["status"], view["iterations"]) == ("done", 2)
    assert (tmp_path / "grpo-out" / "final" / "model.safetensors").is_file()


def test_the_one_line_is_the_examples_and_the_commands_name_files_that_exist():
    (code,) = blocks("python")
    imports = {x.split("#")[0].strip() for x in code.splitlines() if "GRPOTrainer" in x and x.startswith("from ")}
    assert imports == {"from rollmux.adapters.trl import GRPOTrainer"}
    example = EXAMPLE_PATH.read_text().splitlines()
    assert any(x.startswith("from rollmux.adapters.trl import GRPOTrainer") for x in example)
    (command,) = blocks("bash")
    for word in command.split():
        if word.startswith("examples/"):
            assert (ROOT / word).is_file(), word
