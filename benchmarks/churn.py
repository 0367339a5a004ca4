"""Subscriptions per request: what an ``on()`` + ``off()`` or a ``wait_for()`` costs a service.

Question: a service that subscribes per request (``wait_for()``, ``subscribed()``) while it goes
on emitting its other events: does each subscription make every other emit slower? Twenty event
types with three sync listeners each; one round emits each type once. The first table adds one
``on()`` + ``off()`` of a listener of one type per round; the second serves a request that
waits for its reply with ``wait_for()`` against one served by a permanent listener, each
followed by the round of other emits. Before subscriptions invalidated only the event types they
match, each change recompiled the dispatch of all twenty types (~500x a round).

Every sample checks its work: listener calls counted, replies received.

Run: ``.venv/bin/python benchmarks/churn.py [--quick] [--json PATH]``
"""

from __future__ import annotations

import types
from collections.abc import Callable

import anyio
from _harness import (
    AsyncLoop,
    Options,
    Row,
    Table,
    Work,
    counted,
    environment,
    finish,
    parse_options,
    print_environment,
    run_async_cases,
    run_sync_cases,
)

from eventbus import Event, EventBus, EventRegistry

TYPES = 20
LISTENERS = 3

registry = EventRegistry()
kinds: list[type[Event]] = [
    types.new_class(f"Kind{i}", (Event,), {"name": f"churn{i}.done", "registry": registry})
    for i in range(TYPES)
]


class Reply(Event, name="churn.reply", registry=registry):
    n: int


def service() -> tuple[EventBus, list[Event], Work]:
    """A bus with *TYPES* event types of *LISTENERS* counting listeners each, one event of
    each type, and the work of one round of emits."""
    listeners, done = counted(TYPES * LISTENERS)
    bus = EventBus(registry=registry)
    for i, cls in enumerate(kinds):
        for j in range(LISTENERS):
            bus.on(cls, listeners[i * LISTENERS + j], name=f"l{i}_{j}")
    return bus, [cls() for cls in kinds], Work(done, TYPES * LISTENERS)


def churn(options: Options) -> Table:
    steady_bus, events, steady_work = service()
    churn_bus, churn_events, churn_work = service()

    def steady(n: int) -> None:
        for _ in range(n):
            for e in events:
                steady_bus.emit(e)

    def on_off(n: int) -> None:
        for _ in range(n):
            churn_bus.on(kinds[0], lambda e: None, name="request")
            churn_bus.off(kinds[0], "request")
            for e in churn_events:
                churn_bus.emit(e)

    base = f"one emit of each of {TYPES} types ({LISTENERS} listeners each)"
    label = "the same + on() + off() of one type's listener"
    stats = run_sync_cases(
        {base: steady, label: on_off}, options, work={base: steady_work, label: churn_work}
    )
    table = Table("A subscription per round among the emits of 20 event types", unit="ns/round")
    table.add(Row(base, stats[base]))
    table.add(Row(label, stats[label], base))
    return table


async def waiting(options: Options) -> Table:
    permanent_bus, events, permanent_work = service()
    waiting_bus, waiting_events, waiting_work = service()
    arrived: list[anyio.Event] = []
    replies = [0, 0]

    def reply_received(e: Event) -> None:
        replies[0] += 1
        arrived[-1].set()

    permanent_bus.on(Reply, reply_received, name="replies")

    async def by_listener(n: int) -> None:
        for k in range(n):
            arrived.append(anyio.Event())
            async with anyio.create_task_group() as tg:
                tg.start_soon(_reply, permanent_bus, k)
                await arrived[-1].wait()
            arrived.clear()
            for e in events:
                permanent_bus.emit(e)

    async def by_wait_for(n: int) -> None:
        for k in range(n):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_reply, waiting_bus, k)
                got = await waiting_bus.wait_for(Reply, where=_reply_to(k))
            replies[1] += got.n == k
            for e in waiting_events:
                waiting_bus.emit(e)

    base = "reply to a permanent listener, then a round"
    label = "reply awaited with wait_for(), then a round"
    cases: dict[str, AsyncLoop] = {base: by_listener, label: by_wait_for}
    work = {
        base: Work(lambda: permanent_work.done() + replies[0], TYPES * LISTENERS + 1),
        label: Work(lambda: waiting_work.done() + replies[1], TYPES * LISTENERS + 1),
    }
    stats = await run_async_cases(cases, options, work=work)
    table = Table("A request that waits for its reply, among 20 event types", unit="ns/request")
    table.add(Row(base, stats[base]))
    table.add(Row(label, stats[label], base))
    return table


def _reply_to(k: int) -> Callable[[Reply], bool]:
    return lambda e: e.n == k


async def _reply(bus: EventBus, k: int) -> None:
    await anyio.lowlevel.checkpoint()
    bus.emit(Reply(n=k))


def main() -> None:
    options = parse_options(__doc__)
    env = environment()
    print_environment(env)
    tables = [churn(options)]
    print(tables[-1].render(), end="\n\n", flush=True)
    tables.append(anyio.run(waiting, options))
    print(tables[-1].render(), end="\n\n", flush=True)
    finish("churn", tables, options, env)


if __name__ == "__main__":
    main()
