"""Network cuts for fault tests: each worker in a network namespace of its own, joined to the host by a
veth pair; a cut takes the pair's host end down (packets are dropped both ways and open connections hang,
as in a real partition: nothing is reset), a heal brings it back up.

The broker listens on BROKER_HOST, an address on the host's loopback that every namespace reaches through
its veth (the host routes between namespaces, so workers reach each other's HTTP too). Linux, root and
iproute2's `ip`: `missing()` names what is not there. Names are fixed (`schns<i>`, `schv<i>h`), so what a
killed run left behind is removed by the next one before it starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from types import TracebackType

BROKER_HOST = "10.231.255.1"


def missing() -> str | None:
    """What network namespaces need and this machine lacks (None: nothing)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "root (network namespaces are created with `ip netns add`)"
    if shutil.which("ip") is None:
        return "the `ip` command (Debian's iproute2)"
    return None


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=20, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done


class Namespace:
    """A worker's namespace: its address, the host end of its veth, and the cut."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.name = f"schns{index}"
        self.host_if = f"schv{index}h"
        self.peer_if = f"schv{index}n"
        self.gateway = f"10.231.{index + 1}.1"
        self.address = f"10.231.{index + 1}.2"
        self.is_cut = False

    @property
    def prefix(self) -> list[str]:
        """What runs a command inside the namespace (`ip netns exec` execs it: the pid stays the command's)."""
        return ["ip", "netns", "exec", self.name]

    def create(self) -> None:
        self.remove()
        _run("ip", "netns", "add", self.name)
        _run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.peer_if)
        _run("ip", "link", "set", self.peer_if, "netns", self.name)
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.host_if)
        _run("ip", "link", "set", self.host_if, "up")
        inside = self.prefix
        _run(*inside, "ip", "link", "set", "lo", "up")
        _run(*inside, "ip", "addr", "add", f"{self.address}/24", "dev", self.peer_if)
        _run(*inside, "ip", "link", "set", self.peer_if, "up")
        _run(*inside, "ip", "route", "add", "default", "via", self.gateway)

    def remove(self) -> None:
        _run("ip", "netns", "del", self.name, check=False)  # (takes its end of the pair, and so the pair)
        _run("ip", "link", "del", self.host_if, check=False)

    def cut(self) -> None:
        _run("ip", "link", "set", self.host_if, "down")
        self.is_cut = True

    def heal(self) -> None:
        _run("ip", "link", "set", self.host_if, "up")  # (its connected route comes back with it)
        self.is_cut = False


class Lab:
    """`count` namespaces and the broker's address, for the time of a `with`."""

    def __init__(self, count: int) -> None:
        if count > 250:
            raise ValueError("at most 250 namespaces")
        self.namespaces = [Namespace(i) for i in range(count)]
        self._added_address = False

    def __enter__(self) -> Lab:
        lacking = missing()
        if lacking is not None:
            raise RuntimeError(f"network cuts need {lacking}")
        _run("sysctl", "-q", "-w", "net.ipv4.ip_forward=1")  # workers reach each other through the host
        shown = _run("ip", "-o", "addr", "show", "dev", "lo").stdout
        if f" {BROKER_HOST}/" not in shown:
            _run("ip", "addr", "add", f"{BROKER_HOST}/32", "dev", "lo")
            self._added_address = True
        try:
            for ns in self.namespaces:
                ns.create()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for ns in self.namespaces:
            ns.remove()
        if self._added_address:
            _run("ip", "addr", "del", f"{BROKER_HOST}/32", "dev", "lo", check=False)
            self._added_address = False
