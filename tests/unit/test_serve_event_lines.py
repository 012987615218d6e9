"""`heron serve --events jsonl`: each session's turn events as JSON lines on stdout."""

from __future__ import annotations

import json

import pytest

from heron.cli.serve import _session_events
from heron.turn.events import TextDeltaEvent


def test_a_session_s_events_carry_escape_sequences_as_json_escapes_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    nasty = "x\x9b2J\u202eb\x1b]0;pwn\x07"
    _session_events("s\x9b")(TextDeltaEvent(turn_id="t1", text=nasty))

    printed = capsys.readouterr().out
    assert not {"\x1b", "\x9b", "\x07", "\u202e"} & set(printed), printed
    assert json.loads(printed) == {
        "session": "s\x9b",
        "turn_id": "t1",
        "type": "text_delta",
        "text": nasty,
    }
