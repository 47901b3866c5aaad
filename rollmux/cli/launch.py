"""`rollmux run JOB.yaml -- ENTRYPOINT [ARGS]`: submit a job, then launch it where the scheduler placed it.

The launcher submits the job with the admin token, writes the job's own token to a file only
its owner may read (mode 0600), and starts ENTRYPOINT with the service's URL, the job id and
the token file's path in its environment (`ROLLMUX_URL`, `ROLLMUX_JOB_ID`,
`ROLLMUX_TOKEN_FILE`), never on its command line. Inside the job, `rollmux.init()` reads them
(rollmux/job.py), and `JobShim.node_strategies()` pins each phase's workers to the machines its
permit names. `--local` runs ENTRYPOINT as a local driver process; otherwise it goes through
Ray's job submission API (`--ray-address`, the dashboard's http://HEAD:8265) with the variables
in its runtime environment; a remote cluster must see the token file's path (a shared volume,
the Secret of docs/deploy.md). `--job-id` runs the record under another id (a finished job's id
may be used again; a running one's is refused, saying how to go on).

The launcher follows the job's output. When ENTRYPOINT exits it tells the service at once
(POST /v1/jobs/{id}/exit, with the admin token): a job that has not finished is failed, its
reason the exit code and the last line ENTRYPOINT wrote to stderr (rollmux/cli/entrypoint.py tees
it), and the launcher exits with ENTRYPOINT's status (1 for one that exited 0 without finishing).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer

from rollmux.cli.app import app, err, fail, out
from rollmux.cli.entrypoint import Ended, run_local, run_ray
from rollmux.cli.service import _TOKEN_FILE, _URL, _api_call, client_admin_token, read_job
from rollmux.core.spec import job_id_problem
from rollmux.errors import InputError
from rollmux.live.client import job_env, write_token
from rollmux.live.exits import EXIT_LINE_CHARS, REDACTED, clean_line

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
    job_id: Optional[str] = typer.Option(None, "--job-id",
                                         help="Run the record under this job id instead of its own job_id "
                                              "(a finished job's id may be used again)."),
) -> None:
    """Submit a job and launch ENTRYPOINT (after --) with its credentials in the environment; exit with
    ENTRYPOINT's status (an exit before the job finished fails the job at once, with the last error line)."""
    try:
        entrypoint = list(ctx.args)
        if not entrypoint:
            raise InputError("ENTRYPOINT", "give the command to launch after --")
        if not local and ray_address is None:
            raise InputError("--ray-address", "give Ray's job submission address, or --local")
        record = _with_id(read_job(job_file), job_id)
        from rollmux.live.client import HttpPermitClient
        admin = client_admin_token(admin_token_file)
        client = HttpPermitClient(url, admin_token=admin, retry_for_s=5.0)
        placed = _api_call(lambda: client.submit(record), str(job_file))
        token = placed.pop("token")
        path = write_token(token_dir, placed["job_id"], token)
        out.print_json(data={k: v for k, v in placed.items()})
        env = job_env(url, placed["job_id"], path)
        ended = run_local(entrypoint, env) if local else run_ray(ray_address, entrypoint, env)
        code = report_exit(client, placed["job_id"], ended, (admin, token))
    except InputError as exc:
        fail(exc)
    raise typer.Exit(code)


def _with_id(record: dict, job_id: Optional[str]) -> dict:
    """The record under `job_id` (--job-id), if given; InputError naming the flag for an id no job may have."""
    if job_id is None:
        return record
    problem = job_id_problem(job_id)
    if problem is not None:
        raise InputError(f"--job-id {job_id[:80]!r}", problem)
    return {**record, "job_id": job_id}


def report_exit(client: Any, job_id: str, ended: Ended, secrets: tuple[str, ...]) -> int:
    """Tell the service how the entrypoint ended (it fails a job that has not finished); this command's
    exit status: the entrypoint's, or 1 for one that exited 0 and left its job unfinished."""
    line = ended.line
    for secret in secrets:  # (the service blanks the tokens it knows as well, then cuts the line)
        if secret:
            line = line.replace(secret, REDACTED)
    line = clean_line(line, EXIT_LINE_CHARS)
    from rollmux.live.refusals import ServiceError
    try:
        job = client.report_exit(job_id, ended.code, line)
    except ServiceError as exc:  # the service is gone: the entrypoint's status still says how it went
        err.print(f"rollmux run: could not report the exit of job {job_id}'s entrypoint: {exc}",
                  highlight=False, markup=False, soft_wrap=True)
        return ended.status
    if job["status"] == "done":
        return ended.status
    err.print(f"rollmux run: job {job_id} is {job['status']}" + (f" ({job['reason']})" if job.get("reason") else ""),
              highlight=False, markup=False, soft_wrap=True)
    return ended.status or 1
