"""Signed decisions: HMAC-SHA256 evidence of who decided what about which exact call, when.

A signature binds the request id, the exact arguments of the call (canonical JSON), the
decision (or a question's answer), the approver's identity and the time of the answer, under
a key only heron holds. It is not a tool receipt (`heron.turn.receipts`: evidence that a tool
*ran*): it has its own prefix and its own keys, in `<state_dir>/decision-keys/` (the receipt
key store's format and file modes), so one can never pass for the other.

Wire format: `heron-decision-<key_id>-<epoch milliseconds>-<base64url digest, unpadded>`.
`heron approvals verify ID` recomputes it from the stored request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from heron._support.canonical import canonical_json
from heron.humans.store import HumanRequest
from heron.turn.receipts import KeyStore, ReceiptKey, ReceiptKeyStore, current_key

__all__ = [
    "DECISION_PREFIX",
    "DecisionKeyStore",
    "DecisionSigner",
    "Verification",
    "decision_payload",
    "verify_decision",
]

DECISION_PREFIX: Final = "heron-decision"
_DOMAIN: Final = b"heron-decision/v1\n"
DECISION_RE: Final = re.compile(
    rf"{DECISION_PREFIX}-(?P<key_id>[0-9a-f]{{8}})-(?P<ms>0|[1-9][0-9]{{0,19}})"
    r"-(?P<digest>[A-Za-z0-9_-]{43})"
)


class DecisionKeyStore(ReceiptKeyStore):
    """Decision keys: the receipt key store's format, in `<state_dir>/decision-keys/`."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(state_dir, kind="decision")


def decision_payload(request: HumanRequest) -> Mapping[str, Any] | None:
    """What was decided, as signed: the decision of an approval, the answer of a question;
    `None` while nothing is."""
    if request.decision is not None:
        return request.decision.to_data()
    if request.kind == "question" and request.outcome == "answered":
        return {"answer": request.answer}
    return None


def _message(
    request_id: str,
    arguments: Mapping[str, Any],
    decision: Mapping[str, Any],
    approver: str,
    epoch_ms: int,
) -> bytes:
    body = {
        "request": request_id,
        "arguments": dict(arguments),
        "decision": dict(decision),
        "approver": approver,
        "at_ms": epoch_ms,
    }
    return _DOMAIN + canonical_json(body).encode("utf-8")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class DecisionSigner:
    """Signs decisions with the key store's newest decision key, created (and saved) on first
    use when there is none (`DecisionKeyStore`, or a shared store's `decision` keys)."""

    def __init__(self, keys: KeyStore) -> None:
        self._keys = keys
        self._key: ReceiptKey | None = None

    def _current(self) -> ReceiptKey:
        if self._key is None:
            self._key = current_key(self._keys)
        return self._key

    def sign(
        self,
        *,
        request_id: str,
        arguments: Mapping[str, Any],
        decision: Mapping[str, Any],
        approver: str,
        epoch_ms: int,
    ) -> str:
        """The signature of this decision; `answered_at` must be stored as `epoch_ms / 1000`."""
        if epoch_ms < 0:
            raise ValueError("a decision's time must not be negative")
        key = self._current()
        digest = hmac.new(
            key.secret, _message(request_id, arguments, decision, approver, epoch_ms), "sha256"
        ).digest()
        return f"{DECISION_PREFIX}-{key.key_id}-{epoch_ms}-{_b64url(digest)}"


@dataclass(frozen=True, slots=True)
class Verification:
    valid: bool
    detail: str


def verify_decision(request: HumanRequest, keys: KeyStore) -> Verification:
    """Check the stored request's signature against its exact arguments, decision, approver
    and time. Never raises for a bad signature; says why it does not verify."""
    payload = decision_payload(request)
    if request.signature is None:
        if request.active:
            return Verification(False, f"not decided yet ({request.status})")
        return Verification(
            False, f"not signed: no person decided ({request.status}, {request.outcome})"
        )
    match = DECISION_RE.fullmatch(request.signature)
    if match is None or payload is None or request.answered_by is None:
        return Verification(False, "the stored signature is malformed")
    try:
        key = keys.load(match["key_id"])
    except ValueError as exc:
        return Verification(False, str(exc))
    if key is None:
        return Verification(False, f"no decision key {match['key_id']} in this state directory")
    epoch_ms = int(match["ms"])
    if request.answered_at is None or round(request.answered_at * 1000) != epoch_ms:
        return Verification(False, "the signed time is not the recorded time of the answer")
    expected = hmac.new(
        key.secret,
        _message(request.id, request.arguments, payload, request.answered_by, epoch_ms),
        hashlib.sha256,
    ).digest()
    if not hmac.compare_digest(_b64url(expected), match["digest"]):
        return Verification(
            False, "the signature does not match this request, arguments, decision and approver"
        )
    return Verification(True, f"signed by key {key.key_id}")
