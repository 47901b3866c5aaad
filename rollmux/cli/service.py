"""The service side of the command line: `serve`, the admin's `submit`, `cancel` and `status`,
and the journal tools (rollmux.live; DESIGN §8)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from rollmux.cli import settings as s
from rollmux.cli.app import app, err, fail, journal_app, out
from rollmux.core.config import SchedulerConfig
from rollmux.core.trace_io import load_cluster, parse_job_file
from rollmux.errors import InputError
from rollmux.live.supervision import HEARTBEAT_TIMEOUT_S, STARTUP_TIMEOUT_S

DEFAULT_URL = "http://127.0.0.1:8470"
SERVE_FLAGS = ("--repair", "--colocate", "--colo-pair", "--elastic-rollout")
# The door's limits (rollmux/live/door.py; defaults: DoorLimits). Each flag names its DoorLimits field.
DOOR = {
    "max_head_bytes": typer.Option(64 * 1024, "--max-header-bytes", min=1024,
                                   help="Largest request head (request line and headers) in bytes: 431 past it."),
    "header_timeout_s": typer.Option(10.0, "--header-timeout", min=0.1,
                                     help="Seconds from a request's first byte (or a new connection) to the end "
                                          "of its headers: 408 and closed past it."),
    "body_timeout_s": typer.Option(30.0, "--body-timeout", min=0.1,
                                   help="Seconds from the end of the headers to the end of the body."),
    "keep_alive_s": typer.Option(5.0, "--keep-alive-timeout", min=0.1,
                                 help="Seconds an idle keep-alive connection stays open."),
    "max_conns_per_client": typer.Option(2048, "--max-connections-per-client", min=0,
                                         help="Open connections one client address may hold (0: no cap); "
                                              "behind a proxy all clients have the proxy's address."),
    "max_conns": typer.Option(32768, "--max-connections", min=0, help="Open connections in all (0: no cap)."),
}

# Secrets in files only their owner may read, never on the command line (every user reads argv: ps).
SECRET = {
    "redis": typer.Option(None, "--redis-password-file",
                          help="Redis's password (or set $ROLLMUX_REDIS_PASSWORD); never in the --store URL."),
    "metrics": typer.Option(None, "--metrics-token-file",
                            help="A scrape token: GET /metrics then requires it or the admin token, and shows "
                                 "per-job series. Without it /metrics answers anyone and names no job."),
}

# How the service judges a job alive (rollmux/live/supervision.py); turns: rollmux/core/turns.py.
LIVENESS = {
    "heartbeat_timeout": typer.Option(HEARTBEAT_TIMEOUT_S, "--heartbeat-timeout", min=0.1,
                                      help="Fail a job that has made its first call and is then silent for this "
                                           "many seconds."),
    "startup_timeout": typer.Option(STARTUP_TIMEOUT_S, "--startup-timeout", min=0.1,
                                    help="Fail a job that makes no call this many seconds after its submission (or "
                                         "its placement, when it waited for nodes); a job record's "
                                         "startup_timeout_s wins."),
    "lease_min": typer.Option(60.0, "--lease-min", min=0.1,
                              help="Shortest phase lease (s); a lease is 2x the declared worst case."),
    "turn_grace": typer.Option(10.0, "--turn-grace", min=0.0,
                               help="A group member that has not asked for its turn within this many seconds (or "
                                    "its phase's declared time, if longer) loses it, and its group goes on without "
                                    "it until it asks again; absent past its lease, it is failed as hung."),
}


@app.command()
def serve(
    listen: str = typer.Option("127.0.0.1:8470", "--listen", help="HOST:PORT to serve the HTTP API on."),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="Cluster file (YAML; default: the embedded one)."),
    store: str = typer.Option("rollmux-journal.db", "--store",
                              help="Journal: a SQLite file path, or redis://host:port/db[?prefix=name]."),
    admin_token_file: Path = typer.Option(Path("rollmux-admin.token"), "--admin-token-file",
                                          help="The admin token (created with mode 0600 if missing)."),
    tls_cert: Optional[Path] = typer.Option(None, "--tls-cert", help="TLS certificate (PEM)."),
    tls_key: Optional[Path] = typer.Option(None, "--tls-key", help="TLS private key (PEM)."),
    heartbeat_timeout: float = LIVENESS["heartbeat_timeout"], lease_min: float = LIVENESS["lease_min"],
    turn_grace: float = LIVENESS["turn_grace"], startup_timeout: float = LIVENESS["startup_timeout"],
    watch_ray: Optional[str] = typer.Option(None, "--watch-ray",
                                            help="Ray cluster whose dead nodes re-admit the jobs on them."),
    ray_address: Optional[str] = typer.Option(None, "--ray",
                                              help="Ray cluster whose pool nodes (custom resource rollout_pool or "
                                                   "train_pool) are the inventory: capacity, and the machines "
                                                   "placements and permits name."),
    wait_store: float = typer.Option(0.0, "--wait-store", min=0.0,
                                     help="Wait this long for a store another server holds (a Redis writer "
                                          "lease of a killed server lapses after 10 s)."),
    profile: str = typer.Option("shipped", "--profile", help=s.PROFILE_HELP + " A new store only."),
    sets: Optional[list[str]] = s.SETS, redis_password_file: Optional[Path] = SECRET["redis"],
    repair: Optional[bool] = s.OPTION["--repair"], colocate: Optional[bool] = s.OPTION["--colocate"],
    colo_pair: Optional[bool] = s.OPTION["--colo-pair"], metrics_token_file: Optional[Path] = SECRET["metrics"],
    elastic_rollout: Optional[bool] = s.OPTION["--elastic-rollout"],
    max_head_bytes: int = DOOR["max_head_bytes"], header_timeout_s: float = DOOR["header_timeout_s"],
    body_timeout_s: float = DOOR["body_timeout_s"], keep_alive_s: float = DOOR["keep_alive_s"],
    max_conns_per_client: int = DOOR["max_conns_per_client"], max_conns: int = DOOR["max_conns"],
) -> None:
    """Serve the scheduler's authenticated HTTP API until SIGINT/SIGTERM.

    A new store runs the profile (default shipped, what `rollmux simulate` runs) with the
    overrides given; with a journal that already has records, the service recovers from it
    and its journaled configuration wins (the cluster file must then match the journal's,
    or be omitted)."""
    from rollmux.live.server import admin_token, parse_listen
    from rollmux.live.server import serve as run_server
    door = _door(locals())  # (logging: the root's --log-level)
    try:  # every flag, file and the port are checked before anything is created
        where = parse_listen(listen)
        _check_tls(tls_cert, tls_key)
        cfg = _serve_config(profile, s.given_flags(locals()), sets)
        password, scrape = _secrets(store, redis_password_file, metrics_token_file)
        spec = load_cluster(cluster)[0]
        check_port(where.host, where.port, listen)
        token = admin_token(admin_token_file)
        core, telemetry, journal, recovering = _start_core(
            store, wait_store, cluster, spec, cfg, token, password=password,
            heartbeat_timeout_s=heartbeat_timeout, lease_min_s=lease_min, turn_grace_s=turn_grace,
            startup_timeout_s=startup_timeout)
        if watch_ray or ray_address:
            _connect_ray(core, ray_address, watch_ray)
        journal_said = (f"journal {journal.url} ({core.recovered_records} records recovered)" if recovering
                        else f"new journal {journal.url}")
        out.print(f"rollmux scheduler on {'https' if tls_cert else 'http'}://{listen}; {journal_said}; "
                  f"admin token in {admin_token_file}; SIGINT/SIGTERM stops it", highlight=False, soft_wrap=True)
        run_server(core, where, telemetry, tls_cert, tls_key, door, metrics_token=scrape)
    except InputError as exc:
        fail(exc)


def _check_tls(cert: Optional[Path], key: Optional[Path]) -> None:
    """Both TLS files or neither, and a pair that loads; InputError naming the flags otherwise."""
    if (cert is None) != (key is None):
        raise InputError("--tls-cert/--tls-key", "give both or neither")
    if cert is not None and key is not None:
        import ssl
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise InputError(f"--tls-cert {cert} / --tls-key {key}",
                             f"cannot load ({getattr(exc, 'strerror', None) or exc})") from None


def check_port(host: str, port: int, listen: str) -> None:
    """Bind HOST:PORT once (as the server will, address reuse on) and let it go: InputError naming
    --listen if the port is in use or the address is not this machine's."""
    import socket
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
    except OSError as exc:
        raise InputError(f"--listen {listen}", f"cannot listen there ({exc.strerror or exc})") from None


