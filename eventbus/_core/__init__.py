"""The engine of the bus: :class:`~eventbus._core._bus.EventBus` and the parts it owns.

Nothing here imports the CLI, the console, the durable transport or the interop modules (see
``tests/test_layering.py``); the model (events, exceptions, failure records, the codec) sits
one level up, in :mod:`eventbus`.
"""
