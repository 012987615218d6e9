"""Idempotency keys and the preflight → confirm protocol for tools that change the world.

Two separate guarantees:

- **Idempotency keys** (`IdempotencyStore.run_once`): a tool that accepts an `idempotency_key`
  records the first result under `(tool, key)`; a retry with the same key and the same arguments
  returns that result and does nothing again. The same key with different arguments is refused.
  A call that is still running, or that stopped without recording a result (a crash, a
  cancellation), answers "outcome unknown" rather than acting a second time.
- **Preflight → confirm** (`PreflightConfirm`) for irreversible tools: the first call (without a
  token) validates the arguments and returns exactly what would happen plus a confirmation token.
  The token is an HMAC over the tool name, a fresh action id, its expiry (default ten minutes)
  and the canonical JSON of the arguments, so any change of arguments invalidates it; it is
  accepted once. A confirmed execution that fails in an unknown way or times out is never
  retried in place: the result says the outcome is unknown and how to go on.

Both keep their durable state in an `IdempotencyLedger` (first results and used tokens;
`heron.safety.sqlite_idempotency.SqliteIdempotencyLedger` in the shared state database). The
HMAC secret is random per `Confirmations` object unless given, so tokens do not outlive the
process that issued them — an agent restarted between preflight and confirm simply runs a new
preflight.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic_core import to_jsonable_python

from heron._support.canonical import canonical_json
from heron._support.timefmt import utc_rfc3339
from heron.errors import HeronError
from heron.safety.secrets import known_secrets
from heron.tools.definition import ToolResult

__all__ = [
    "OUTCOME_UNKNOWN",
    "Confirmation",
    "ConfirmationError",
    "Confirmations",
    "IdempotencyLedger",
    "IdempotencyStore",
    "InvalidAction",
    "KeyRecord",
    "NotPerformed",
    "Plan",
    "PreflightConfirm",
]

OUTCOME_UNKNOWN = (
    "outcome unknown: {detail}. The action may or may not have taken effect. Check before "
    "retrying{check}; it is not retried automatically — if it must still be done, start again "
    "with a new preflight (and a new idempotency_key)."
)
_TOKEN_RE = re.compile(r"cfm-(?P<nonce>[0-9a-f]{16})-(?P<expires>[0-9]{1,12})-(?P<mac>[\w-]{43})")


class NotPerformed(HeronError):
    """Raised by an action that certainly had no effect (refused before anything was done).

    `run_once` releases the key, so the same key may be used again."""


class InvalidAction(HeronError, ValueError):
    """Arguments a two-phase tool refuses; raised by a `Plan` factory."""


class ConfirmationError(NotPerformed):
    """A confirmation token that is malformed, forged, for other arguments, expired or used."""

    def __init__(self, reason: Literal["invalid", "mismatch", "expired", "used"], message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, kw_only=True, slots=True)
class KeyRecord:
    """What the ledger holds for one `(tool, key)`."""

    arguments_sha256: str
    """The digest of the canonical arguments of the call that claimed the key."""
    state: Literal["running", "done"]
    result: str | None
    """The recorded result as JSON (`done` only)."""
    created: float
    """When the key was claimed, seconds since the epoch."""


class IdempotencyLedger(Protocol):
    """The durable half of idempotency: claimed keys with their first results, and used
    confirmation tokens. Synchronous, like the rest of a tool's bookkeeping between awaits; a
    back-end failure raises `heron.errors.StoreError`."""

    def claim(
        self, tool: str, key: str, arguments_sha256: str, *, now: float, expires: float
    ) -> KeyRecord | None:
        """Atomically: the live record of `(tool, key)` (one that expires after `now`) if
        there is one, else claim the key as `running` until `expires` and return `None`.
        An expired record is replaced."""
        ...

    def get(self, tool: str, key: str, *, now: float) -> KeyRecord | None:
        """The live record of `(tool, key)`, without claiming anything."""
        ...

    def complete(self, tool: str, key: str, result: str) -> None:
        """Record the key's result (JSON text); its state becomes `done`."""
        ...

    def release(self, tool: str, key: str) -> None:
        """Forget the key (the action certainly had no effect), so it may be used again."""
        ...

    def use_token(self, nonce: str, tool: str, expires: float) -> bool:
        """Mark a confirmation token used, atomically; `False` when it already was."""
        ...

    def purge_expired(self, now: float) -> int:
        """Forget keys and used tokens expired at `now`; returns how many went."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class _Claim:
    state: Literal["new", "running", "done", "conflict"]
    result: ToolResult | None = None
    created: float = 0.0


class IdempotencyStore:
    """First results of keyed calls and used confirmation tokens, kept in `ledger`."""

    def __init__(
        self,
        ledger: IdempotencyLedger,
        *,
        ttl_s: float = 7 * 24 * 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ledger = ledger
        self.ttl_s = ttl_s
        self.clock = clock

    async def run_once(
        self,
        tool: str,
        key: str,
        arguments: Mapping[str, Any],
        action: Callable[[], Awaitable[ToolResult]],
    ) -> ToolResult:
        """Run `action` unless `(tool, key)` already has a result, and record what it returns.

        `NotPerformed` from the action releases the key and becomes a failed result; any other
        exception or a cancellation records an "outcome unknown" result and propagates.
        """
        claim = self._claim(tool, key, arguments)
        if claim.state != "new":
            return _answer_existing(tool, key, claim)
        try:
            result = await action()
        except NotPerformed as exc:
            self.ledger.release(tool, key)
            return ToolResult.fail(str(exc), data={"error": "not_performed"})
        except BaseException as exc:
            detail = f"{type(exc).__name__} while running {tool}"
            self._complete(tool, key, _unknown(detail))
            raise
        self._complete(tool, key, result)
        return result

    def lookup(self, tool: str, key: str, arguments: Mapping[str, Any]) -> ToolResult | None:
        """The answer a keyed retry would get (stored result, unknown, conflict), or None when
        the key is free. Does not claim the key."""
        record = self.ledger.get(tool, key, now=self.clock())
        if record is None:
            return None
        return _answer_existing(tool, key, _claim_of(record, _digest(arguments)))

    def use_token(self, nonce: str, tool: str, expires: float) -> bool:
        """Mark a confirmation token used; False when it already was."""
        return self.ledger.use_token(nonce, tool, expires)

    def purge_expired(self) -> int:
        """Forget expired keys and used tokens past their expiry; returns how many rows went."""
        return self.ledger.purge_expired(self.clock())

    def _claim(self, tool: str, key: str, arguments: Mapping[str, Any]) -> _Claim:
        digest, now = _digest(arguments), self.clock()
        record = self.ledger.claim(tool, key, digest, now=now, expires=now + self.ttl_s)
        return _Claim(state="new") if record is None else _claim_of(record, digest)

    def _complete(self, tool: str, key: str, result: ToolResult) -> None:
        stored = {"success": result.success, "output": result.output, "error": result.error}
        stored["data"] = to_jsonable_python(result.data, fallback=repr)
        # A replayed result is a tool's output as the model would see it: no known secret in it.
        self.ledger.complete(
            tool, key, json.dumps(known_secrets().mask_value(stored), ensure_ascii=False)
        )


def _digest(arguments: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(dict(arguments)).encode("utf-8")).hexdigest()


def _claim_of(record: KeyRecord, digest: str) -> _Claim:
    created = record.created
    if record.arguments_sha256 != digest:
        return _Claim(state="conflict", created=created)
    if record.state == "running" or record.result is None:
        return _Claim(state="running", created=created)
    return _Claim(state="done", result=ToolResult(**json.loads(record.result)), created=created)


def _answer_existing(tool: str, key: str, claim: _Claim) -> ToolResult:
    when = _iso(claim.created)
    if claim.state == "conflict":
        message = (
            f"idempotency_key {key!r} was already used at {when} for a {tool} call with "
            "different arguments; a key names one action — use a new key for a different one"
        )
        return ToolResult.fail(message, data={"error": "idempotency_conflict"})
    if claim.result is None:
        detail = (
            f"a {tool} call with idempotency_key {key!r} started at {when} and has no recorded "
            "result (still running, or it stopped part-way)"
        )
        return _unknown(detail)
    first = claim.result
    note = (
        f"[idempotent replay: this is the recorded result of the first {tool} call with "
        f"idempotency_key {key!r} at {when}; nothing was done again]"
    )
    data = first.data if isinstance(first.data, dict) else {"first": first.data}
    output = "\n".join(filter(None, [note, first.output]))
    return ToolResult(
        success=first.success, output=output, error=first.error, data={**data, "replayed": True}
    )


def _unknown(detail: str, check: str = "") -> ToolResult:
    text = OUTCOME_UNKNOWN.format(detail=detail, check=f" ({check})" if check else "")
    return ToolResult.fail(text, data={"error": "outcome_unknown"})


def _iso(epoch: float) -> str:
    return utc_rfc3339(epoch)


@dataclass(frozen=True, kw_only=True, slots=True)
class Confirmation:
    token: str
    action_id: str
    """16 hex digits naming this one action (a mail tool uses it in the Message-ID)."""
    expires: float


class Confirmations:
    """Issues and redeems confirmation tokens bound to a tool and its exact arguments."""

    def __init__(
        self,
        store: IdempotencyStore,
        *,
        ttl_s: float = 600.0,
        secret: bytes | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        self._clock = clock or store.clock

    def issue(self, tool: str, arguments: Mapping[str, Any]) -> Confirmation:
        nonce = secrets.token_hex(8)
        expires = int(self._clock() + self.ttl_s)
        mac = self._mac(tool, nonce, expires, arguments)
        return Confirmation(token=f"cfm-{nonce}-{expires}-{mac}", action_id=nonce, expires=expires)

    def redeem(self, tool: str, arguments: Mapping[str, Any], token: str) -> str:
        """Check and use up a token; returns its action id or raises `ConfirmationError`."""
        parsed = _TOKEN_RE.fullmatch(token)
        if parsed is None:
            raise ConfirmationError(
                "invalid",
                "confirmation_token is malformed; pass the token from the preflight result "
                "exactly, or run a new preflight (call without a token)",
            )
        nonce, expires = parsed["nonce"], int(parsed["expires"])
        expected = self._mac(tool, nonce, expires, arguments)
        if not hmac.compare_digest(expected, parsed["mac"]):
            raise ConfirmationError(
                "mismatch",
                "confirmation_token does not match these exact arguments (any change needs a new "
                "preflight), or it was not issued by this agent; call again without a token to "
                "run a new preflight",
            )
        if self._clock() >= expires:
            raise ConfirmationError(
                "expired",
                f"confirmation_token expired at {_iso(expires)}; nothing was done — start again "
                "with a new preflight",
            )
        if not self.store.use_token(nonce, tool, expires):
            raise ConfirmationError(
                "used",
                "confirmation_token was already used (a token confirms one execution); nothing "
                "was done now — start again with a new preflight if another execution is meant",
            )
        return nonce

    def _mac(self, tool: str, nonce: str, expires: int, arguments: Mapping[str, Any]) -> str:
        message = "\0".join([tool, nonce, str(expires), canonical_json(dict(arguments))])
        digest = hmac.new(self._secret, message.encode("utf-8"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """What a two-phase action would do, built and validated from its arguments."""

    summary: str
    """Exactly what would happen, shown to the model at preflight."""
    execute: Callable[[], Awaitable[ToolResult]]
    """Does it. Raise `NotPerformed` only when certainly nothing took effect."""
    data: Mapping[str, Any] = field(default_factory=dict)
    if_unknown: str = ""
    """How to check whether it happened, named in an "outcome unknown" result."""


class PreflightConfirm:
    """Makes one irreversible tool two-phase: preflight returns a plan and a token, confirm runs
    the plan exactly once (see module docs)."""

    def __init__(self, tool: str, confirmations: Confirmations, *, timeout_s: float = 120.0):
        self.tool = tool
        self.confirmations = confirmations
        self.timeout_s = timeout_s

    async def run(
        self,
        arguments: Mapping[str, Any],
        *,
        confirmation_token: str | None,
        idempotency_key: str | None,
        plan: Callable[[str], Plan],
    ) -> ToolResult:
        """`arguments` are the action's own (without token and key); `plan(action_id)` builds
        the plan or raises `InvalidAction`."""
        store = self.confirmations.store
        if confirmation_token is None:
            if idempotency_key is not None:
                earlier = store.lookup(self.tool, idempotency_key, arguments)
                if earlier is not None:
                    return earlier
            return self._preflight(arguments, plan)
        confirm = self._confirm(arguments, confirmation_token, plan)
        if idempotency_key is None:
            try:
                return await confirm()
            except NotPerformed as exc:
                return ToolResult.fail(str(exc), data={"error": "not_performed"})
        return await store.run_once(self.tool, idempotency_key, arguments, confirm)

    def _preflight(self, arguments: Mapping[str, Any], plan: Callable[[str], Plan]) -> ToolResult:
        confirmation = self.confirmations.issue(self.tool, arguments)
        try:
            planned = plan(confirmation.action_id)
        except InvalidAction as exc:
            return ToolResult.fail(str(exc), data={"error": "invalid_arguments"})
        token = confirmation.token
        text = (
            f"PREFLIGHT — nothing has been done yet.\n{planned.summary}\n\n"
            f"To do exactly this, call {self.tool} again with the same arguments plus "
            f'confirmation_token="{token}" (single use, valid until '
            f"{_iso(confirmation.expires)}). Any change to the arguments needs a new preflight."
        )
        data = {"phase": "preflight", "confirmation_token": token, **planned.data}
        return ToolResult.ok(text, data=data | {"expires_at": _iso(confirmation.expires)})

    def _confirm(
        self, arguments: Mapping[str, Any], token: str, plan: Callable[[str], Plan]
    ) -> Callable[[], Awaitable[ToolResult]]:
        async def confirm() -> ToolResult:
            action_id = self.confirmations.redeem(self.tool, arguments, token)
            try:
                planned = plan(action_id)
            except InvalidAction as exc:
                raise NotPerformed(f"{exc}; nothing was done") from None
            try:
                return await asyncio.wait_for(planned.execute(), self.timeout_s)
            except NotPerformed as exc:
                raise NotPerformed(
                    f"not done: {exc}. Nothing took effect, but the confirmation token is used "
                    "up — start again with a new preflight"
                ) from None
            except TimeoutError:
                detail = f"no answer within {self.timeout_s:g} s"
            except Exception as exc:
                detail = f"{type(exc).__name__}: {exc}"
            return _unknown(detail, planned.if_unknown)

        return confirm
