"""A throwaway Redis Cluster (three masters, no replicas) on free loopback ports.

Built only by the tests that ask for it (about a second here): three ``redis-server`` processes
in cluster mode, joined by ``redis-cli --cluster create``, each with its cluster bus on a port
of its own (``--cluster-port``), so that no fixed ``port + 10000`` has to be free.
"""

from __future__ import annotations

import shutil
import subprocess
import time

from tests.redis_server import RedisServer, free_port

__all__ = ["RedisClusterServer"]


class RedisClusterServer:
    """Owns the masters of one cluster; ``url`` names one of them (clients discover the rest)."""

    def __init__(self, masters: int = 3) -> None:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError(
                "redis-cli is not installed; 'make test' installs Debian's redis-server "
                "package, which has it"
            )
        self.cli = cli
        self.nodes = [
            RedisServer(extra=("--cluster-enabled", "yes", "--cluster-port", str(free_port())))
            for _ in range(masters)
        ]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{n.port}" for n in self.nodes]

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        out = subprocess.run(
            [self.cli, "--cluster", "create", *self.addresses, "--cluster-replicas", "0"],
            input="yes\n",
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout}{out.stderr}")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if all(self._state(n) == "ok" for n in self.nodes):
                return
            time.sleep(0.05)
        raise RuntimeError("the Redis cluster did not reach cluster_state:ok within 20 s")

    def _state(self, node: RedisServer) -> str:
        out = subprocess.run(
            [self.cli, "-p", str(node.port), "cluster", "info"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        for line in out.stdout.splitlines():
            if line.startswith("cluster_state:"):
                return line.split(":", 1)[1].strip()
        return "?"

    def flushall(self) -> None:
        for node in self.nodes:
            node.flushall()

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()

    def __enter__(self) -> RedisClusterServer:
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
