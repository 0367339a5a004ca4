"""A listener's traceback, captured cheaply on the publisher's path and rendered to text later.

:func:`traceback.format_exception` costs tens of µs: it locates each frame's instruction in its
code's position table and re-reads the source to place its carets. A failed listener call pays
for neither: :class:`CapturedTraceback` keeps the exception's printable parts (a
:class:`traceback.TracebackException` with no frames) and, per exception of the chain, the
code object, instruction and line of each frame (code objects, not frames: no locals stay
alive). :meth:`CapturedTraceback.render` turns that into the text ``format_exception`` gives.
"""

from __future__ import annotations

import collections.abc
import itertools
import linecache
import sys
import traceback
import weakref
from collections.abc import Iterator
from types import CodeType, TracebackType

__all__ = ["CapturedTraceback", "register_source"]

#: Generated sources in linecache (code made by exec, as dataclasses makes ``__init__``): the
#: number of live code objects of each, and its lines.
_generated: dict[str, tuple[int, list[str]]] = {}


def register_source(filename: str, source: str, code: CodeType) -> None:
    """Put generated *source* in linecache under *filename* for as long as *code* (compiled
    from it, with that filename) lives; tracebacks through it then show its lines.

    A :class:`CapturedTraceback` holds the code of its frames, so the text it renders later is
    the text it would have rendered at once: the source is neither dropped for newer ones nor
    lost to ``linecache.clearcache()`` (it is put back when rendering).
    """
    lines = source.splitlines(True)
    live, _ = _generated.get(filename, (0, lines))
    _generated[filename] = (live + 1, lines)
    linecache.cache[filename] = (len(source), None, lines, filename)
    weakref.finalize(code, _release, filename)


def _release(filename: str) -> None:
    live, lines = _generated.pop(filename, (1, []))
    if live > 1:
        _generated[filename] = (live - 1, lines)
    else:
        linecache.cache.pop(filename, None)


def _ensure_registered(filename: str) -> None:
    found = _generated.get(filename)
    if found is not None and filename not in linecache.cache:
        lines = found[1]
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)


_Frame = tuple[CodeType, int, int | None]  # code, instruction offset, line


class CapturedTraceback:
    """What ``"".join(traceback.format_exception(exc))`` prints, not rendered yet."""

    __slots__ = ("_frames", "_te")

    def __init__(self, exc: BaseException) -> None:
        # limit=0: the printable parts of the whole chain (messages, notes, causes, groups),
        # without walking a frame; the frames are taken below, per exception.
        te = traceback.TracebackException(
            type(exc), exc, exc.__traceback__, limit=0, lookup_lines=False, compact=True
        )
        limit = _limit()
        self._te = te
        self._frames = [(node, _walk(e.__traceback__, limit)) for node, e in _chain(te, exc)]
        for node, _ in self._frames:
            # Rendered later: a note the bus adds after recording (under "propagate") must not
            # appear, as it would not have in text rendered at once.
            notes = node.__notes__
            if isinstance(notes, collections.abc.MutableSequence):
                node.__notes__ = list(notes)

    def render(self) -> str:
        for node, frames in self._frames:
            node.stack = _stack(frames)
        return "".join(self._te.format())


def _limit() -> int | None:
    """How many frames format_exception prints per exception (``sys.tracebacklimit``)."""
    limit = getattr(sys, "tracebacklimit", None)
    if limit is not None and limit < 0:
        return 0
    return limit


def _chain(
    te: traceback.TracebackException, exc: BaseException
) -> Iterator[tuple[traceback.TracebackException, BaseException]]:
    """Each node of *te* with the exception it was made from (causes, contexts, groups)."""
    seen: set[int] = set()
    todo = [(te, exc)]
    while todo:
        node, e = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node, e
        if node.__cause__ is not None and e.__cause__ is not None:
            todo.append((node.__cause__, e.__cause__))
        if node.__context__ is not None and e.__context__ is not None:
            todo.append((node.__context__, e.__context__))
        if node.exceptions and isinstance(e, BaseExceptionGroup):
            todo.extend(zip(node.exceptions, e.exceptions, strict=False))


def _walk(tb: TracebackType | None, limit: int | None) -> list[_Frame]:
    frames: list[_Frame] = []
    while tb is not None and (limit is None or len(frames) < limit):
        frame = tb.tb_frame
        # As TracebackException does: lets linecache find source that has no file (a zip).
        linecache.lazycache(frame.f_code.co_filename, frame.f_globals)
        frames.append((frame.f_code, tb.tb_lasti, tb.tb_lineno))
        tb = tb.tb_next
    return frames


def _stack(frames: list[_Frame]) -> traceback.StackSummary:
    """The frames as TracebackException would have summarised them (positions, no lines yet)."""
    summaries = []
    for code, lasti, lineno in frames:
        line, end_line, col, end_col = _position(code, lasti)
        summaries.append(
            traceback.FrameSummary(
                code.co_filename,
                lineno if line is None else line,
                code.co_name,
                lookup_line=False,
                end_lineno=end_line,
                colno=col,
                end_colno=end_col,
            )
        )
    for filename in {code.co_filename for code, _, _ in frames}:
        linecache.checkcache(filename)
        _ensure_registered(filename)
    return traceback.StackSummary.from_list(summaries)


def _position(code: CodeType, lasti: int) -> tuple[int | None, int | None, int | None, int | None]:
    if lasti < 0:
        return None, None, None, None
    return next(itertools.islice(code.co_positions(), lasti // 2, None))
