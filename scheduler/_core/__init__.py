"""The engine of the scheduler: the loop (:class:`~scheduler._core._loop.Scheduler`), its
timetable and tasks, one fire's runner, the lock's side of a fire, the clock.

The model (jobs, triggers, cron expressions, run records, events, errors) sits one level up,
in :mod:`scheduler`, and imports nothing from here.
"""