def _no_password_in(store: str, where: str) -> None:
    """Refuse a store URL that carries a password: every user of the machine reads argv (`ps`)."""
    from urllib.parse import urlsplit
    try:
        password = urlsplit(store).password if "://" in store else None
    except ValueError:
        password = None
    if password:
        raise InputError(where, "the URL carries a password, and every user of this machine can read a command "
                                "line (ps); drop it from the URL and give it in --redis-password-file (serve) or "
                                "$ROLLMUX_REDIS_PASSWORD")


def _secrets(store: str, password_file: Optional[Path],
             metrics_file: Optional[Path]) -> tuple[Optional[str], Optional[str]]:
    """Redis's password for `store` (from --redis-password-file, else None: the store reads
    $ROLLMUX_REDIS_PASSWORD itself) and the scrape token; InputError for a password in the URL,
    a password file with a store that is not Redis, or a file others may read."""
    from rollmux.live.server import read_secret
    _no_password_in(store, "--store")
    if password_file is not None and not store.lower().startswith(("redis://", "rediss://")):
        raise InputError("--redis-password-file", "the store is not a redis:// URL")
    password = read_secret(password_file, "--redis-password-file") if password_file else None
    return password, read_secret(metrics_file, "--metrics-token-file", 16) if metrics_file else None


