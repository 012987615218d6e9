"""heron's one instant format: RFC 3339 in UTC with a `Z` suffix."""

from __future__ import annotations

from datetime import datetime

from heron._support.timefmt import utc_rfc3339


def test_an_instant_is_written_in_utc_with_z_to_the_second_or_millisecond() -> None:
    assert utc_rfc3339(1_710_513_000.25) == "2024-03-15T14:30:00Z"
    assert utc_rfc3339(1_710_513_000.25, precision="milliseconds") == "2024-03-15T14:30:00.250Z"
    assert utc_rfc3339(0) == "1970-01-01T00:00:00Z"


def test_finer_digits_are_cut_so_a_time_never_reads_later_than_it_was() -> None:
    assert utc_rfc3339(1_710_513_059.9994) == "2024-03-15T14:30:59Z"
    assert utc_rfc3339(1_710_513_059.9994, precision="milliseconds") == "2024-03-15T14:30:59.999Z"


def test_the_text_reads_back_as_the_same_instant() -> None:
    text = utc_rfc3339(1_710_513_000.25, precision="milliseconds")
    assert datetime.fromisoformat(text).timestamp() == 1_710_513_000.25
