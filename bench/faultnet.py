"""The fault campaign's hosts: network namespaces on one bridge, and the cuts between them.

Each host (the database, the broker, three schedulers, three workers, the producer) is a
network namespace wired by a veth pair to a bridge in a switch namespace, with addresses that
exist only inside those namespaces: the machine's own interfaces and servers are never
touched. A cut is a blackhole route inside one host (to one peer), so the peer's other clients
go on; an isolation takes the host's switch port down.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

SUBNET = "10.78.{n}.{host}"
HOSTS = {
    "db": 2,
    "mq": 3,
    "w1": 11,
    "w2": 12,
    "w3": 13,
    "s1": 21,
    "s2": 22,
    "s3": 23,
    "p1": 31,
}
WORKERS = ("w1", "w2", "w3")
SCHEDULERS = ("s1", "s2", "s3")


def run(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, check=check, capture_output=True, text=True, timeout=30)


def unavailable() -> str | None:
    """Why the campaign cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root to make network namespaces"
    if shutil.which("ip") is None:
        return "needs iproute2's ip"
    probe = f"dcfp{uuid.uuid4().hex[:6]}"
    made = run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns is unavailable: {made.stderr.strip()}"
    run("ip", "netns", "del", probe, check=False)
    if shutil.which("redis-server") is None or shutil.which("runuser") is None:
        return "needs redis-server and runuser"
    return None


class Network:
    """Host namespaces on one bridge; cut, isolate and heal links between them."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:4]
        self.n = 100 + int(self.tag, 16) % 150
        self.switch = f"df{self.tag}sw"
        self.made: list[str] = []
        #: (host, peer) blackhole routes in place, and hosts whose port is down.
        self.cuts: set[tuple[str, str]] = set()
        self.isolated: set[str] = set()

    def ns(self, host: str) -> str:
        return f"df{self.tag}{host}"

    def address(self, host: str) -> str:
        return SUBNET.format(n=self.n, host=HOSTS[host])

    def subnet(self) -> str:
        return SUBNET.format(n=self.n, host=0) + "/24"

    def build(self) -> None:
        run("ip", "netns", "add", self.switch)
        self.made.append(self.switch)
        run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", self.switch, "link", "set", "br0", "up")
        run("ip", "-n", self.switch, "link", "set", "lo", "up")
        for host in HOSTS:
            ns = self.ns(host)
            run("ip", "netns", "add", ns)
            self.made.append(ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
            run(
                "ip", "-n", self.switch, "link", "add", f"p-{host}", "type", "veth",
                "peer", "name", "eth0", "netns", ns,
            )  # fmt: skip
            run("ip", "-n", self.switch, "link", "set", f"p-{host}", "master", "br0")
            run("ip", "-n", self.switch, "link", "set", f"p-{host}", "up")
            run("ip", "-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
            run("ip", "-n", ns, "link", "set", "eth0", "up")

    def reaches(self, host: str, peer: str, port: int) -> bool:
        code = (
            "import socket, sys; socket.create_connection"
            f"(({self.address(peer)!r}, {port}), timeout=2); sys.exit(0)"
        )
        probe = ["ip", "netns", "exec", self.ns(host), sys.executable, "-c", code]
        return run(*probe, check=False).returncode == 0

    def cut(self, host: str, peer: str) -> None:
        """Drop everything ``host`` sends to ``peer``: its connections hang, as on a real cut."""
        run("ip", "-n", self.ns(host), "route", "add", "blackhole", f"{self.address(peer)}/32")
        self.cuts.add((host, peer))

    def uncut(self, host: str, peer: str) -> None:
        run(
            "ip", "-n", self.ns(host), "route", "del", "blackhole", f"{self.address(peer)}/32",
            check=False,
        )  # fmt: skip
        self.cuts.discard((host, peer))

    def isolate(self, host: str) -> None:
        run("ip", "-n", self.switch, "link", "set", f"p-{host}", "down")
        self.isolated.add(host)

    def rejoin(self, host: str) -> None:
        run("ip", "-n", self.switch, "link", "set", f"p-{host}", "up", check=False)
        self.isolated.discard(host)

    def heal(self) -> None:
        for host, peer in list(self.cuts):
            self.uncut(host, peer)
        for host in list(self.isolated):
            self.rejoin(host)

    def pids(self) -> list[int]:
        """Every process still inside one of the hosts."""
        found: list[int] = []
        for ns in self.made:
            listed = run("ip", "netns", "pids", ns, check=False).stdout.split()
            found.extend(int(pid) for pid in listed if pid.isdigit())
        return found

    def destroy(self) -> None:
        for ns in reversed(self.made):
            run("ip", "netns", "del", ns, check=False)
        self.made = []
