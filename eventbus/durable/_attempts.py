"""What became of the calls an entry had: the record that isolates a poison entry.

Redis' delivery count is not a count of calls. When a listener ends its process (or stalls it
past ``visibility``), every entry that process held comes back with the count one higher,
including the batch-mates whose calls never began; each further crash charges them again,
until they are dead-lettered without ever having failed. So a consumer keeps, per group, a
hash of attempt records (``<prefix>:evt:{<name>}:runs:<group>``, one field per entry that
failed or ran alone) and counts calls from it:

* a normal failure records itself (with the retry it schedules, in one script);
* an entry that comes back with deliveries its record does not explain had its consumer end
  or stall while it was in flight: it is a *suspect*, and runs alone (no other call of its
  group in this process beside it) until it succeeds, fails normally or ends the process;
  that absence is charged once, as one crash, whatever the count says;
* before a call alone, the record is written with that call charged as a crash; a normal
  outcome takes the charge back. Only calls alone can then be charged more than once.

The dead letter for exhausted calls needs at least one call alone (an entry that never ran is
never dead-lettered for it), and names the cause: "the process ended while it ran, 3 times".
"""

from __future__ import annotations

import dataclasses

__all__ = ["Attempts", "classify", "field_of"]


@dataclasses.dataclass(frozen=True, slots=True)
class Attempts:
    """The calls of one entry so far, as its record shows them."""

    failures: int = 0  #: calls that raised (retried, or dead-lettered at the last)
    crashes: int = 0  #: calls its process did not survive (ended, or stalled past visibility)
    seen: int = 0  #: Redis' delivery count when the record was written
    running: bool = False  #: a call alone began and has not ended (a crash if it comes back)
    alone: int = 0  #: calls run alone (a suspect's)

    @property
    def calls(self) -> int:
        return self.failures + self.crashes

    def encode(self) -> str:
        return f"{self.failures} {self.crashes} {self.seen} {int(self.running)} {self.alone}"

    @classmethod
    def decode(cls, raw: str | bytes | None) -> Attempts | None:
        """The record stored in *raw*; ``None`` for none or an unreadable one."""
        if not raw:
            return None
        text = raw.decode() if isinstance(raw, bytes) else raw
        try:
            failures, crashes, seen, running, alone = (int(p) for p in text.split())
        except ValueError:
            return None
        return cls(failures, crashes, seen, bool(running), alone)

    def starting_alone(self, deliveries: int) -> Attempts:
        """The record to write before a call alone: that call charged as a crash."""
        return dataclasses.replace(
            self, crashes=self.crashes + 1, seen=deliveries, running=True, alone=self.alone + 1
        )

    def failed(self, deliveries: int) -> Attempts:
        """The record after a call that raised (a call alone's crash charge taken back)."""
        crashes = self.crashes - 1 if self.running else self.crashes
        return Attempts(self.failures + 1, crashes, deliveries, False, self.alone)

    def excused(self, deliveries: int) -> Attempts:
        """The record after a call that failed while its group's kill switch had tripped:
        not charged (the outage's fault, not the event's)."""
        crashes = self.crashes - 1 if self.running else self.crashes
        return Attempts(self.failures, crashes, deliveries, False, self.alone)


def classify(deliveries: int, record: Attempts | None) -> tuple[Attempts, bool]:
    """The attempts of an entry handed over with *deliveries*, and whether it is a suspect.

    Every delivery after the first follows a call that failed (recorded) or one whose
    consumer ended or stalled (not recorded). A call alone that began and did not end is
    charged already; an unexplained gap is charged once, however wide: the batch-mates of a
    poison entry come back with it each time its process ends, without having run.
    """
    rec = record or Attempts()
    if rec.running:
        return dataclasses.replace(rec, running=False), True
    if deliveries - 1 > rec.seen:
        return dataclasses.replace(rec, crashes=rec.crashes + 1, seen=deliveries - 1), True
    return rec, False


def field_of(entry_id: str, redelivered: bool) -> str:
    """The record's field: ids of the event's stream and the group's redelivery stream may
    coincide, so the latter's are marked."""
    return f"re:{entry_id}" if redelivered else entry_id
