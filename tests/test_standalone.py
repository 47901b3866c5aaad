"""tests/core and tests/sim stand alone: every test there passes with no redis-server to start, Ray
not importable and no shared traces to find.

They run in a pytest subprocess whose PATH holds only `python`, whose `import ray` raises, whose
$ROLLMUX_TRACES names an empty folder (rollmux.workload.find_traces_dir then refuses rather than
looking further) and whose working directory is an empty folder (no ../shared beside it). All of
both folders run, not only `-m unit`: a test there that needs a service fails here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALONE = ("tests/core", "tests/sim")
# "N passed in T s" and nothing else: nothing failed, skipped or deselected (warnings may follow)
ALL_PASSED = re.compile(r"\d+ passed(, \d+ warnings?)? in [\d.]+s( \(.*\))?")


def _bare_env(tmp_path: Path) -> dict[str, str]:
    """The subprocess's environment: PATH with `python` alone, Ray blocked, empty traces folder."""
    bin_dir, no_ray, traces = tmp_path / "bin", tmp_path / "no-ray", tmp_path / "traces"
    for folder in (bin_dir, no_ray, traces):
        folder.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    (no_ray / "ray.py").write_text('raise ImportError("Ray is blocked: tests/core and tests/sim must not need it")\n')
    path = [str(no_ray), str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PATH": str(bin_dir), "ROLLMUX_TRACES": str(traces), "PYTHONPATH": os.pathsep.join(path)}


def test_core_and_sim_tests_need_no_redis_ray_or_shared_traces(tmp_path):
    env = _bare_env(tmp_path)
    assert shutil.which("redis-server", path=env["PATH"]) is None
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    res = subprocess.run([sys.executable, "-m", "pytest", *(str(ROOT / p) for p in ALONE), "-o", "addopts=",
                          "-q", "-p", "no:cacheprovider", "--strict-markers"],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    summary = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
    assert res.returncode == 0 and ALL_PASSED.fullmatch(summary), res.stdout[-6000:] + res.stderr[-2000:]
