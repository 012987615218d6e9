"""Tool receipts: HMAC-SHA256 evidence that a tool call executed successfully.

A receipt binds the tool name, the exact arguments passed to `execute`, the raw output and the
time of signing under a key only the runtime holds. It proves that *this* call ran and produced
*this* output. It is not an approval decision, not an audit record and not a chain: receipts are
independent of each other and are issued only for successful executions.

Wire format: `heron-receipt-<key_id>-<epoch seconds>-<base64url digest, unpadded>`. The key id
lets `heron receipts verify` find the persisted key later; the secret never leaves this process
except into the key store's private files.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from heron._support.canonical import canonical_json
from heron._support.own_paths import claim_state_dir
from heron.errors import HeronError, StoreError

RECEIPT_PREFIX: Final = "heron-receipt"

_KEY_ID_RE: Final = re.compile(r"[0-9a-f]{8}")
_SECRET_BYTES: Final = 32
_DIGEST_CHARS: Final = 43  # unpadded base64 of a 32-byte SHA-256 digest

RECEIPT_RE: Final = re.compile(
    rf"{RECEIPT_PREFIX}-(?P<key_id>[0-9a-f]{{8}})"
    # Canonical decimal only (no leading zeros) and at most 20 digits (the u64 range): a receipt
    # has exactly one spelling, and int() never sees input long enough to raise.
    r"-(?P<timestamp>0|[1-9][0-9]{0,19})"
    rf"-(?P<digest>[A-Za-z0-9_-]{{{_DIGEST_CHARS}}})"
)
"""Matches one receipt token (use `fullmatch` to validate, `search` to find one in text).

Exported so redaction can recognise receipts and leave them intact instead of treating the
digest as a high-entropy secret.
"""

RECEIPT_PROMPT_NOTE: Final[str] = (
    "## Tool receipts\n"
    "When a tool call succeeds, heron appends a marker such as "
    "`[receipt: heron-receipt-…]` to its result. The receipt is an HMAC signature that heron "
    "computes over the tool name, the exact arguments, the raw output and the time, with a key "
    "only heron holds; it proves that the call really ran and returned that output. When you "
    "report or rely on a tool result, quote its receipt exactly as given. Never write a receipt "
    "yourself, alter one, or attach one to a result that did not carry it: a receipt that does "
    "not verify exposes the claim as fabricated. Failed, denied or skipped calls have no receipt."
)
"""heron's system-prompt addendum explaining receipt markers to the model."""


def receipt_marker(receipt: str) -> str:
    """The suffix appended to a (possibly truncated) model-visible tool result."""
    return f"\n\n[receipt: {receipt}]"


@dataclass(frozen=True, kw_only=True, slots=True)
class ReceiptKey:
    """One signing key: a short public id and a 32-byte secret."""

    key_id: str
    """Eight lowercase hex characters, embedded in every receipt signed with this key."""
    secret: bytes = field(repr=False)
    """The HMAC key. Kept out of `repr` so it cannot end up in logs by accident."""

    def __post_init__(self) -> None:
        if _KEY_ID_RE.fullmatch(self.key_id) is None:
            raise ValueError(f"receipt key id must be 8 lowercase hex characters: {self.key_id!r}")
        if len(self.secret) != _SECRET_BYTES:
            raise ValueError(f"receipt key secret must be {_SECRET_BYTES} bytes")

    @classmethod
    def generate(cls) -> ReceiptKey:
        """A fresh key from the operating system's CSPRNG."""
        return cls(key_id=secrets.token_hex(4), secret=secrets.token_bytes(_SECRET_BYTES))


def _message(tool: str, arguments_json: str, output: str, ts: int) -> bytes:
    return f"{tool}|{arguments_json}|{output}|{ts}".encode()


