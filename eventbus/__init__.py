"""An async, in-process event bus with explicit semantics and failures that are never silent.

=====================  ===============================  ===================================
call                   sync listener                    async listener
=====================  ===============================  ===================================
``emit(e)``            runs inline, in order, before    queued for the bus's workers, each
                       ``emit`` returns                 run in a copy of the publisher's
                                                        context taken at emit time; ``emit``
                                                        returns without waiting (needs
                                                        ``async with bus:``)
``await emit_async``   runs inline, in order            run concurrently; awaited
=====================  ===============================  ===================================

Where errors go: every listener exception is caught per listener, logged at ERROR (a few lines
per listener and error type a minute, then a count of the rest), written to ``bus.failures`` as
a :class:`FailureRecord` and passed to ``on_failure``. Under ``capture`` (the default) the
publisher never sees it; under ``propagate`` the remaining listeners still run, then the
publisher gets a :class:`ListenerErrors` group. Background listeners (async ones started by
``emit``) can only capture: nobody is waiting for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._codec import decode_payload as decode_payload
from ._codec import encode_payload as encode_payload
from ._core._bus import BusStatistics as BusStatistics
from ._core._bus import EventBus as EventBus
from ._core._counting import ListenerStatistics as ListenerStatistics
from ._core._emission import Emission as Emission
from ._core._emission import current_emission as current_emission
from ._core._listeners import ErrorPolicy as ErrorPolicy
from ._core._listeners import Listener as Listener
from ._core._listeners import Outcome as Outcome
from ._core._retry import RetryItem as RetryItem
from ._core._retry import RetryReport as RetryReport
from ._core._subscription import Subscription as Subscription
from ._events import Event as Event
from ._events import EventRegistry as EventRegistry
from ._events import default_registry as default_registry
from ._exceptions import BusNotRunningError as BusNotRunningError
from ._exceptions import DuplicateEventError as DuplicateEventError
from ._exceptions import DuplicateListenerError as DuplicateListenerError
from ._exceptions import DurableError as DurableError
from ._exceptions import EventBusError as EventBusError
from ._exceptions import InvalidEventNameError as InvalidEventNameError
from ._exceptions import InvalidPatternError as InvalidPatternError
from ._exceptions import ListenerCancelledError as ListenerCancelledError
from ._exceptions import ListenerDroppedError as ListenerDroppedError
from ._exceptions import ListenerErrors as ListenerErrors
from ._exceptions import ListenerLookupError as ListenerLookupError
from ._exceptions import ListenerShutdownError as ListenerShutdownError
from ._exceptions import ListenerTimeoutError as ListenerTimeoutError
from ._exceptions import MaxListenersExceededWarning as MaxListenersExceededWarning
from ._exceptions import PayloadError as PayloadError
from ._exceptions import RecursionLimitError as RecursionLimitError
from ._exceptions import UnknownEventError as UnknownEventError
from ._exceptions import WrongThreadError as WrongThreadError
from ._failures import FailureRecord as FailureRecord
from ._failures import FailureStatus as FailureStatus
from ._patterns import matches as matches
from ._public import show_as_module
from .backends.memory import MemoryFailureStore as MemoryFailureStore

__all__ = [
    "BusNotRunningError",
    "BusStatistics",
    "DuplicateEventError",
    "DuplicateListenerError",
    "DurableError",
    "Emission",
    "ErrorPolicy",
    "Event",
    "EventBus",
    "EventBusError",
    "EventRegistry",
    "FailureRecord",
    "FailureStatus",
    "InvalidEventNameError",
    "InvalidPatternError",
    "Listener",
    "ListenerCancelledError",
    "ListenerDroppedError",
    "ListenerErrors",
    "ListenerLookupError",
    "ListenerShutdownError",
    "ListenerStatistics",
    "ListenerTimeoutError",
    "MaxListenersExceededWarning",
    "MemoryFailureStore",
    "Outcome",
    "PayloadError",
    "RecursionLimitError",
    "RetryItem",
    "RetryReport",
    "Subscription",
    "UnknownEventError",
    "WrongThreadError",
    "current_emission",
    "decode_payload",
    "default_registry",
    "encode_payload",
    "matches",
]

if TYPE_CHECKING:
    __version__: str  # the distribution's, read on first access
else:

    def __getattr__(name: str) -> Any:
        if name != "__version__":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from ._version import version

        globals()[name] = found = version()  # later lookups skip __getattr__
        return found


show_as_module(__name__, *(globals()[name] for name in __all__), public_too=True)