def _door(given: dict[str, Any]):
    """The door's limits from `serve`'s arguments (its DOOR flags)."""
    from rollmux.live.door import DoorLimits
    return DoorLimits(**{k: v for k, v in given.items() if k in DOOR})


def _connect_ray(core: Any, ray_address: Optional[str], watch_ray: Optional[str]) -> None:
    """Join the Ray cluster: watch its dead nodes, and with --ray read its inventory."""
    import ray
    ray.init(address=ray_address or watch_ray, log_to_driver=False)
    core.watch_ray_nodes()
    if ray_address:
        core.watch_ray_inventory()


def _serve_config(profile: str, flags: dict[str, Any], sets: Optional[list[str]]) -> SchedulerConfig:
    """A new store's settings; InputError for one the live plane cannot execute (naming it)."""
    from rollmux.live.service import live_refusal
    cfg = s.scheduler_config(profile, flags, sets=sets)
    if flags.get("--colo-pair") and not cfg.colocation.enabled:
        raise InputError("--colo-pair", "pairs co-located jobs: it needs --colocate (colocation.enabled)")
    refusal = live_refusal(cfg)
    if refusal is not None:
        raise InputError(f"--profile {profile}", refusal)
    return cfg


def _start_core(store: str, wait_store: float, cluster: Optional[Path], spec: Any, cfg: SchedulerConfig,
                token: str, password: Optional[str] = None, **knobs: Any):
    """The scheduler core on its journal (new, or recovered), its telemetry, the journal and whether
    it was recovered; `spec`: the cluster file's (`cluster`) or the embedded one; `password`: the Redis store's."""
    from rollmux.live.journal import JournalError
    from rollmux.live.refusals import ServiceError
    from rollmux.live.service import SchedulerCore
    from rollmux.live.telemetry import Telemetry
    journal = _open_store(store, wait_store, password)
    try:
        recovering = journal.snapshot() is not None or bool(journal.records())
        holder: dict = {}
        telemetry = Telemetry(lambda: holder["core"].request("metrics").result(timeout=10))
        core = holder["core"] = SchedulerCore(None if recovering and cluster is None else spec.model_dump(),
                                              cfg=cfg, store=journal, admin_token=token, telemetry=telemetry,
                                              watch_ray_nodes=False, **knobs)
    except (JournalError, ServiceError) as exc:
        journal.close()
        raise InputError("--store", str(exc)) from None
    return core, telemetry, journal, recovering


def _open_store(store: str, wait_s: float, password: Optional[str] = None):
    """The journal store, waiting up to `wait_s` while another writer still holds it."""
    import time

    from rollmux.live.journal import JournalError, open_store
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return open_store(store, password=password)
        except JournalError as exc:
            if "in use" not in str(exc) or time.monotonic() >= deadline:
                raise InputError("--store", str(exc)) from None
        time.sleep(0.5)  # the holder's lease lapses on its own; nothing to wait on but time


