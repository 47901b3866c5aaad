"""The docs site: `mkdocs build --strict` passes (no broken link or anchor, no page outside the nav), and
the Reference pages generated at build time (docs/hooks/reference.py) name everything the code has.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import typer

from rollmux.cli import app as _commands  # noqa: F401  (registers every command on the app)
from rollmux.cli.app import app
from rollmux.core.config import PROFILES, SECTIONS, SchedulerConfig
from rollmux.live.app import create_app
from rollmux.live.telemetry import Telemetry

ROOT = Path(__file__).resolve().parents[1]
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """The site built once with --strict into a temporary folder: the build's result and the folder."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    return done, out


def page(site: tuple[subprocess.CompletedProcess, Path], name: str) -> str:
    """The text of a built page (reference/cli -> reference/cli/index.html), entities decoded."""
    done, out = site
    assert done.returncode == 0, done.stderr[-3000:]
    return html.unescape((out / name / "index.html").read_text())


def test_the_site_builds_with_strict(site: tuple[subprocess.CompletedProcess, Path]) -> None:
    done, out = site
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "index.html").is_file()


def test_the_cli_reference_has_every_command(site: tuple[subprocess.CompletedProcess, Path]) -> None:
    text = page(site, "reference/cli")
    root = typer.main.get_command(app)
    names = [f"rollmux {name}" for name in root.commands]
    names += [f"rollmux {name} {sub}" for name, group in root.commands.items()
              for sub in getattr(group, "commands", {})]
    assert len(names) > 15
    assert [n for n in names if f">{n}<" not in text] == []


def test_the_cli_reference_shows_each_commands_options(site: tuple[subprocess.CompletedProcess, Path]) -> None:
    text = page(site, "reference/cli")
    assert "--heartbeat-timeout" in text and "--skip-unplaceable" in text and "--metrics-token-file" in text


def test_the_http_reference_has_every_route(site: tuple[subprocess.CompletedProcess, Path]) -> None:
    text = page(site, "reference/http-api")
    routes = {(m, r.path) for r in create_app(types.SimpleNamespace()).routes for m in r.methods - {"HEAD"}}
    assert len(routes) >= 16
    rows = set(re.findall(r"<code>(GET|POST|DELETE|PUT|PATCH)</code></td>\s*<td><code>([^<]+)</code>", text))
    assert routes == rows


def test_the_http_reference_says_who_may_call(site: tuple[subprocess.CompletedProcess, Path]) -> None:
    text = page(site, "reference/http-api")
    row = re.search(r"<code>/v1/jobs/\{job_id\}/acquire</code></td>\s*<td>([^<]*)</td>", text)
    assert row is not None and row.group(1) == "job"


def test_the_configuration_reference_has_every_setting(site: tuple[subprocess.CompletedProcess, Path]) -> None:
    text = page(site, "reference/configuration")
    settings = [f"{s}.{k}" for s in SECTIONS for k in SchedulerConfig.model_fields[s].annotation.model_fields]
    assert len(settings) > 30
    assert [s for s in settings if f"<code>{s}</code>" not in text] == []
    assert all(f"<code>{name}</code>" in text for name in PROFILES)


def test_the_configuration_reference_shows_defaults(site: tuple[subprocess.CompletedProcess, Path]) -> None:
    text = page(site, "reference/configuration")
    row = re.search(r"<code>placement.max_group_size</code></td>\s*<td><code>int</code></td>\s*"
                    r"<td><code>([^<]+)</code>", text)
    assert row is not None and row.group(1) == str(SchedulerConfig().placement.max_group_size)


def test_the_metrics_reference_has_every_family(site: tuple[subprocess.CompletedProcess, Path]) -> None:
    text = page(site, "reference/metrics")
    exposed = Telemetry(lambda: {}).exposition()[0].decode()
    names = set(re.findall(r"^# TYPE (\S+) ", exposed, flags=re.M))
    assert len(names) > 15
    assert [n for n in sorted(names) if f"<code>{n}</code>" not in text] == []


def test_docs_pages_carry_no_dates_or_issue_numbers() -> None:
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in sorted((ROOT / "docs").rglob("*.md"))
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if DATE.search(line) or re.search(r"\bissue\s*#?\d+", line, flags=re.I)]
    assert found == []


def test_mkdocs_serve_serves_the_site(tmp_path: Path) -> None:
    """The README's `mkdocs serve` (the docs extra): the home page answers on its address."""
    import socket
    import time
    import urllib.request
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "mkdocs", "serve", "--dev-addr", f"127.0.0.1:{port}", "--no-livereload"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    try:
        deadline, body = time.monotonic() + 240, ""
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                    body = resp.read().decode()
                break
            except OSError:
                time.sleep(0.5)  # still building the site: ask again (start-up, not the condition tested)
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        assert "RollMux" in body and "<html" in body.lower()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
