"""Webhook signatures: heron's one HMAC scheme, for every sender and every receiver.

**heron's scheme** — what a receiver gets and checks:

- `X-Heron-Timestamp`: the Unix time of sending, in whole seconds;
- `X-Heron-Signature: sha256=<hex>`: HMAC-SHA256 with the shared secret over the bytes
  `<timestamp>.<body>`.

Signing the timestamp lets a receiver refuse replays: a timestamp further than the replay
window (`DEFAULT_REPLAY_WINDOW_S`, five minutes) from the receiver's clock is refused, so a
captured request cannot be sent again later; one sent again inside the window is for the
receiver's idempotency key to catch.

Senders (`call_webhook`, the `notify_user` webhook, alert webhooks) add `signed_headers`;
the webhook server's adapters check with `check`, and so can any other receiver.

**GitHub's scheme** (`X-Hub-Signature-256: sha256=<hex>` over the body alone) has no
timestamp; `check_github` verifies it, and replay protection is the delivery id.

Header names are matched case-insensitively, as HTTP defines them; digests are compared in
constant time (`hmac.compare_digest`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping

__all__ = [
    "DEFAULT_REPLAY_WINDOW_S",
    "GITHUB_SIGNATURE_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "check",
    "check_github",
    "same",
    "sign",
    "signed_headers",
]

SIGNATURE_HEADER = "X-Heron-Signature"
TIMESTAMP_HEADER = "X-Heron-Timestamp"
GITHUB_SIGNATURE_HEADER = "X-Hub-Signature-256"
DEFAULT_REPLAY_WINDOW_S = 300.0
"""How far a signed timestamp may be from the receiver's clock, either way, in seconds."""
_CANONICAL_TIMESTAMP = re.compile(r"0|[1-9][0-9]{0,11}")
"""Whole seconds in ASCII digits, no sign, no leading zero, no separator."""


def sign(secret: bytes, body: bytes, timestamp: int) -> str:
    """The `X-Heron-Signature` value for `body` sent at `timestamp`: `sha256=<hex>`."""
    return _hmac_sha256(secret, str(timestamp).encode("ascii") + b"." + body)


def signed_headers(secret: bytes, body: bytes, now: float) -> dict[str, str]:
    """The two headers that make `body`, sent at `now` (Unix time), verifiable by `check`."""
    timestamp = int(now)
    return {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret, body, timestamp),
    }


def check(
    secret: bytes,
    body: bytes,
    headers: Mapping[str, str],
    *,
    now: float,
    window_s: float = DEFAULT_REPLAY_WINDOW_S,
) -> str | None:
    """Why a request signed with heron's scheme is not authentic, or `None` when it is.

    `now` is the receiver's Unix time. The reasons are the webhook server's answers (HTTP
    401), so they name the headers in lower case, as the server receives them."""
    raw_timestamp = _header(headers, TIMESTAMP_HEADER)
    signature = _header(headers, SIGNATURE_HEADER)
    if not raw_timestamp or not signature:
        return f"missing {TIMESTAMP_HEADER.lower()} or {SIGNATURE_HEADER.lower()} header"
    # Only the one spelling `str(int)` gives: `+1700000000`, `01700000000` or `1_700_000_000`
    # sign the same bytes as `1700000000` but would key a replay as a new event.
    if not _CANONICAL_TIMESTAMP.fullmatch(raw_timestamp):
        return f"{TIMESTAMP_HEADER.lower()} is not a Unix time in seconds"
    timestamp = int(raw_timestamp)
    if abs(now - timestamp) > window_s:
        return f"timestamp outside the {window_s:g} s replay window"
    if not same(sign(secret, body, timestamp), signature):
        return "signature mismatch"
    return None


def check_github(secret: bytes, body: bytes, headers: Mapping[str, str]) -> str | None:
    """Why a GitHub delivery is not authentic, or `None` when it is."""
    signature = _header(headers, GITHUB_SIGNATURE_HEADER)
    if not signature:
        return f"missing {GITHUB_SIGNATURE_HEADER.lower()} header"
    if not same(_hmac_sha256(secret, body), signature):
        return "signature mismatch"
    return None


def _hmac_sha256(secret: bytes, message: bytes) -> str:
    return "sha256=" + hmac.new(secret, message, hashlib.sha256).hexdigest()


def same(expected: str, given: str) -> bool:
    """Whether `given` is the secret `expected`, in constant time; compared as bytes, since
    `compare_digest` refuses a str with non-ASCII characters (TypeError)."""
    return hmac.compare_digest(expected.encode(), given.encode())


def _header(headers: Mapping[str, str], name: str) -> str:
    """The value of the header `name` in `headers`, whatever the case of its keys."""
    wanted = name.lower()
    value = headers.get(wanted)
    if value is not None:
        return value
    return next((v for k, v in headers.items() if k.lower() == wanted), "")