class _KeyedHmac:
    """HMAC-SHA256 (RFC 2104) under one key, its inner and outer hash states computed once: a
    receipt then costs two hash copies instead of OpenSSL's digest lookup and key set-up per
    call. `verify_receipt` checks with the one-shot `hmac.digest`, so both must agree."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, secret: bytes) -> None:
        block = secret.ljust(_SHA256_BLOCK, b"\0")  # receipt secrets are 32 bytes
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))

    def digest(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


_SHA256_BLOCK: Final = 64


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class ReceiptSigner:
    """Signs successful tool executions with one key."""

    def __init__(self, key: ReceiptKey, *, clock: Callable[[], float] = time.time) -> None:
        self._key = key
        self._hmac = _KeyedHmac(key.secret)
        self._clock = clock

    @property
    def key_id(self) -> str:
        """The id of the key this signer uses."""
        return self._key.key_id

    def sign(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        output: str,
        *,
        timestamp: int | None = None,
        arguments_json: str | None = None,
    ) -> str:
        """Return the receipt for `tool` run with `arguments` producing raw `output`.

        `arguments` are the ones actually passed to the tool (after hooks and runtime-injected
        values); `output` is the raw, unscrubbed output before truncation. `timestamp` defaults to
        the clock's current epoch second. `arguments_json` is `canonical_json(arguments)` when the
        caller has it already (the engine encodes each call's arguments once).
        """
        # A `|` in the name would let the name absorb part of the arguments and make two different
        # calls share one signed message.
        if "|" in tool:
            raise ValueError(f"tool name must not contain '|': {tool!r}")
        ts = int(self._clock()) if timestamp is None else timestamp
        if ts < 0:
            raise ValueError(f"receipt timestamp must not be negative: {ts}")
        encoded = canonical_json(arguments) if arguments_json is None else arguments_json
        digest = self._hmac.digest(_message(tool, encoded, output, ts))
        return f"{RECEIPT_PREFIX}-{self._key.key_id}-{ts}-{_b64url(digest)}"


def parse_receipt(receipt: str) -> tuple[str, int, bytes] | None:
    """Split a receipt into `(key_id, timestamp, digest)`, or return None if it is malformed."""
    match = RECEIPT_RE.fullmatch(receipt)
    if match is None:
        return None
    encoded = match["digest"]
    digest = base64.urlsafe_b64decode(encoded + "=")
    # 43 characters carry 258 bits for a 256-bit digest; reject spellings with non-zero spare
    # bits so every digest has exactly one textual form.
    if _b64url(digest) != encoded:
        return None
    return match["key_id"], int(match["timestamp"]), digest


def verify_receipt(
    receipt: str,
    *,
    key: ReceiptKey,
    tool: str,
    arguments: Mapping[str, Any],
    output: str,
) -> bool:
    """True when `receipt` was signed by `key` for exactly this tool, arguments and output.

    Never raises for bad input: malformed receipts, a different key id or a tool name that
    could not have been signed all verify as False.
    """
    parsed = parse_receipt(receipt)
    if parsed is None or "|" in tool:
        return False
    key_id, ts, digest = parsed
    if key_id != key.key_id:
        return False
    message = _message(tool, canonical_json(arguments), output, ts)
    return hmac.compare_digest(digest, hmac.digest(key.secret, message, "sha256"))


KeyKind = Literal["receipt", "decision", "message"]
"""What a key signs: tool receipts, decisions on requests to a human, message tokens."""

_FOLDERS: Final[dict[KeyKind, str]] = {
    "receipt": "receipt-keys",
    "decision": "decision-keys",
    "message": "message-keys",
}


class KeyIdTaken(HeronError, FileExistsError):
    """A different key already holds this id."""


class KeyStore(Protocol):
    """Where signing keys persist (receipts, decisions, message tokens): the state directory's
    files (`ReceiptKeyStore` and its kin) or a shared store every worker reads
    (`heron.turn.postgres_keys.PostgresKeyStore`), so what one process signed another verifies.
    """

    def save(self, key: ReceiptKey) -> None:
        """Store `key` (again: a no-op); `KeyIdTaken` when another key has its id."""
        ...

    def load(self, key_id: str) -> ReceiptKey | None:
        """The key with this id, or `None`; `ValueError` for a corrupt one."""
        ...

    def newest(self) -> ReceiptKey | None:
        """The most recently saved key, if any."""
        ...


def current_key(store: KeyStore) -> ReceiptKey:
    """The store's newest key, or a new one saved now: every process of a store signs with
    the same key, so keys do not pile up one per process."""
    return store.newest() or new_key(store)


def new_key(store: KeyStore) -> ReceiptKey:
    """A fresh key, saved in `store` before it is used."""
    key = ReceiptKey.generate()
    while True:
        try:
            store.save(key)
            return key
        except KeyIdTaken:
            # 32-bit ids can collide over many runs; draw again rather than lose an old key.
            key = ReceiptKey.generate()


class ReceiptKeyStore:
    """Persists receipt keys so receipts can be verified after the signing process has ended.

    Layout: `<state_dir>/receipt-keys/<key_id>.key`, one hex-encoded secret per file, files mode
    0600 and the directory 0700 (the other kinds of keys, `kind`, have their own folder:
    `decision-keys`, `message-keys`). Nothing here logs or prints a secret.
    """

    def __init__(self, state_dir: Path, *, kind: KeyKind = "receipt") -> None:
        self._dir = claim_state_dir(state_dir) / _FOLDERS[kind]

    def save(self, key: ReceiptKey) -> None:
        """Store `key`. Saving the same key twice is a no-op.

        Raises `KeyIdTaken` when a *different* key already holds this id, so an old key is
        never overwritten (its receipts would become unverifiable), and `StoreError` when the
        keys' folder cannot be made.
        """
        try:
            self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:  # a file in its place: a retry would meet it again
            raise StoreError(f"cannot keep keys in {self._dir}: {exc.strerror}") from None
        self._dir.chmod(0o700)
        path = self._dir / f"{key.key_id}.key"
        tmp = self._dir / f".{key.key_id}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            # Set the mode explicitly: os.open's mode is filtered through the process umask.
            os.fchmod(fd, 0o600)
            os.write(fd, key.secret.hex().encode("ascii") + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            # link() publishes the complete file atomically and refuses to replace an existing one.
            os.link(tmp, path)
        except FileExistsError:
            if self.load(key.key_id) != key:
                raise KeyIdTaken(f"a different receipt key already uses id {key.key_id}") from None
        finally:
            tmp.unlink()

    def load(self, key_id: str) -> ReceiptKey | None:
        """The stored key with this id, or None if the id is invalid or unknown.

        Raises ValueError when the key file exists but does not hold a valid secret.
        """
        # The id becomes a file name; accepting only the generated shape rules out path traversal.
        if _KEY_ID_RE.fullmatch(key_id) is None:
            return None
        path = self._dir / f"{key_id}.key"
        try:
            text = path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return None
        except UnicodeDecodeError:
            raise ValueError(f"receipt key file is corrupt: {path}") from None
        try:
            return ReceiptKey(key_id=key_id, secret=bytes.fromhex(text))
        except ValueError:
            raise ValueError(f"receipt key file is corrupt: {path}") from None

    def newest(self) -> ReceiptKey | None:
        try:
            paths = sorted(self._dir.glob("*.key"), key=lambda p: (p.stat().st_mtime, p.name))
        except FileNotFoundError:
            return None
        for path in reversed(paths):
            key = self.load(path.stem)
            if key is not None:
                return key
        return None


ReceiptScopeKind = Literal["run", "runtime"]


class ReceiptScope:
    """Decides how long a receipt key lives.

    `"run"`: a fresh key per run or turn (direct `heron run`, embedder turns); call `new_run()` at
    the start of each. `"runtime"`: one key for the whole life of a long-running process
    (`heron serve`, channels), shared by all its conversations. Nested sub-agent runs receive
    their parent's scope rather than a new one, so their receipts use the parent's key.

    Keys are created lazily and, when a store is given, saved before first use.
    """

    def __init__(
        self,
        kind: ReceiptScopeKind,
        *,
        store: KeyStore | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kind: ReceiptScopeKind = kind
        self._store = store
        self._clock = clock
        self._signer: ReceiptSigner | None = None

    def signer(self) -> ReceiptSigner:
        """The current signer, created on first use."""
        if self._signer is None:
            self._signer = self._fresh_signer()
        return self._signer

    def new_run(self) -> ReceiptSigner:
        """Start a run: `"run"` scopes rotate to a fresh key, `"runtime"` scopes keep theirs."""
        if self.kind == "runtime":
            return self.signer()
        self._signer = self._fresh_signer()
        return self._signer

    def _fresh_signer(self) -> ReceiptSigner:
        key = ReceiptKey.generate() if self._store is None else new_key(self._store)
        return ReceiptSigner(key, clock=self._clock)
