"""heron's webhook signature scheme: one signer and one checker for every sender and receiver."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

import pytest

from heron.safety.signing import (
    DEFAULT_REPLAY_WINDOW_S,
    check,
    check_github,
    sign,
    signed_headers,
)

SECRET = b"k"
BODY = b'{"a":1}'
STAMP = 1_700_000_000


def test_the_signature_is_an_hmac_sha256_over_the_timestamp_a_dot_and_the_body() -> None:
    expected = hmac.new(SECRET, f"{STAMP}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET, BODY, STAMP) == f"sha256={expected}"
    assert signed_headers(SECRET, BODY, STAMP + 0.9) == {
        "X-Heron-Timestamp": str(STAMP),
        "X-Heron-Signature": f"sha256={expected}",
    }


def test_a_genuine_signature_passes_and_a_tampered_stale_or_incomplete_one_is_refused() -> None:
    headers = {"X-Heron-Timestamp": str(STAMP), "X-Heron-Signature": sign(SECRET, BODY, STAMP)}
    assert check(SECRET, BODY, headers, now=STAMP + 100) is None
    assert check(SECRET, b'{"a":2}', headers, now=STAMP + 100) == "signature mismatch"
    assert check(b"other", BODY, headers, now=STAMP + 100) == "signature mismatch"
    assert check(SECRET, BODY, headers, now=STAMP + 301) is not None
    only_signature = {"X-Heron-Signature": headers["X-Heron-Signature"]}
    assert check(SECRET, BODY, only_signature, now=STAMP) is not None


@pytest.mark.parametrize("case", [str.lower, str.upper, str, str.swapcase])
def test_header_names_match_in_any_case(case: Callable[[str], str]) -> None:
    headers = {case(k): v for k, v in signed_headers(SECRET, BODY, STAMP).items()}
    assert check(SECRET, BODY, headers, now=STAMP) is None


def test_the_replay_window_is_five_minutes_either_way_unless_told_otherwise() -> None:
    headers = signed_headers(SECRET, BODY, STAMP)
    assert DEFAULT_REPLAY_WINDOW_S == 300
    for now in (STAMP - 300, STAMP + 300):
        assert check(SECRET, BODY, headers, now=now) is None
    for now in (STAMP - 301, STAMP + 301):
        refused = check(SECRET, BODY, headers, now=now)
        assert refused == "timestamp outside the 300 s replay window"
    assert check(SECRET, BODY, headers, now=STAMP + 301, window_s=600) is None


def test_the_reasons_name_what_is_wrong_with_the_request() -> None:
    signature = sign(SECRET, BODY, STAMP)
    missing = check(SECRET, BODY, {"x-heron-signature": signature}, now=STAMP)
    assert missing == "missing x-heron-timestamp or x-heron-signature header"
    not_a_time = {"x-heron-timestamp": "soon", "x-heron-signature": signature}
    assert check(SECRET, BODY, not_a_time, now=STAMP) == (
        "x-heron-timestamp is not a Unix time in seconds"
    )
    # Only the spelling `str(int)` gives: any other would make one request look like many.
    for spelled in (
        f"+{STAMP}",
        f"0{STAMP}",
        f" {STAMP}",
        "1_700_000_000",
        "-1",
        "9" * 13,
        "١٧٠٠٠٠٠٠٠٠",
    ):
        other = {"x-heron-timestamp": spelled, "x-heron-signature": signature}
        assert check(SECRET, BODY, other, now=STAMP) == (
            "x-heron-timestamp is not a Unix time in seconds"
        ), spelled


def test_a_non_ascii_signature_is_a_mismatch_not_a_crash() -> None:
    headers = {"x-heron-timestamp": str(STAMP), "x-heron-signature": "sha256=é"}
    assert check(SECRET, BODY, headers, now=STAMP) == "signature mismatch"


def test_a_github_delivery_is_checked_over_the_body_alone() -> None:
    digest = hmac.new(SECRET, BODY, hashlib.sha256).hexdigest()
    assert check_github(SECRET, BODY, {"X-Hub-Signature-256": f"sha256={digest}"}) is None
    assert check_github(SECRET, BODY, {"x-hub-signature-256": f"sha256={digest}"}) is None
    assert check_github(b"other", BODY, {"x-hub-signature-256": f"sha256={digest}"}) == (
        "signature mismatch"
    )
    assert check_github(SECRET, BODY, {}) == "missing x-hub-signature-256 header"