def read_job(job_file: Path) -> dict:
    """A job record from its file (YAML or JSON), validated as a trace line; InputError naming the
    file, the line and the field."""
    try:
        text = job_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(str(job_file), "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(job_file), f"cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    return parse_job_file(text, str(job_file))


def client_admin_token(path: Path) -> str:
    """The admin token a client command reads from `path`; never created (only `rollmux serve` does):
    InputError naming --admin-token-file for a missing, unreadable, shared or too short file."""
    from rollmux.live.server import MIN_TOKEN_CHARS, read_secret
    if not path.exists():
        raise InputError(f"--admin-token-file {path}", "no such file (rollmux serve creates it: give the file the "
                                                       "server was started with)")
    return read_secret(path, "--admin-token-file", MIN_TOKEN_CHARS)


def _admin_client(url: str, admin_token_file: Path):
    from rollmux.live.client import HttpPermitClient
    return HttpPermitClient(url, admin_token=client_admin_token(admin_token_file), retry_for_s=5.0)


_URL = typer.Option(DEFAULT_URL, "--url", help="The scheduler's HTTP API.")
_TOKEN_FILE = typer.Option(Path("rollmux-admin.token"), "--admin-token-file",
                           help="The admin token: the file `rollmux serve` created (never created here).")


def _api_call(fn, what: str):
    """Run an API call; a refusal or an unreachable server is one line and exit 2."""
    from rollmux.live.refusals import ServiceError
    try:
        return fn()
    except ServiceError as exc:
        raise InputError(what, str(exc)) from None


@app.command()
def submit(
    job_file: Path = typer.Argument(..., help="Job profile (YAML or JSON, the trace's fields)."),
    url: str = _URL,
    admin_token_file: Path = _TOKEN_FILE,
) -> None:
    """Submit one job to the running scheduler; prints where it was placed and the job's token."""
    try:
        record = read_job(job_file)
        client = _admin_client(url, admin_token_file)
        placed = _api_call(lambda: client.submit(record), str(job_file))
        # The token is the job's credential for every later call: print it once, keep it secret.
        out.print_json(json.dumps(placed))
    except InputError as exc:
        fail(exc)


@app.command()
def cancel(job_id: str = typer.Argument(..., help="The job to cancel."), url: str = _URL,
           admin_token_file: Path = _TOKEN_FILE) -> None:
    """Cancel a job: its permits are reclaimed and its group goes on."""
    try:
        client = _admin_client(url, admin_token_file)
        _api_call(lambda: client.cancel(job_id), job_id)
        out.print(f"cancelled {job_id}")
    except InputError as exc:
        fail(exc)


@app.command()
def status(url: str = _URL, admin_token_file: Path = _TOKEN_FILE,
           as_json: bool = typer.Option(False, "--json", help="Print the raw status as JSON.")) -> None:
    """Groups, members, whose turn it is on each node, and iteration times vs SLO."""
    from rollmux.live.status_view import groups_table, jobs_table, summary_line
    try:
        client = _admin_client(url, admin_token_file)
        st = _api_call(client.status, url)
        if as_json:
            out.print_json(json.dumps(st))
            return
        out.print(groups_table(st))
        out.print(jobs_table(st))
        out.print(summary_line(st))
        page = st["page"]
        if page["jobs_total"] > len(st["jobs"]) or page["groups_total"] > len(st["groups"]):
            out.print(f"showing {len(st['groups'])} of {page['groups_total']} groups and {len(st['jobs'])} of "
                      f"{page['jobs_total']} jobs (--json and GET /v1/status?offset=&limit= page through all)")
    except InputError as exc:
        fail(exc)


def _journal_tool(tool: Callable[[str], Any], store: str) -> Any:
    """What a journal tool reports on `store`; one line and exit 2 if the store cannot be read."""
    from rollmux.live.journal import JournalError
    try:
        _no_password_in(store, "journal")
    except InputError as exc:
        fail(exc)
    try:
        return tool(store)
    except JournalError as exc:
        fail(InputError("journal", str(exc)))


@journal_app.command("check")
def journal_check(store: str = typer.Argument(..., help="A SQLite file path or redis://... URL.")) -> None:
    """Read every record; one line on the first bad one (exit 1), else a summary."""
    from rollmux.live.journal.repair import check_store
    report = _journal_tool(check_store, store)
    if report.ok:
        kept = f", {report.salvaged} more kept unreplayed by a repair" if report.salvaged else ""
        out.print(f"{report.url}: {report.records} records, snapshot at "
                  f"{report.snapshot_seq if report.snapshot_seq is not None else '-'}{kept}: ok", highlight=False,
                  soft_wrap=True)
        return
    line = report.first_bad if report.first_bad.startswith(report.url) else f"{report.url}: {report.first_bad}"
    err.print(line, highlight=False, soft_wrap=True)
    raise typer.Exit(1)


@journal_app.command("repair")
def journal_repair(store: str = typer.Argument(..., help="A SQLite file path or redis://... URL.")) -> None:
    """Back the journal up, then truncate it after its last good record (a file with damaged pages:
    recover every valid record, replayed or kept unreplayed past the gap, and say what was lost)."""
    from rollmux.live.journal.repair import repair_store
    report = _journal_tool(repair_store, store)
    out.print(report.summary(), highlight=False, soft_wrap=True)
