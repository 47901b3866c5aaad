"""How the study's independent simulations are mapped over workers.

A `Pmap` takes a picklable module-level function and a list of argument tuples
and returns the results in order; `on_done(index, result)`, when given, is
called as each task finishes (in completion order), so a progress bar moves.
Every study section receives one, so the same section code runs serially here
(`serial_map`) or as Ray tasks (`ray_session` / `RayMap`): on a private local
Ray by default, or on the cluster at `--address`, with no code change.

Ray is imported lazily, only when a Ray map is used.
"""

from __future__ import annotations

import logging
import reprlib
import socket
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Protocol, Sequence

from rollmux.errors import InputError

OnDone = Callable[[int, Any], None]


class Pmap(Protocol):
    """Maps `fn` over argument tuples; returns the results in the order of `args`."""

    def __call__(self, fn: Callable[..., Any], args: Sequence[tuple],
                 on_done: OnDone | None = None) -> list: ...


class SweepTaskError(RuntimeError):
    """A task of a sweep raised; the message names the task and the original error."""

    def __init__(self, task: str, error: str, cause: BaseException | None = None) -> None:
        super().__init__(f"{task} failed: {error}")
        self.task = task
        self.cause = cause


_short = reprlib.Repr()
_short.maxstring, _short.maxother, _short.maxlist, _short.maxtuple, _short.maxdict = 40, 60, 3, 4, 3
_PLAIN = (str, bytes, int, float, bool, type(None))


def _show(a: Any) -> str:
    if isinstance(a, (list, tuple)) and a and not isinstance(a[0], _PLAIN):
        return f"[{len(a)} {type(a[0]).__name__}]"  # a trace: how many jobs, not their fields
    return _short.repr(a)


def describe_task(fn: Callable[..., Any], index: int, total: int, args: tuple) -> str:
    """'task I/N module.fn(args…)', arguments shortened, to name a task in an error."""
    return f"task {index + 1}/{total} {fn.__module__}.{fn.__qualname__}({', '.join(_show(a) for a in args)})"


def _error_line(exc: BaseException) -> tuple[str, BaseException | None]:
    """'Type: message' of the exception a Ray task raised, and that exception when it came back whole."""
    cause = getattr(exc, "cause", None)
    if cause is not None and type(cause).__name__ != "UnserializableException":
        return f"{type(cause).__name__}: {cause}", cause
    # The error did not survive pickling (or Ray itself failed): the last line of the remote traceback.
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    last = lines[-1] if lines else type(exc).__name__
    name, sep, msg = last.partition(": ")
    return (f"{name.rsplit('.', 1)[-1]}{sep}{msg}" if sep and " " not in name else last), None


def serial_map(fn: Callable[..., Any], args: Sequence[tuple], on_done: OnDone | None = None) -> list:
    """Run `fn(*a)` for each argument tuple, in this process, in order."""
    results = []
    for i, a in enumerate(args):
        results.append(fn(*a))
        if on_done is not None:
            on_done(i, results[-1])
    return results


class RayMap:
    """A Pmap whose tasks run as Ray tasks on the Ray this process is connected to."""

    def __init__(self, max_in_flight: int | None = None) -> None:
        self.max_in_flight = max_in_flight

    def __call__(self, fn: Callable[..., Any], args: Sequence[tuple], on_done: OnDone | None = None) -> list:
        """Submit `fn(*a)` for every tuple, report each as it finishes, return the results in order."""
        import ray

        if not ray.is_initialized():
            raise RuntimeError("RayMap needs a connected Ray: call ray.init() or use ray_session()")
        remote = ray.remote(fn)
        shared: dict[int, Any] = {}  # one object-store copy per distinct argument (a trace shared by many runs)

        def ref(a: Any) -> Any:
            if isinstance(a, _PLAIN):
                return a
            if id(a) not in shared:
                shared[id(a)] = ray.put(a)
            return shared[id(a)]

        n = len(args)
        limit = self.max_in_flight or n
        results: list[Any] = [None] * n
        index_of: dict[Any, int] = {}
        pending: list[Any] = []
        submitted = 0
        try:
            while submitted < n or pending:
                while submitted < n and len(pending) < limit:
                    task = remote.remote(*(ref(a) for a in args[submitted]))
                    index_of[task] = submitted
                    pending.append(task)
                    submitted += 1
                done, pending = ray.wait(pending, num_returns=1)
                for task in done:
                    i = index_of.pop(task)
                    try:
                        results[i] = ray.get(task)
                    except ray.exceptions.RayError as exc:
                        error, cause = _error_line(exc)
                        raise SweepTaskError(describe_task(fn, i, n, args[i]), error, cause) from exc
                    if on_done is not None:
                        on_done(i, results[i])
        except BaseException:
            for task in pending:  # a failed sweep stops: do not leave its other tasks running
                try:
                    ray.cancel(task)
                except Exception:  # noqa: BLE001 (already finished or gone: nothing to stop)
                    pass
            raise
        return results


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """InputError at once when nothing listens at a HOST:PORT Ray address (ray.init retries for minutes)."""
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto" or a form only Ray resolves
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise InputError("--address", f"cannot reach the Ray cluster at {address!r}: {exc}") from None


