from __future__ import annotations

from typing import Any

import pytest

from heron.turn.loop_detector import LoopDetector, LoopVerdict, args_fingerprint


def _repeat(
    detector: LoopDetector, times: int, tool: str = "file_read", output: str = "same"
) -> list[LoopVerdict | None]:
    return [detector.record(tool, {"path": "/a.txt"}, output, success=True) for _ in range(times)]


def _alternate(detector: LoopDetector, calls: int) -> list[LoopVerdict | None]:
    # The same two calls alternate; outputs differ, so only the alternation can match.
    return [
        detector.record(
            "file_read" if i % 2 == 0 else "file_write",
            {"path": "a.txt"} if i % 2 == 0 else {"path": "a.txt", "text": "x"},
            f"out {i}",
            success=True,
        )
        for i in range(calls)
    ]


def test_alternating_tools_on_different_arguments_is_normal_work_not_ping_pong() -> None:
    detector = LoopDetector()
    verdicts = [
        detector.record(
            "file_read" if i % 2 == 0 else "file_write",
            {"path": f"f{i // 2}"},
            f"out {i}",
            success=True,
        )
        for i in range(16)
    ]
    assert verdicts == [None] * 16


def _no_progress(detector: LoopDetector, calls: int) -> list[LoopVerdict | None]:
    return [
        detector.record("search", {"query": f"q{i}"}, "No results.", success=True)
        for i in range(calls)
    ]


# --- args_fingerprint --------------------------------------------------------------------------


def test_fingerprint_ignores_mapping_key_order_at_every_depth() -> None:
    a = {"path": "/x", "opts": {"depth": 2, "follow": True}, "tags": ["a", "b"]}
    b = {"tags": ["a", "b"], "opts": {"follow": True, "depth": 2}, "path": "/x"}
    assert args_fingerprint(a) == args_fingerprint(b)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("123", 123),
        (0, 0.0),
        (True, 1),
        (False, 0),
        (None, "None"),
        (None, False),
        (1.0, "1.0"),
        (0.0, -0.0),
        (["a", "b"], ["b", "a"]),
        ({"n": "123"}, {"n": 123}),
        ({"a": [1, 2]}, {"a": {"1": 2}}),
        (["ab", "c"], ["a", "bc"]),
        ({"a": "b", "c": "d"}, {"a": "bc", "": "d"}),
        ([], {}),
        ("", []),
    ],
)
def test_fingerprint_distinguishes_types_and_structure(left: Any, right: Any) -> None:
    assert args_fingerprint(left) != args_fingerprint(right)


def test_fingerprint_is_a_stable_hex_digest() -> None:
    value = {"path": "/a", "limit": 10}
    first = args_fingerprint(value)
    assert first == args_fingerprint({"limit": 10, "path": "/a"})
    assert len(first) == 32
    int(first, 16)


def test_fingerprint_accepts_lone_surrogates_and_non_json_values() -> None:
    assert args_fingerprint({"s": "\ud800"}) != args_fingerprint({"s": "\ud801"})
    assert args_fingerprint({"b": b"x"}) != args_fingerprint({"b": "x"})


def test_fingerprint_treats_lists_and_tuples_alike() -> None:
    assert args_fingerprint({"xs": [1, 2]}) == args_fingerprint({"xs": (1, 2)})


# --- exact repeat ------------------------------------------------------------------------------


def test_exact_repeat_warns_at_max_repeats() -> None:
    verdicts = _repeat(LoopDetector(), 3)
    assert verdicts[:2] == [None, None]
    last = verdicts[2]
    assert last is not None
    assert (last.level, last.kind, last.count) == ("warn", "exact_repeat", 3)
    assert last.tool == "file_read"
    assert "3 times" in last.message
    assert "file_read" in last.message


def test_exact_repeat_blocks_one_past_max_repeats() -> None:
    last = _repeat(LoopDetector(), 4)[-1]
    assert last is not None
    assert (last.level, last.kind, last.count) == ("block", "exact_repeat", 4)


def test_exact_repeat_breaks_two_past_max_repeats() -> None:
    last = _repeat(LoopDetector(), 5)[-1]
    assert last is not None
    assert (last.level, last.kind, last.count) == ("break", "exact_repeat", 5)


