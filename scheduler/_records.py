"""One row of the run table: a run of a job, or a fire that was skipped.

Kept apart from the runner so that stores (``abc``, ``backends.*``) depend on the record
alone, not on the code that executes runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

__all__ = ["MAX_TRACEBACK", "RunRecord", "RunStatus", "TriggerKind", "abandoned_error"]

#: the longest traceback a run record keeps (its end: where the error was raised)
MAX_TRACEBACK = 20_000

RunStatus = Literal["running", "succeeded", "failed", "skipped", "abandoned"]
TriggerKind = Literal["cron", "interval", "timeout", "at", "manual"]


def abandoned_error(expires_at: datetime | None) -> str:
    """The error text of a run found ``running`` after its lock expired."""
    when = expires_at.isoformat() if expires_at else "?"
    return f"abandoned: still 'running' after its lock expired at {when}; the process died"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """One row of the run table: a run, or a fire that was skipped.

    :param id: unique run id
    :param task_name: the job's name
    :param trigger: what started it: ``cron``, ``interval``, ``timeout``, ``at`` or
        ``manual``
    :param status: ``running``, ``succeeded``, ``failed``, ``skipped``, or ``abandoned``
        (left ``running`` by a process that died; found stale after its lock TTL)
    :param scheduled_at: the fire time this run belongs to (``None`` for a manual run)
    :param started_at: when the run (or the skip) was recorded
    :param finished_at: when it ended
    :param expires_at: when the run's lock expires; a ``running`` row past it is stale
    :param cursor: the last value passed to :meth:`RunContext.checkpoint` (JSON-serialisable)
    :param error: ``"Type: message"`` of a failure, or why a fire was skipped
    :param trace_id: the id in every log line of the run
    :param replica: which process recorded it (host:pid unless configured)
    :param fence: the fencing token of the run's lock acquisition
    :param lock_lost: the run's lock expired or was taken while it ran (an alarm)
    :param result: what the job returned, as JSON (encoded by the bus's codec, directed by
        the function's return annotation); ``None`` for ``None`` and for runs that did not
        succeed
    :param result_repr: ``result`` is the ``repr()`` of a value JSON cannot hold, not the value
    :param traceback: the formatted traceback of a failed run (its last
        :data:`MAX_TRACEBACK` characters), shown by the console beside ``error``
    """

    id: str
    task_name: str
    trigger: TriggerKind
    status: RunStatus
    scheduled_at: datetime | None
    started_at: datetime
    finished_at: datetime | None = None
    expires_at: datetime | None = None
    cursor: Any = None
    error: str | None = None
    trace_id: str = ""
    replica: str = ""
    fence: int | None = None
    lock_lost: bool = False
    result: Any = None
    result_repr: bool = False
    traceback: str | None = None