@contextmanager
def ray_session(address: str | None = None, workers: int | None = None) -> Iterator[RayMap]:
    """Start a private local Ray (or connect to the cluster at `address`), yield a Ray Pmap, shut Ray down."""
    import ray

    import rollmux

    if address is None:
        # "local" starts a fresh Ray even when one is running or RAY_ADDRESS is set: never attach by accident.
        ray.init(address="local", num_cpus=workers, include_dashboard=False, logging_level=logging.WARNING)
    else:
        check_reachable(address)
        try:
            # The cluster runs this checkout's rollmux (uploaded), whatever version its nodes have installed.
            ray.init(address=address, runtime_env={"py_modules": [rollmux]}, logging_level=logging.WARNING)
        except (ConnectionError, ValueError) as exc:
            raise InputError("--address", f"cannot connect to the Ray cluster at {address!r}: {exc}") from None
    try:
        yield RayMap(max_in_flight=workers)
    finally:
        ray.shutdown()


# -- the benchmarks' trace sweeps -----------------------------------------------------------------

def add_sweep_options(ap, traces_spec: str) -> None:
    """The options every trace-sweep benchmark takes (benchmarks/*.py): which VC:SEED traces and
    profile modes, where the JSON goes, the trace folder, and where the simulations run."""
    ap.add_argument("--traces-spec", default=traces_spec, help="comma-separated VC:SEED")
    ap.add_argument("--modes", default="paper,catalog")
    ap.add_argument("--json", default=None)
    ap.add_argument("--traces", default=None)
    ap.add_argument("--address", default=None)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--serial", action="store_true")


def parse_traces_spec(spec: str) -> list[tuple[str, int]]:
    """[(vc, seed)] from "VC:SEED,..."; InputError naming --traces-spec otherwise."""
    try:
        out = [(vc, int(seed)) for vc, seed in (s.split(":") for s in spec.split(","))]
    except ValueError:
        raise InputError("--traces-spec", f"expected VC:SEED,... (got {spec!r})") from None
    if any(seed < 0 or not vc for vc, seed in out):
        raise InputError("--traces-spec", f"expected VC:SEED with a seed >= 0 (got {spec!r})")
    return out


@contextmanager
def sweep_map(args) -> Iterator[Pmap]:
    """The Pmap a benchmark's parsed options ask for: in this process with --serial, else a
    Ray session (a private local one unless --address)."""
    if args.serial:
        yield serial_map
        return
    with ray_session(args.address, args.workers) as pmap:
        yield pmap


def sweep_rows(args) -> list[tuple[str, str, int, list]]:
    """[(vc, mode, seed, trace)] for a benchmark's parsed options: a 200-job, 14-day
    Philly-driven trace per --traces-spec VC:SEED and --modes mode; a bad option or trace
    folder exits with its one-line error (a benchmark's whole input check)."""
    import sys

    from rollmux.workload import find_traces_dir, synthesize_philly

    try:
        traces = find_traces_dir(args.traces)
        return [(vc, mode, seed, synthesize_philly(traces, vc, 200, 14.0, mode, seed))
                for vc, seed in parse_traces_spec(args.traces_spec) for mode in args.modes.split(",")]
    except InputError as exc:
        sys.exit(f"error: {exc}")


def sweep_run(args, fn: Callable[..., Any], tasks: Sequence[tuple]) -> list:
    """Every task's result, mapped as the parsed options ask (`sweep_map`); a task's input
    error exits with its one-line error."""
    import sys

    try:
        with sweep_map(args) as pmap:
            return pmap(fn, tasks)
    except InputError as exc:
        sys.exit(f"error: {exc}")


def sweep_done(args, out: list, legend: str, t0: float) -> None:
    """A benchmark's closing line (its legend and wall time since `t0`, on stderr), and its
    rows as JSON where --json asks."""
    import json
    import sys
    import time

    print(f"# {legend}; wall time {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


def number_list(text: str, option: str, example: str, minimum: float = 0.0, inclusive: bool = False) -> list[float]:
    """A benchmark option's comma-separated numbers, each above `minimum` (or equal, with
    `inclusive`); a bad one exits with a one-line error naming the option."""
    import sys

    bound = f"{'>=' if inclusive else '>'} {minimum:g}"
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = None
    if values is None or any(not (v >= minimum if inclusive else v > minimum) for v in values):
        sys.exit(f"error: {option}: expected numbers {bound}, e.g. {example} (got {text!r})")
    return values
