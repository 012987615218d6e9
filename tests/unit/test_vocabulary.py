"""One status vocabulary and one decision model (`heron._support.vocabulary`)."""

from __future__ import annotations

import pytest

from heron._support.vocabulary import (
    ACTIVE_STATUSES,
    STATUSES,
    TERMINAL_STATUSES,
    HumanDecision,
    StatusError,
    advance_status,
    is_terminal,
)
from heron.always_on.jobs.store import FINAL_STATES, JobState


def test_the_vocabulary_is_the_issue_list_split_into_active_and_terminal() -> None:
    assert STATUSES == (
        "queued",
        "working",
        "input_required",
        "auth_required",
        "completed",
        "failed",
        "cancelled",
        "timed_out",
        "lost",
    )
    assert set(STATUSES) == ACTIVE_STATUSES | TERMINAL_STATUSES
    assert not ACTIVE_STATUSES & TERMINAL_STATUSES
    assert is_terminal("lost") and not is_terminal("input_required")


def test_active_statuses_move_freely_and_terminal_ones_never_change() -> None:
    assert advance_status("queued", "working") == "working"
    assert advance_status("input_required", "working") == "working"
    assert advance_status("working", "timed_out") == "timed_out"
    assert advance_status("completed", "completed") == "completed"
    for final in TERMINAL_STATUSES:
        for other in set(STATUSES) - {final}:
            with pytest.raises(StatusError, match=final):
                advance_status(final, other)
    with pytest.raises(StatusError, match="unknown status 'done'"):
        advance_status("working", "done")  # type: ignore[arg-type]


def test_the_job_states_are_words_of_the_vocabulary() -> None:
    assert set(JobState.__args__) <= set(STATUSES)  # type: ignore[attr-defined]
    assert FINAL_STATES == TERMINAL_STATUSES


def test_a_decision_is_one_typed_model_that_round_trips_through_json() -> None:
    decisions = [
        HumanDecision.yes(),
        HumanDecision.no(),
        HumanDecision.always(),
        HumanDecision.replace("the file is already up to date"),
        HumanDecision.edit({"path": "draft.txt"}),
    ]
    for decision in decisions:
        assert HumanDecision.from_data(decision.to_data()) == decision
    assert [d.outcome for d in decisions] == [
        "approved",
        "denied",
        "approved",
        "replaced",
        "edited",
    ]
    assert [d.runs for d in decisions] == [True, False, True, False, True]


@pytest.mark.parametrize(
    "data",
    [
        {"kind": "maybe"},
        {"kind": "replace"},
        {"kind": "yes", "text": "extra"},
        {"kind": "edit"},
        {"kind": "edit", "arguments": ["not", "an", "object"]},
        {"kind": "no", "arguments": {}},
        {"kind": "yes", "colour": "red"},
        {"kind": "replace", "text": 5},
    ],
)
def test_a_malformed_decision_is_refused(data: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        HumanDecision.from_data(data)
