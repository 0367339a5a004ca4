"""The spill file: failure records the SQL writer could not keep in memory, as JSON lines.

One JSON object per line, with the failure table's columns (timestamps as ISO 8601 text in UTC).
Several processes may share one spill file (replicas on one host with the same database): every
append and every claim takes an exclusive ``flock`` on it. Re-ingesting first *claims* the file
(renames it to ``<name>.<random>.ingesting`` under the lock, so that appenders start a new
file), then reads the claimed file in chunks and deletes it once every line is in the table. A
claimed file left behind by a crash is picked up at the next start; its lines go in again
without duplicates, because the insert skips ids already stored.

Every method here blocks on file I/O: the writer calls them in a worker thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import platformdirs
import sqlalchemy as sa

from .._failures import FailureRecord
from ._sql_common import sqlite_file
from ._sql_table import _record, _row

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: one process per spill file
    fcntl = None  # type: ignore[assignment]

__all__ = ["SpillBacklog", "SpillFile", "SpillReader", "default_spill_path", "spill_dir"]

_TIMES = ("first_failed_at", "last_failed_at", "resolved_at")


#: the environment variable naming the directory of default spill files
SPILL_DIR_VARIABLE = "EVENTBUS_SPILL_DIR"


def spill_dir() -> Path:
    """The directory of default spill files that are not next to a SQLite file:
    ``$EVENTBUS_SPILL_DIR`` if set, else the user's state directory (``$XDG_STATE_HOME/
    eventbus``, ``~/.local/state/eventbus`` on Linux; the platform's own elsewhere). Never the
    current directory: a service may start in a read-only or shared one."""
    chosen = os.environ.get(SPILL_DIR_VARIABLE)
    if chosen:
        return Path(chosen).expanduser().absolute()
    return platformdirs.user_state_path("eventbus")


def default_spill_path(url: sa.URL, table: str) -> Path:
    """In ``$EVENTBUS_SPILL_DIR`` if set; else next to a SQLite file
    (``app.db-eventbus_failures-spill.jsonl``); else (a server database, an in-memory one) in
    the user's state directory (:func:`spill_dir`), named after the database
    (``eventbus-spill-postgresql-db.example-5432-shop-eventbus_failures.jsonl``).
    """
    path = sqlite_file(url)
    if path is not None and not os.environ.get(SPILL_DIR_VARIABLE):
        return path.with_name(f"{path.name}-{table}-spill.jsonl").absolute()
    parts = (url.get_backend_name(), url.host, url.port and str(url.port), url.database, table)
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(p for p in parts if p))
    return spill_dir() / f"eventbus-spill-{name}.jsonl"


def encode(rec: FailureRecord) -> str:
    """One line (without its newline) holding *rec*'s columns."""
    row = _row(rec)
    for key in _TIMES:
        if row[key] is not None:
            row[key] = row[key].isoformat()
    return json.dumps(row, separators=(",", ":"))


def decode(line: str) -> FailureRecord:
    """The record of one line; raises ``ValueError``/``KeyError``/``TypeError`` for a bad one."""
    row: dict[str, Any] = json.loads(line)
    for key in _TIMES:
        if row.get(key) is not None:
            row[key] = datetime.fromisoformat(row[key])
    return _record(row)


