"""Sealed answers: a question whose answer only the asking process can read.

Some answers are secrets in transit — the address an OAuth login redirected to carries an
authorization code — and every channel that answers a request (`heron approvals answer`, the
web console, a callback route) writes the answer into the shared store. A sealed question names
a public key in its schema (`"x-heron-sealed-to"`, an X25519 key); the desk seals the answer to
it before anything is stored, so the store, its exports and any ending report hold only
ciphertext, and the private key never leaves the memory of the process that asked.

Format: `heron-sealed-v1.<base64url(ephemeral public key | nonce | AES-256-GCM ciphertext)>`,
the key derived with HKDF-SHA256 from the X25519 shared secret, the request id as associated
data (a sealed answer copied to another request does not open).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from typing import Any, Final

from heron.errors import HeronError

__all__ = ["SEALED_TO", "SealingError", "SealingKey", "seal", "sealed_schema", "sealing_key_of"]

SEALED_TO: Final = "x-heron-sealed-to"
"""The schema keyword that names the public key an answer is sealed to."""

_PREFIX: Final = "heron-sealed-v1."
_INFO: Final = b"heron/humans/sealed-answer/v1"
_NONCE: Final = 12
_KEY: Final = 32


class SealingError(HeronError):
    """A sealed answer that does not open (another key, another request, altered)."""


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _aead(shared: bytes, ephemeral: bytes, recipient: bytes) -> Any:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    key = HKDF(algorithm=SHA256(), length=_KEY, salt=ephemeral + recipient, info=_INFO).derive(
        shared
    )
    return AESGCM(key)


class SealingKey:
    """A one-request X25519 key pair: `public` goes into the question's schema, `open`
    reads the answer."""

    def __init__(self) -> None:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        self._private = X25519PrivateKey.generate()
        self._public = self._private.public_key().public_bytes_raw()

    @property
    def public(self) -> str:
        return _b64(self._public)

    def open(self, sealed: Any, *, request_id: str) -> str:
        """The plain answer. Raises `SealingError`."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

        if not isinstance(sealed, str) or not sealed.startswith(_PREFIX):
            raise SealingError("the answer is not sealed")
        try:
            raw = _unb64(sealed.removeprefix(_PREFIX))
            ephemeral, nonce, body = raw[:_KEY], raw[_KEY : _KEY + _NONCE], raw[_KEY + _NONCE :]
            shared = self._private.exchange(X25519PublicKey.from_public_bytes(ephemeral))
            plain: bytes = _aead(shared, ephemeral, self._public).decrypt(
                nonce, body, request_id.encode()
            )
        except (InvalidTag, ValueError) as exc:
            raise SealingError("the sealed answer does not open with this request's key") from exc
        return plain.decode("utf-8")


def seal(value: str, public: str, *, request_id: str) -> str:
    """`value` sealed to the X25519 public key `public` (base64url), bound to `request_id`."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import (
        X25519PrivateKey,
        X25519PublicKey,
    )

    try:
        recipient = _unb64(public)
        peer = X25519PublicKey.from_public_bytes(recipient)
    except ValueError as exc:
        raise SealingError(f"not a sealing key: {exc}") from exc
    ephemeral_key = X25519PrivateKey.generate()
    ephemeral = ephemeral_key.public_key().public_bytes_raw()
    nonce = os.urandom(_NONCE)
    body = _aead(ephemeral_key.exchange(peer), ephemeral, recipient).encrypt(
        nonce, value.encode("utf-8"), request_id.encode()
    )
    return _PREFIX + _b64(ephemeral + nonce + body)


def sealed_schema(key: SealingKey, **schema: Any) -> dict[str, Any]:
    """A string answer's schema, sealed to `key`."""
    return {"type": "string", **schema, SEALED_TO: key.public}


def sealing_key_of(schema: Mapping[str, Any] | None) -> str | None:
    """The public key a question's answers are sealed to (None: not sealed)."""
    if schema is None:
        return None
    key = schema.get(SEALED_TO)
    return key if isinstance(key, str) else None
