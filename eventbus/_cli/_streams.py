"""``python -m eventbus streams ACTION``: operate durable events (``status``, ``pending``,
``dead``, ``replay``, ``republish``, ``declare``, ``forget``, ``backfill``, ``redrive``,
``scheduled``, ``cancel``).

Every command takes ``--redis`` (default ``$EVENTBUS_REDIS``, else ``redis://127.0.0.1:6379/0``)
and ``--prefix``; ``status``, ``republish``, ``backfill``, ``redrive``, ``scheduled`` and
``cancel`` also read the outbox
(``redrive`` the failure table too) through ``--db`` (the same rule as ``failures``). Nothing
here needs the application's code: streams are found by ``SCAN``, envelopes are shown as
stored. Exit codes as for ``failures``: 0 success, 1 Redis or the database failed, 2 bad
usage. Redis and SQLAlchemy are imported only when a command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..cli import InputError, describe_error, positive_int
from ._common import db_source, find_failure, open_store

if TYPE_CHECKING:
    from ..durable import RedisStreams

__all__ = ["add_streams_parser"]

DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
EXIT_OK, EXIT_ERROR = 0, 1


def add_streams_parser(
    commands: Any,
    *,
    db_help: str,
    when: Callable[[str], datetime],
) -> None:
    """Add ``streams`` and its actions to the ``python -m eventbus`` subcommands."""
    streams = commands.add_parser(
        "streams",
        help="inspect and operate durable event streams (Redis)",
        description="Inspect and operate the Redis streams of durable events.",
    )
    sub = streams.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--redis",
        metavar="URL",
        help=f"the Redis URL, redis+cluster://HOST:PORT for a Redis Cluster "
        f"(default: $EVENTBUS_REDIS, else {DEFAULT_REDIS})",
    )
    common.add_argument("--prefix", default="eventbus", help="the key prefix (default: eventbus)")
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument("--db", metavar="URL|PATH", help=db_help)

    p = sub.add_parser(
        "status", parents=[common, db], help="streams, groups (pending, lag), dead letters, outbox"
    )
    p.add_argument("--event", action="append", metavar="NAME", help="only this event (repeat)")
    p.add_argument("--no-db", action="store_true", help="skip the outbox backlog")
    p.set_defaults(handler=_status)

    p = sub.add_parser("pending", parents=[common], help="delivered, unacknowledged entries")
    p.add_argument("event", metavar="EVENT", help="the event name, e.g. order.paid")
    p.add_argument("--group", required=True, metavar="GROUP", help="service:listener")
    p.add_argument("--limit", type=positive_int, default=50, metavar="N", help="default: 50")
    p.set_defaults(handler=_pending)

    p = sub.add_parser("dead", parents=[common], help="dead letters, oldest first")
    p.add_argument("event", nargs="?", metavar="EVENT", help="one event (default: every one)")
    p.add_argument("--group", metavar="GROUP", help="only dead letters of this group")
    p.add_argument("--limit", type=positive_int, default=50, metavar="N", help="default: 50")
    p.set_defaults(handler=_dead)

    p = sub.add_parser("replay", parents=[common], help="hand dead letters back to their group")
    p.add_argument("event", metavar="EVENT", help="the event name")
    p.add_argument("--group", metavar="GROUP", help="only dead letters of this group")
    p.add_argument("--id", action="append", dest="ids", metavar="DEAD_ID", help="repeatable")
    p.add_argument("--all", action="store_true", help="required to replay without --id")
    p.set_defaults(handler=_replay)

    p = sub.add_parser(
        "resume", parents=[common], help="resume a group its kill switch paused, in every process"
    )
    p.add_argument("event", metavar="EVENT", help="the event name")
    p.add_argument("--group", required=True, metavar="GROUP", help="service:listener")
    p.set_defaults(handler=_resume)

    p = sub.add_parser(
        "republish", parents=[common, db], help="publish outbox rows again (after Redis lost data)"
    )
    p.add_argument("--since", type=when, required=True, metavar="WHEN", help="ISO time or 2h")
    p.add_argument("--event", action="append", metavar="NAME", help="only this event (repeat)")
    p.set_defaults(handler=_republish)

    p = sub.add_parser(
        "declare",
        parents=[common],
        help="register a group before its service first runs (the janitor keeps its events)",
    )
    p.add_argument("event", metavar="EVENT", help="the event name")
    p.add_argument("--group", required=True, metavar="GROUP", help="service:listener")
    p.set_defaults(handler=_declare)

    p = sub.add_parser("forget", parents=[common], help="retire a group: unregister and destroy it")
    p.add_argument("event", metavar="EVENT", help="the event name")
    p.add_argument("--group", required=True, metavar="GROUP", help="service:listener")
    p.set_defaults(handler=_forget)

    p = sub.add_parser(
        "backfill",
        parents=[common, db],
        help="hand one group the events its stream no longer holds, from the outbox",
    )
    p.add_argument("event", metavar="EVENT", help="the event name")
    p.add_argument("--group", required=True, metavar="GROUP", help="service:listener")
    p.add_argument("--since", type=when, required=True, metavar="WHEN", help="ISO time or 2h")
    p.set_defaults(handler=_backfill)

    p = sub.add_parser(
        "redrive",
        parents=[common, db],
        help="hand a pending durable failure whose redelivery was lost back to its group",
    )
    p.add_argument("ids", nargs="+", metavar="ID", help="failure ids (or unique prefixes)")
    p.add_argument(
        "--force", action="store_true", help="even if its redelivery is still on its way"
    )
    p.set_defaults(handler=_redrive)

    p = sub.add_parser(
        "scheduled", parents=[common, db], help="events published for later, soonest first"
    )
    p.add_argument("--limit", type=positive_int, default=50, metavar="N", help="default: 50")
    p.set_defaults(handler=_scheduled)

    p = sub.add_parser(
        "cancel", parents=[common, db], help="cancel scheduled events not yet published"
    )
    p.add_argument("ids", nargs="+", metavar="EVENT_ID", help="event ids ('streams scheduled')")
    p.set_defaults(handler=_cancel)


def _transport(args: argparse.Namespace, *, db: bool) -> RedisStreams:
    from ..backends.sql import database_url, default_db_url
    from ..durable import DurableOptions, RedisStreams

    url = args.redis or os.environ.get("EVENTBUS_REDIS") or DEFAULT_REDIS
    engine: Any = "sqlite+aiosqlite:///:memory:"
    if db:
        try:
            engine = database_url(getattr(args, "db", None) or default_db_url(), must_exist=True)
        except (ValueError, FileNotFoundError) as exc:
            raise InputError(f"{db_source(getattr(args, 'db', None))} {exc}") from None
    try:
        return RedisStreams(
            url,  # a URL: the transport builds the client and closes it in aclose()
            engine,
            service="cli",
            prefix=args.prefix,
            options=DurableOptions(relay=False),
            create_tables=False,
            check_server=False,
        )
    except ValueError as exc:
        raise InputError(f"--redis {url!r} or --prefix: {exc}") from None


async def _run(args: argparse.Namespace, work: Callable[[RedisStreams], Awaitable[int]]) -> int:
    from redis.exceptions import RedisError

    streams = _transport(
        args,
        db=args.action in ("status", "republish", "backfill", "redrive", "scheduled", "cancel")
        and not _no_db(args),
    )
    try:
        return await work(streams)
    except ValueError as exc:  # a group or event name that cannot be one
        raise InputError(str(exc)) from None
    except RedisError as exc:
        print(f"error: Redis failed: {describe_error(exc)}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        await streams.aclose()


def _no_db(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "no_db", False))


async def _status(args: argparse.Namespace) -> int:
    async def work(streams: RedisStreams) -> int:
        statuses = await streams.status(args.event)
        backlog = None if _no_db(args) else await streams.rt.outbox.backlog(streams.engine)
        if args.json:
            out: dict[str, Any] = {"streams": [_plain(s) for s in statuses]}
            if backlog is not None:
                out["outbox"] = {
                    "backlog": backlog.count,
                    "oldest_age": backlog.oldest_age(datetime.now(UTC)),
                }
            _print_json(out)
            return EXIT_OK
        if backlog is not None:
            age = backlog.oldest_age(datetime.now(UTC))
            shown = "" if age is None else f", oldest {age:.1f} s old"
            print(f"outbox: {backlog.count} unpublished{shown}")
        if not statuses:
            print("no streams")
        for s in statuses:
            plural = "" if s.dead == 1 else "s"
            print(f"{s.event}  ({s.stream}): {s.length} entries, {s.dead} dead letter{plural}")
            rows = [
                (
                    "  " + g.name,
                    str(g.consumers),
                    str(g.pending),
                    "?" if g.lag is None else str(g.lag),
                    str(g.redelivery_pending),
                    g.last_delivered,
                )
                for g in s.groups
            ]
            _table(("  GROUP", "CONSUMERS", "PENDING", "LAG", "REDELIVERY", "LAST DELIVERED"), rows)
            for g in s.groups:
                for p in g.paused:
                    print(f"  {_paused_line(p)}")
            if s.absent_groups:
                print(
                    f"  registered, not created: {', '.join(s.absent_groups)} "
                    "(the janitor keeps the outbox's retention of entries for them)"
                )
        return EXIT_OK

    return await _run(args, work)


async def _known(
    streams: RedisStreams, event: str, group: str | None = None, *, dead: bool = False
) -> None:
    """Refuse an event without a stream, or a group not on it, naming the known ones: an
    answer of "nothing pending" for a misspelt name would look like success.

    :param dead: a group is known if it has dead letters too (a group forgotten since)
    :raises InputError: naming what is unknown and what is known
    """
    from ..durable._status import discover_events, stream_status

    events = await discover_events(streams.client, streams.keys)
    if event not in events:
        raise InputError(
            f"no stream for event {event!r} under prefix {streams.keys.prefix!r}; "
            f"known events: {_names(events)}"
        )
    if group is None:
        return
    status = await stream_status(streams.client, streams.keys, event)
    known = {g.name for g in status.groups} | set(status.absent_groups)
    if dead and group not in known:
        known |= {d.group for d in await streams.dead_letters(event, limit=None)}
    groups = sorted(known)
    if group not in groups:
        raise InputError(
            f"no group {group!r} on the stream of {event!r}; its groups: {_names(groups)}"
        )


def _names(names: Sequence[str], most: int = 10) -> str:
    if not names:
        return "none"
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


async def _pending(args: argparse.Namespace) -> int:
    from ..durable._status import pending_entries

    async def work(streams: RedisStreams) -> int:
        await _known(streams, args.event, args.group)
        rows = await pending_entries(
            streams.client, streams.keys, args.event, args.group, limit=args.limit
        )
        if args.json:
            _print_json([_plain(r) for r in rows])
            return EXIT_OK
        if not rows:
            print("nothing pending")
            return EXIT_OK
        _table(
            ("ENTRY", "CONSUMER", "IDLE (s)", "DELIVERIES", "STREAM"),
            [
                (r.entry_id, r.consumer, f"{r.idle_ms / 1000:.1f}", str(r.deliveries), r.stream)
                for r in rows
            ],
        )
        return EXIT_OK

    return await _run(args, work)


async def _dead(args: argparse.Namespace) -> int:
    from ..durable._status import discover_events

    async def work(streams: RedisStreams) -> int:
        if args.event:
            await _known(streams, args.event, args.group, dead=True)
        names = [args.event] if args.event else await discover_events(streams.client, streams.keys)
        letters = []
        for name in names:
            letters += await streams.dead_letters(name, group=args.group, limit=args.limit)
        letters = letters[: args.limit]
        if args.json:
            _print_json([_plain(d) for d in letters])
            return EXIT_OK
        if not letters:
            print("no dead letters")
            return EXIT_OK
        _table(
            ("DEAD ID", "EVENT", "GROUP", "TRIES", "FAILURE", "ERROR"),
            [
                (
                    d.dead_id,
                    d.event,
                    d.group,
                    str(d.deliveries),
                    d.failure_id[:12],
                    _clip(d.error, 60),
                )
                for d in letters
            ],
        )
        return EXIT_OK

    return await _run(args, work)


async def _replay(args: argparse.Namespace) -> int:
    if not args.ids and not args.all:
        raise InputError("replay needs --id DEAD_ID (repeatable) or --all")

    async def work(streams: RedisStreams) -> int:
        await _known(streams, args.event, args.group, dead=True)
        if args.ids:
            letters = await streams.dead_letters(args.event, group=args.group, limit=None)
            unknown = sorted(set(args.ids) - {d.dead_id for d in letters})
            if unknown:
                of_group = f" of group {args.group!r}" if args.group else ""
                raise InputError(
                    f"no dead letter {', '.join(unknown)} of {args.event!r}{of_group}; "
                    f"its dead letters: {_names([d.dead_id for d in letters])}"
                )
        new = await streams.replay(args.event, group=args.group, ids=args.ids)
        if args.json:
            _print_json({"replayed": len(new), "ids": new})
        else:
            print(f"replayed {len(new)} dead letter{'s' if len(new) != 1 else ''}")
        return EXIT_OK

    return await _run(args, work)


def _paused_line(p: Any) -> str:
    if p.resume_requested:
        return f"{p.group} in {p.consumer}: paused, resume requested"
    since = p.paused_since.strftime("%H:%M:%S") if p.paused_since else "?"
    until = p.resumes_at.strftime("%H:%M:%S") if p.resumes_at else "?"
    return (
        f"{p.group} in {p.consumer}: paused since {since} UTC, resumes at {until} UTC "
        f"({p.failures} of {p.deliveries} deliveries failed)"
    )


async def _resume(args: argparse.Namespace) -> int:
    async def work(streams: RedisStreams) -> int:
        n = await streams.resume_group(args.event, args.group)
        if args.json:
            _print_json({"resumed": args.group, "consumers": n})
        elif n:
            plural = "es" if n != 1 else ""
            print(f"group {args.group} of {args.event}: {n} paused process{plural} told to resume")
        else:
            print(f"group {args.group} of {args.event} is paused nowhere")
        return EXIT_OK

    return await _run(args, work)


async def _republish(args: argparse.Namespace) -> int:
    async def work(streams: RedisStreams) -> int:
        n = await streams.republish(since=args.since, events=args.event)
        if args.json:
            _print_json({"republished": n})
        else:
            print(f"{n} outbox row{'s' if n != 1 else ''} will be published again by the relays")
        return EXIT_OK

    return await _run(args, work)


async def _declare(args: argparse.Namespace) -> int:
    async def work(streams: RedisStreams) -> int:
        new = await streams.declare_group(args.event, args.group)
        if args.json:
            _print_json({"declared": args.group, "new": new})
        else:
            state = "declared" if new else "already registered"
            print(f"group {args.group} {state} for {args.event}")
        return EXIT_OK

    return await _run(args, work)


async def _forget(args: argparse.Namespace) -> int:
    async def work(streams: RedisStreams) -> int:
        found = await streams.forget_group(args.event, args.group)
        if args.json:
            _print_json({"forgotten": args.group, "found": found})
        else:
            state = "forgotten" if found else "was not registered and has no group"
            print(f"group {args.group} of {args.event} {state}")
        return EXIT_OK

    return await _run(args, work)


async def _backfill(args: argparse.Namespace) -> int:
    async def work(streams: RedisStreams) -> int:
        n = await streams.backfill(args.event, args.group, since=args.since)
        if args.json:
            _print_json({"backfilled": n})
        else:
            print(f"{n} event{'s' if n != 1 else ''} handed to group {args.group}")
        return EXIT_OK

    return await _run(args, work)


async def _redrive(args: argparse.Namespace) -> int:
    async def work(streams: RedisStreams) -> int:
        store = await open_store(args.db)
        streams.failures = streams.rt.failures = store
        out: list[dict[str, str | None]] = []
        try:
            for key in args.ids:
                rec = await find_failure(store, key)
                entry = await streams.redrive(rec, force=args.force)
                out.append({"failure": rec.id, "group": rec.durable_group, "entry": entry})
                if not args.json:
                    print(f"{rec.id[:12]}  handed back to {rec.durable_group} as entry {entry}")
        finally:
            await store.aclose()
        if args.json:
            _print_json(out)
        return EXIT_OK

    return await _run(args, work)


async def _scheduled(args: argparse.Namespace) -> int:
    async def work(streams: RedisStreams) -> int:
        found = await streams.scheduled(limit=args.limit)
        if args.json:
            _print_json([_plain(row) for row in found])
        elif not found:
            print("no scheduled events")
        else:
            _table(
                ("DUE (UTC)", "EVENT", "KEY", "EVENT ID"),
                [
                    (
                        row.due_at.isoformat(timespec="milliseconds"),
                        row.name,
                        row.aggregate_key or "-",
                        row.event_id,
                    )
                    for row in found
                ],
            )
        return EXIT_OK

    return await _run(args, work)


async def _cancel(args: argparse.Namespace) -> int:
    async def work(streams: RedisStreams) -> int:
        results: dict[str, bool] = {}
        for event_id in args.ids:
            async with streams.engine.begin() as conn:
                results[event_id] = await streams.cancel_scheduled(event_id, conn)
        if args.json:
            _print_json(
                {
                    "cancelled": [k for k, v in results.items() if v],
                    "not_cancelled": [k for k, v in results.items() if not v],
                }
            )
        else:
            for event_id, done in results.items():
                state = (
                    "cancelled"
                    if done
                    else "not cancelled: not scheduled, already published, handed to a "
                    "relay once, or unknown"
                )
                print(f"{event_id}  {state}")
        return EXIT_OK if all(results.values()) else EXIT_ERROR

    return await _run(args, work)


# -- output --------------------------------------------------------------------------------------


def _plain(obj: Any) -> Any:
    import dataclasses

    data = dataclasses.asdict(obj)
    return json.loads(json.dumps(data, default=str))


def _print_json(data: object) -> None:
    print(json.dumps(data, indent=2))


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _clip(text: str, width: int) -> str:
    text = text.splitlines()[0] if text else ""
    return text if len(text) <= width else text[: width - 1] + "…"