def test_exact_repeat_thresholds_follow_max_repeats() -> None:
    verdicts = _repeat(LoopDetector(max_repeats=2), 4)
    levels = [v.level if v else None for v in verdicts]
    assert levels == [None, "warn", "block", "break"]


def test_exact_repeat_counts_only_the_consecutive_tail() -> None:
    detector = LoopDetector()
    _repeat(detector, 2)
    detector.record("file_read", {"path": "/other.txt"}, "other", success=True)
    assert _repeat(detector, 2) == [None, None]


def test_exact_repeat_ignores_argument_key_order() -> None:
    detector = LoopDetector()
    detector.record("grep", {"pattern": "x", "path": "/"}, "r", success=True)
    detector.record("grep", {"path": "/", "pattern": "x"}, "r", success=True)
    verdict = detector.record("grep", {"pattern": "x", "path": "/"}, "r", success=True)
    assert verdict is not None
    assert verdict.kind == "exact_repeat"


def test_string_and_number_arguments_are_not_the_same_call() -> None:
    detector = LoopDetector()
    detector.record("get", {"id": 123}, "r", success=True)
    detector.record("get", {"id": "123"}, "r", success=True)
    assert detector.record("get", {"id": 123}, "r", success=True) is None


# --- ping-pong ---------------------------------------------------------------------------------


def test_ping_pong_warns_after_four_cycles() -> None:
    verdicts = _alternate(LoopDetector(), 8)
    assert verdicts[:7] == [None] * 7
    last = verdicts[7]
    assert last is not None
    assert (last.level, last.kind, last.tool, last.count) == ("warn", "ping_pong", "file_write", 4)
    assert "4 cycles" in last.message
    assert "file_read" in last.message


def test_ping_pong_blocks_at_five_cycles_and_breaks_at_six() -> None:
    verdicts = _alternate(LoopDetector(), 12)
    observed = [(v.level, v.count) if v else None for v in verdicts[7:]]
    assert observed == [
        ("warn", 4),
        ("warn", 4),
        ("block", 5),
        ("block", 5),
        ("break", 6),
    ]
    assert all(v is None or v.kind == "ping_pong" for v in verdicts)


def test_ping_pong_needs_an_unbroken_alternation() -> None:
    detector = LoopDetector()
    _alternate(detector, 6)
    detector.record("shell", {"cmd": "ls"}, "x", success=True)
    assert _alternate(detector, 7) == [None] * 7


def test_ping_pong_is_bounded_by_the_window() -> None:
    verdicts = _alternate(LoopDetector(window=9), 14)
    assert {(v.level, v.count) for v in verdicts if v} == {("warn", 4)}


# --- no progress -------------------------------------------------------------------------------


def test_no_progress_warns_at_five_different_calls_with_the_same_result() -> None:
    verdicts = _no_progress(LoopDetector(), 5)
    assert verdicts[:4] == [None] * 4
    last = verdicts[4]
    assert last is not None
    assert (last.level, last.kind, last.tool, last.count) == ("warn", "no_progress", "search", 5)
    assert "5 times" in last.message


def test_no_progress_blocks_at_six_and_breaks_at_seven() -> None:
    verdicts = _no_progress(LoopDetector(), 7)
    assert [(v.level, v.count) if v else None for v in verdicts[4:]] == [
        ("warn", 5),
        ("block", 6),
        ("break", 7),
    ]


def test_no_progress_is_found_when_interleaved_with_other_calls() -> None:
    detector = LoopDetector()
    verdicts: list[LoopVerdict | None] = []
    for i in range(5):
        verdicts.append(detector.record("search", {"query": f"q{i}"}, "No results.", success=True))
        detector.record("file_read", {"path": f"/f{i}"}, f"body {i}", success=True)
        detector.record("shell", {"cmd": f"echo {i}"}, f"{i}", success=True)
    assert verdicts[:4] == [None] * 4
    last = verdicts[4]
    assert last is not None
    assert (last.level, last.kind, last.count) == ("warn", "no_progress", 5)


