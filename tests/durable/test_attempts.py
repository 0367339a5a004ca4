"""The attempt record's arithmetic: which entries are suspects, and what each is charged."""

from __future__ import annotations

from eventbus.durable._attempts import Attempts, classify


def test_a_first_delivery_and_a_recorded_retry_are_not_suspects() -> None:
    assert classify(1, None) == (Attempts(), False)
    failed = Attempts().failed(1)
    assert classify(2, failed) == (failed, False)


def test_a_gap_is_charged_once_however_many_crashes_of_others_it_spans() -> None:
    for deliveries in (2, 3, 7):
        attempts, suspect = classify(deliveries, None)
        assert suspect and attempts.crashes == 1 and attempts.alone == 0


def test_a_call_alone_that_did_not_end_counts_as_one_crash() -> None:
    first, _ = classify(2, None)
    started = first.starting_alone(2)
    again, suspect = classify(3, Attempts.decode(started.encode()))
    assert suspect and (again.crashes, again.alone, again.calls) == (2, 1, 2)


def test_a_normal_failure_alone_takes_its_crash_charge_back() -> None:
    first, _ = classify(2, None)
    failed = first.starting_alone(2).failed(2)
    assert (failed.failures, failed.crashes, failed.running) == (1, 1, False)
    assert classify(3, failed) == (failed, False)  # back to ordinary handling


def test_an_unreadable_record_counts_as_none() -> None:
    assert Attempts.decode(b"garbage") is None
    assert Attempts.decode("") is None
