"""A throwaway PostgreSQL server on a free loopback port, for tests of real PostgreSQL behaviour.

Started at most once per test session, lazily (only when a test asks for it). PostgreSQL refuses
to run as root, so under root the server runs as the ``postgres`` OS user in a directory it owns.
Durability is switched off (``fsync``, ``synchronous_commit``, ``full_page_writes``): the data
dies with the session anyway, and a cluster then starts in about a second.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.redis_server import free_port

__all__ = ["PostgresNotInstalled", "PostgresServer", "find_pg_bin"]

_SEARCH = ("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/local/bin")


class PostgresNotInstalled(RuntimeError):
    """``initdb`` / ``pg_ctl`` are not on this machine."""

    def __init__(self, problem: str | None = None) -> None:
        searched = ", ".join(_SEARCH)
        problem = problem or f"initdb and pg_ctl were not found in $PATH, {searched}"
        super().__init__(
            f"{problem}; 'make test' installs Debian's package, "
            "or run 'apt-get install -y postgresql-15'"
        )


def find_pg_bin() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``.

    :raises PostgresNotInstalled: if there is none
    """
    candidates = [*_SEARCH]
    on_path = shutil.which("pg_ctl")
    if on_path is not None:
        candidates.insert(0, str(Path(on_path).resolve().parent))
    for folder in candidates:
        if all((Path(folder) / b).is_file() for b in ("initdb", "pg_ctl", "postgres")):
            return Path(folder)
    raise PostgresNotInstalled


class PostgresServer:
    """Owns one PostgreSQL cluster: ``initdb --auth=trust -U postgres``, start, stop, remove.

    :param database: a database created once the server is up (tests make their own on top)
    """

    def __init__(self, *, database: str = "eventbus_test") -> None:
        self.bin = find_pg_bin()
        self.database = database
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="eventbus-pg-"))
        self.data = self.dir / "data"
        self.sockets = self.dir / "sockets"
        self.sockets.mkdir()
        self._as_root = os.geteuid() == 0
        if self._as_root:  # initdb and postgres refuse root; hand the directory over
            try:
                shutil.chown(self.dir, "postgres", "postgres")
                shutil.chown(self.sockets, "postgres", "postgres")
            except LookupError:
                shutil.rmtree(self.dir, ignore_errors=True)
                raise PostgresNotInstalled(
                    "running as root, but there is no 'postgres' OS user to run the server as"
                ) from None
        self.running = False

    def url(self, database: str | None = None, *, driver: str = "asyncpg") -> str:
        """The SQLAlchemy URL of *database* (default: the one created at start)."""
        return f"postgresql+{driver}://postgres@127.0.0.1:{self.port}/{database or self.database}"

    def _run(self, args: Sequence[str], *, timeout: float = 30) -> None:
        cmd = [*(["runuser", "-u", "postgres", "--"] if self._as_root else []), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise RuntimeError(
                f"{Path(args[0]).name} exited with {proc.returncode}: {proc.stderr.strip()!r}"
            )

    def start(self) -> None:
        self._run(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "--auth=trust",
                "-U",
                "postgres",
                "--encoding=UTF8",
                "--no-sync",
                "--no-instructions",
            ]
        )
        self.launch()
        self.execute(f'CREATE DATABASE "{self.database}"')

    def launch(self) -> None:
        """Start the cluster ``initdb`` made (again, after :meth:`shutdown`)."""
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.sockets} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            [
                str(self.bin / "pg_ctl"),
                "start",
                "-D",
                str(self.data),
                "-w",
                "-t",
                "20",
                "-l",
                str(self.dir / "server.log"),
                "-o",
                options,
            ]
        )
        self.running = True
        self._wait_ready()

    def shutdown(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE``: ``fast`` ends every session (an outage, as an operator's
        restart makes one); :meth:`launch` starts it again, with its data."""
        self.resume()
        self._run([str(self.bin / "pg_ctl"), "stop", "-D", str(self.data), "-m", mode, "-w"])
        self.running = False

    def _pids(self) -> list[int]:
        """The postmaster and every process it started (the backends of the sessions)."""
        first = (self.data / "postmaster.pid").read_text().split()
        pids = [int(first[0])]
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                lines = status.read_text().splitlines()
            except OSError:
                continue
            fields = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
            if int(fields.get("PPid", "0")) == pids[0]:
                pids.append(int(status.parent.name))
        return pids

    def pause(self) -> None:
        """SIGSTOP the server and its backends: connections stay open, nothing answers (a
        stalled VM or disk)."""
        for pid in self._pids():
            with contextlib.suppress(ProcessLookupError):  # a backend that just ended
                os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.running and (self.data / "postmaster.pid").exists():
            for pid in self._pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"PostgreSQL did not listen on port {self.port} within 10 s")

    def execute(self, sql: str, *, database: str = "postgres") -> None:
        """Run one statement through ``psql`` (for setup: databases, not test data)."""
        psql = self.bin / "psql"
        if not psql.is_file():
            psql = Path(shutil.which("psql") or "psql")
        self._run(
            [
                str(psql),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                database,
                "-v",
                "ON_ERROR_STOP=1",
                "-qc",
                sql,
            ]
        )

    def stop(self) -> None:
        if self.running:
            self.resume()
            self._run([str(self.bin / "pg_ctl"), "stop", "-D", str(self.data), "-m", "immediate"])
            self.running = False

    def cleanup(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
