"""`rollmux run JOB.yaml -- ENTRYPOINT [ARGS]`: submit a job, then launch it where the scheduler placed it.

The launcher submits the job with the admin token, writes the job's own token to a file only
its owner may read (mode 0600), and starts ENTRYPOINT with the service's URL, the job id and
the token file's path in its environment (`ROLLMUX_URL`, `ROLLMUX_JOB_ID`,
`ROLLMUX_TOKEN_FILE`), never on its command line. Inside the job, `rollmux.init()` reads them
(rollmux/job.py), and `JobShim.node_strategies()` pins each phase's workers to the machines its
permit names. `--local` runs ENTRYPOINT as a local driver process; otherwise it goes through
Ray's job submission API (`--ray-address`, the dashboard's http://HEAD:8265) with the variables
in its runtime environment; a remote cluster must see the token file's path (a shared volume,
the Secret of docs/deploy.md). The launcher follows the job's output and exits with its status.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Optional

import typer

from rollmux.cli.app import app, err, fail, out
from rollmux.cli.service import _TOKEN_FILE, _URL, _admin_client, _api_call, read_job
from rollmux.errors import InputError

ENV_URL, ENV_JOB, ENV_TOKEN = "ROLLMUX_URL", "ROLLMUX_JOB_ID", "ROLLMUX_TOKEN_FILE"


def write_token(token_dir: Path, job_id: str, token: str) -> Path:
    """The job's token in `token_dir/JOB.token`, created readable by its owner only."""
    token_dir.mkdir(parents=True, exist_ok=True)
    path = token_dir / f"{job_id}.token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)  # (an older file of the same name keeps its mode otherwise)
    return path


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    ctx: typer.Context,
    job_file: Path = typer.Argument(..., help="Job profile (YAML or JSON, the trace's fields)."),
    url: str = _URL,
    admin_token_file: Path = _TOKEN_FILE,
    token_dir: Path = typer.Option(Path(".rollmux-tokens"), "--token-dir",
                                   help="Where the job's token file is written (mode 0600)."),
    local: bool = typer.Option(False, "--local", help="Run ENTRYPOINT as a local driver process."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address",
                                              help="Ray's job submission address (http://HEAD:8265)."),
) -> None:
    """Submit a job and launch ENTRYPOINT (after --) with its credentials in the environment."""
    try:
        entrypoint = list(ctx.args)
        if not entrypoint:
            raise InputError("ENTRYPOINT", "give the command to launch after --")
        if not local and ray_address is None:
            raise InputError("--ray-address", "give Ray's job submission address, or --local")
        record = read_job(job_file)
        placed = _api_call(lambda: _admin_client(url, admin_token_file).submit(record), str(job_file))
        path = write_token(token_dir, placed["job_id"], placed.pop("token"))
        out.print_json(data={k: v for k, v in placed.items()})
        env = {ENV_URL: url, ENV_JOB: placed["job_id"], ENV_TOKEN: str(path.resolve())}
        code = _local(entrypoint, env) if local else _ray_job(ray_address, entrypoint, env)
    except InputError as exc:
        fail(exc)
    raise typer.Exit(code)


def _local(entrypoint: list[str], env: dict[str, str]) -> int:
    """Run the driver here (its output is this command's); its exit status."""
    try:
        return subprocess.run(entrypoint, env={**os.environ, **env}, check=False).returncode
    except FileNotFoundError:
        raise InputError("ENTRYPOINT", f"no such program: {entrypoint[0]}") from None


def _ray_job(address: str, entrypoint: list[str], env: dict[str, str]) -> int:
    """Submit the driver through Ray's job API, print its logs as they grow; 0 if it succeeded."""
    import shlex

    from ray.job_submission import JobStatus, JobSubmissionClient
    client = JobSubmissionClient(address)
    sub = client.submit_job(entrypoint=shlex.join(entrypoint), runtime_env={"env_vars": env})
    shown = 0
    while True:
        status = client.get_job_status(sub)
        logs = client.get_job_logs(sub)
        if len(logs) > shown:
            out.print(logs[shown:], end="", highlight=False, markup=False)
            shown = len(logs)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            if status != JobStatus.SUCCEEDED:
                err.print(f"ray job {sub}: {status}", highlight=False)
            return 0 if status == JobStatus.SUCCEEDED else 1
        time.sleep(1.0)
