"""Two pools on one machine, joined by a throttled link: network namespaces, a veth pair and tbf.

    [train namespace]  10.200.0.1 --veth (tbf, L Mbit/s each way)-- 10.200.0.2  [rollout namespace]

Each pool's ranks run in their own namespace (`ip netns exec`) and bind to their side's address.
A connection between two ranks of one pool goes to an address of the namespace itself, which the
kernel delivers over that namespace's loopback: the pool's fast local network, untouched by tbf.
Only traffic between the pools crosses the veth and its token bucket (tbf; netem is not available
on these machines). Nothing leaves the two namespaces: both veth ends live inside them.

Setting up needs root and `ip`/`tc`; where it cannot, `TestbedUnavailable` says why in one line.
Teardown is in a `finally` (failure, Ctrl-C, SIGTERM): deleting a namespace deletes its veth end.
Names carry the creating process's id, so concurrent runs never collide and a later run can sweep
what a killed one (SIGKILL) left behind.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Literal

Side = Literal["train", "rollout"]
_PREFIX = "rmxsync"
_COUNTER = itertools.count()
TRAIN_ADDR, ROLLOUT_ADDR = "10.200.0.1", "10.200.0.2"


class TestbedUnavailable(RuntimeError):
    """The namespaces cannot be created here (not root, no iproute2, no netns support)."""

    __test__ = False  # not a pytest test class, despite the name


@dataclass(frozen=True)
class Testbed:
    """The two namespaces, their link's interfaces and addresses, and the link's rate."""

    tag: str
    link_mbit: float

    def namespace(self, side: Side) -> str:
        """The network namespace of a pool."""
        return f"{_PREFIX}-{self.tag}-{side}"

    def interface(self, side: Side) -> str:
        """The pool's end of the veth pair (15 characters at most, as Linux requires)."""
        return f"rs{self.tag}{side[0]}"

    def address(self, side: Side) -> str:
        """The pool's address: its ranks bind to it, the other pool reaches them through the link."""
        return TRAIN_ADDR if side == "train" else ROLLOUT_ADDR

    def exec_prefix(self, side: Side) -> list[str]:
        """The command prefix that runs a program inside a pool's namespace."""
        return ["ip", "netns", "exec", self.namespace(side)]


def _run(*cmd: str) -> None:
    """Run one iproute2 command; a failure raises with its first line of stderr."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["exit status %d" % proc.returncode])[0]
        raise TestbedUnavailable(f"`{' '.join(cmd)}` failed: {first}")


def _check_can_create() -> None:
    """Fail early, in one line, where namespaces cannot be made."""
    if os.geteuid() != 0:
        raise TestbedUnavailable("the sync testbed needs root to create network namespaces")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise TestbedUnavailable(f"the sync testbed needs `{tool}` (iproute2) on PATH")


def sweep_stale() -> list[str]:
    """Delete this testbed's namespaces whose creating process is gone (a SIGKILLed run's); their names."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    gone = []
    for name in re.findall(rf"^({_PREFIX}-(\d+)x\d+-(?:train|rollout))\b", listing, re.M):
        ns, pid = name
        if not os.path.exists(f"/proc/{pid}"):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            gone.append(ns)
    return gone


def _burst_bytes(link_mbit: float) -> int:
    """tbf's bucket: at least 256 KiB (a GSO super-packet must fit), or 10 ms at the link's rate."""
    return max(256 * 1024, int(link_mbit * 1e6 / 8 / 100))


def _build(tb: Testbed) -> None:
    """Create both namespaces, the veth pair between them, their addresses and the throttle."""
    t_ns, r_ns = tb.namespace("train"), tb.namespace("rollout")
    t_if, r_if = tb.interface("train"), tb.interface("rollout")
    _run("ip", "link", "add", t_if, "type", "veth", "peer", "name", r_if)
    for side, ns, ifname in (("train", t_ns, t_if), ("rollout", r_ns, r_if)):
        _run("ip", "link", "set", ifname, "netns", ns)
        _run("ip", "-n", ns, "addr", "add", f"{tb.address(side)}/30", "dev", ifname)
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "-n", ns, "link", "set", ifname, "up")
        # Each direction is throttled on its sender's side: a veth end's egress is the link.
        _run("tc", "-n", ns, "qdisc", "add", "dev", ifname, "root", "tbf",
             "rate", f"{int(tb.link_mbit * 1000)}kbit", "burst", str(_burst_bytes(tb.link_mbit)),
             "latency", "100ms")


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while the testbed exists, so teardown still runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def throttled_pools(link_mbit: float) -> Iterator[Testbed]:
    """Two pool namespaces joined by a link of `link_mbit` Mbit/s each way; removed on exit."""
    if not link_mbit > 0:
        raise ValueError(f"link_mbit: must be positive (got {link_mbit!r})")
    _check_can_create()
    sweep_stale()
    tb = Testbed(f"{os.getpid()}x{next(_COUNTER)}", float(link_mbit))
    created: list[str] = []
    with _sigterm_as_interrupt():
        try:
            for side in ("train", "rollout"):
                _run("ip", "netns", "add", tb.namespace(side))
                created.append(tb.namespace(side))
            _build(tb)
            yield tb
        finally:
            for ns in created:
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def tx_bytes(interface: str) -> int:
    """Bytes sent so far on an interface of the current namespace (read inside it)."""
    with open(f"/sys/class/net/{interface}/statistics/tx_bytes") as f:
        return int(f.read())