def test_no_progress_needs_the_same_result() -> None:
    detector = LoopDetector()
    verdicts = [
        detector.record("search", {"query": f"q{i}"}, f"hit {i}", success=True) for i in range(8)
    ]
    assert verdicts == [None] * 8


def test_no_progress_counts_only_calls_inside_the_window() -> None:
    detector = LoopDetector(window=6)
    verdicts: list[LoopVerdict | None] = []
    for i in range(6):
        verdicts.append(detector.record("search", {"query": f"q{i}"}, "none", success=True))
        detector.record("file_read", {"path": f"/f{i}"}, f"body {i}", success=True)
    assert verdicts == [None] * 6


def test_no_progress_is_counted_again_after_the_window_turned_over() -> None:
    detector = LoopDetector(window=6)
    for i in range(3):
        detector.record("search", {"query": f"old{i}"}, "none", success=True)
    for i in range(6):  # pushes every earlier call out of the window
        detector.record("file_read", {"path": f"/f{i}"}, f"body {i}", success=True)
    verdicts = [
        detector.record("search", {"query": f"q{i}"}, "none", success=True) for i in range(5)
    ]
    assert verdicts[:4] == [None] * 4
    assert verdicts[4] is not None
    assert (verdicts[4].kind, verdicts[4].count) == ("no_progress", 5)
    detector.reset()
    assert detector.record("search", {"query": "q9"}, "none", success=True) is None


# --- precedence, failures, ignored tools, reset --------------------------------------------------


def test_exact_repeat_wins_over_no_progress() -> None:
    detector = LoopDetector()
    _no_progress(detector, 3)
    verdicts = [
        detector.record("search", {"query": "q0"}, "No results.", success=True) for _ in range(3)
    ]
    # Calls 4 and 5 share the result with earlier different-arg calls, but the third identical
    # call in a row is reported as what it most plainly is.
    assert verdicts[0] is None
    assert verdicts[1] is not None
    assert verdicts[1].kind == "no_progress"
    assert verdicts[2] is not None
    assert (verdicts[2].kind, verdicts[2].count) == ("exact_repeat", 3)


def test_failed_calls_are_not_recorded() -> None:
    detector = LoopDetector()
    verdicts = [
        detector.record("file_read", {"path": "/missing"}, "Error: not found", success=False)
        for _ in range(8)
    ]
    assert verdicts == [None] * 8
    # The failures left nothing behind: two successes are still below the repeat threshold.
    assert _repeat(detector, 2) == [None, None]


def test_failed_reads_with_different_args_and_same_error_do_not_trip_no_progress() -> None:
    detector = LoopDetector()
    verdicts = [
        detector.record("file_read", {"path": f"/m{i}"}, "Error: not found", success=False)
        for i in range(8)
    ]
    assert verdicts == [None] * 8


def test_ignored_tools_are_never_recorded() -> None:
    detector = LoopDetector(ignore_tools={"wait"})
    assert _repeat(detector, 6, tool="wait") == [None] * 6
    assert _alternate(detector, 2) == [None, None]


def test_ignored_tools_do_not_break_another_tools_streak() -> None:
    detector = LoopDetector(ignore_tools=["wait"])
    _repeat(detector, 2)
    detector.record("wait", {"seconds": 1}, "ok", success=True)
    verdict = _repeat(detector, 1)[0]
    assert verdict is not None
    assert (verdict.kind, verdict.count) == ("exact_repeat", 3)


def test_reset_forgets_every_call() -> None:
    detector = LoopDetector()
    _repeat(detector, 2)
    detector.reset()
    assert _repeat(detector, 2) == [None, None]


@pytest.mark.parametrize("kwargs", [{"window": 0}, {"max_repeats": 0}])
def test_invalid_configuration_is_rejected(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        LoopDetector(**kwargs)


def test_messages_ask_the_model_to_change_approach_and_differ_by_level() -> None:
    verdicts = [v for v in _repeat(LoopDetector(), 5) if v]
    messages = [v.message for v in verdicts]
    assert len(set(messages)) == 3
    warn, block, brk = messages
    assert "change your approach" in warn
    assert "Stop repeating" in block
    assert "ended" in brk