class SpillFile:
    """Appends records to *path* and claims the file for re-ingestion, both under ``flock``."""

    def __init__(self, path: Path, *, make_dir: bool = False) -> None:
        self.path = path
        #: create the file's directory (private to the user) when it is missing: a state
        #: directory chosen by default; a path the application gave must exist
        self.make_dir = make_dir

    def __repr__(self) -> str:
        return f"SpillFile({str(self.path)!r})"

    def append(self, records: Sequence[FailureRecord]) -> list[tuple[FailureRecord, Exception]]:
        """Add *records* at the end of the file (created if missing; its directory only with
        ``make_dir``).

        Returns the records that cannot be encoded, with the reason; the others are written.
        """
        lines: list[str] = []
        bad: list[tuple[FailureRecord, Exception]] = []
        for rec in records:
            try:
                lines.append(encode(rec) + "\n")
            except Exception as exc:
                bad.append((rec, exc))
        if not lines:
            return bad
        data = "".join(lines).encode()
        if self.make_dir and not self.path.parent.is_dir():
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._locked_for_append() as fd:
            end = os.lseek(fd, 0, os.SEEK_END)
            if end and os.pread(fd, 1, end - 1) != b"\n":
                data = b"\n" + data  # a line cut short by a crash stays a line of its own
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        return bad

    def claim(self, orphans: bool) -> list[Path]:
        """Move the spill file aside for reading; with *orphans*, also files claimed before by
        a process that did not finish reading them. Returns the files to read, oldest first.
        """
        found: list[Path] = []
        if orphans:
            pattern = f"{glob_escape(self.path.name)}.*.ingesting"
            found = sorted(self.path.parent.glob(pattern), key=_mtime)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return found
        try:
            _lock(fd)
            if _is_file_at(fd, self.path) and os.fstat(fd).st_size:
                claimed = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex}.ingesting")
                os.replace(self.path, claimed)
                found.append(claimed)
        finally:
            os.close(fd)  # releases the lock
        return found

    @contextlib.contextmanager
    def _locked_for_append(self) -> Iterator[int]:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
            try:
                _lock(fd)
                if _is_file_at(fd, self.path):
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # claimed while we waited for the lock: append to the new file
        try:
            yield fd
        finally:
            os.close(fd)


class SpillReader:
    """Reads a claimed spill file in chunks; :meth:`remove` deletes it once all is stored."""

    def __init__(self, path: Path, *, make_dir: bool = False) -> None:
        self.path = path
        #: create the file's directory (private to the user) when it is missing: a state
        #: directory chosen by default; a path the application gave must exist
        self.make_dir = make_dir
        self._fh: IO[bytes] | None
        try:
            self._fh = open(path, "rb")
        except FileNotFoundError:  # another process ingested it meanwhile
            self._fh = None

    def read(self, n: int) -> tuple[list[FailureRecord], list[str]]:
        """Up to *n* records, and the lines among them that could not be read back; two
        empty lists at the end of the file."""
        records: list[FailureRecord] = []
        bad: list[str] = []
        if self._fh is None:
            return records, bad
        for raw in self._fh:
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            try:
                records.append(decode(line))
            except (ValueError, KeyError, TypeError, AttributeError):
                bad.append(line)
            if len(records) + len(bad) >= n:
                break
        return records, bad

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class SpillBacklog:
    """The spill files claimed for reading back, oldest first: the writer's side of the spill.

    Not thread-safe: one caller at a time (the writer, through a worker thread).
    """

    def __init__(self, spill: SpillFile) -> None:
        self.spill = spill
        self._claimed: list[Path] = []
        self._reader: SpillReader | None = None

    @property
    def reading(self) -> Path | None:
        """The file being read, for messages."""
        return None if self._reader is None else self._reader.path

    def next_chunk(self, n: int, orphans: bool) -> tuple[list[FailureRecord], list[str], bool]:
        """Claim the spill file if nothing is claimed (*orphans*: also what a crash left), then
        read up to *n* lines. Returns the records, the unreadable lines, and whether every
        claimed file has been read to its end and removed (nothing more to read for now)."""
        if self._reader is None:
            if not self._claimed:
                self._claimed = self.spill.claim(orphans)
                if not self._claimed:
                    return [], [], True
            self._reader = SpillReader(self._claimed[0])
        records, bad = self._reader.read(n)
        if records or bad:
            return records, bad, False
        self._reader.remove()  # its every line is in the table now
        self._reader = None
        self._claimed.pop(0)
        return [], [], not self._claimed

    def close(self) -> None:
        """Stop reading; claimed files stay where they are, for the next start."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._claimed = []


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _lock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)


def _is_file_at(fd: int, path: Path) -> bool:
    """Whether *fd* is still the file at *path* (a claim renames it away)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)
