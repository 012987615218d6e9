"""Bound answers: a question whose answer must be an address that carries one exact value.

An OAuth login's consent is answered with the address the operator's browser was redirected
to, and only an address carrying that login's `state` belongs to it. A bound question names the
query parameter and the SHA-256 of its value in its schema (`"x-heron-bound-query"`), with the
words that refuse instead (`no`); the desk checks every answer against it before anything is
settled, on every channel (`heron approvals answer`, the web console, a mail reply), so an
address of another login, or an altered one, is refused and the request goes on waiting.
Only the digest is stored: the value itself is not needed to check an answer.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Collection, Mapping
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

__all__ = ["BOUND_QUERY", "bound_query", "bound_refusal", "digest"]

BOUND_QUERY: Final = "x-heron-bound-query"
"""The schema keyword of a bound answer: `{"param", "sha256", "refusals"}`."""


def digest(value: str) -> str:
    """The SHA-256 (hex) a bound question stores of the value."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def bound_query(param: str, value: str, *, refusals: Collection[str]) -> dict[str, Any]:
    """The schema entry binding answers to an address whose `param` is `value`."""
    return {BOUND_QUERY: {"param": param, "sha256": digest(value), "refusals": sorted(refusals)}}


def bound_refusal(answer: str, schema: Mapping[str, Any] | None) -> str | None:
    """Why `answer` does not fit the bound question `schema` (None: it fits, or the question
    is not bound)."""
    bound = None if schema is None else schema.get(BOUND_QUERY)
    if not isinstance(bound, Mapping):
        return None
    refusals = [str(r) for r in bound.get("refusals", ())]
    text = answer.strip()
    if text.casefold() in refusals:
        return None
    param, wanted = str(bound.get("param", "")), str(bound.get("sha256", ""))
    query = urlsplit(text).query if "://" in text else text.lstrip("?")
    found = parse_qs(query).get(param) or []
    if len(found) == 1 and hmac.compare_digest(digest(found[0]), wanted):
        return None
    words = ", ".join(f"'{r}'" for r in refusals)
    return (
        f"that is not the address of this request: its `{param}` is not this request's "
        f"(another login's address, or altered); answer with the whole address the browser "
        f"landed on{', or ' + words + ' to refuse' if words else ''}"
    )
