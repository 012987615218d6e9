"""Was a received mail authenticated by a server we trust? `Authentication-Results` (RFC 8601).

heron does not verify DKIM signatures itself (that needs DNS and a key cache); the receiving
mail server does, and records the verdict in an `Authentication-Results` header named by its
*authserv-id* (`mx.example.com; dkim=pass header.d=example.com`). heron trusts such a header
only when its authserv-id is one the operator configured (`[mail_answers]
trusted_authserv_ids`), and only the topmost one — the header the operator's own server added
last. **That server must remove any `Authentication-Results` header carrying its own
authserv-id from incoming mail** (Postfix with OpenDKIM/OpenDMARC, rspamd and Exim all can);
otherwise a sender could forge the verdict.

A mail passes when that header says `dmarc=pass` for the From domain, or `dkim=pass` with a
signing domain (`header.d`) equal to the From domain or a parent of it (relaxed alignment).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from email.message import Message
from email.utils import getaddresses

__all__ = ["AuthVerdict", "check_authentication", "sender_address"]

_RESULT = re.compile(r"(?P<method>[a-z0-9_.-]+)\s*=\s*(?P<result>[a-z]+)(?P<props>[^;]*)", re.I)
_PROP = re.compile(r"(?P<key>[a-z]+\.[a-z0-9_-]+)\s*=\s*(?P<value>[^\s;]+)", re.I)


@dataclass(frozen=True, kw_only=True, slots=True)
class AuthVerdict:
    passed: bool
    reason: str


def sender_address(message: Message) -> str:
    """The From address, lower case (`""` when there is none or more than one)."""
    found = [a for _, a in getaddresses([str(v) for v in message.get_all("From", [])]) if a]
    return found[0].casefold() if len(found) == 1 else ""


def _comments(text: str) -> str:
    return re.sub(r"\([^()]*\)", " ", text)


def check_authentication(message: Message, trusted: Collection[str]) -> AuthVerdict:
    """Whether `message` carries a trusted server's verdict that its From domain signed it."""
    if not trusted:
        return AuthVerdict(passed=False, reason="no trusted authserv-id is configured")
    sender = sender_address(message)
    if "@" not in sender:
        return AuthVerdict(passed=False, reason="no single From address")
    domain = sender.rpartition("@")[2]
    wanted = {t.casefold() for t in trusted}
    header = None
    for value in message.get_all("Authentication-Results", []):
        authserv = _comments(str(value)).split(";", 1)[0].split()
        if authserv and authserv[0].casefold() in wanted:
            header = _comments(str(value))
            break
    if header is None:
        return AuthVerdict(passed=False, reason="no Authentication-Results from a trusted server")
    for clause in header.split(";")[1:]:
        match = _RESULT.search(clause)
        if match is None or match["result"].casefold() != "pass":
            continue
        props = {
            p["key"].casefold(): p["value"].strip('"').casefold() for p in _PROP.finditer(clause)
        }
        method = match["method"].casefold()
        if method == "dmarc" and props.get("header.from") == domain:
            return AuthVerdict(passed=True, reason=f"dmarc=pass for {domain}")
        signer = props.get("header.d") or props.get("header.i", "").rpartition("@")[2]
        if method == "dkim" and signer and (domain == signer or domain.endswith("." + signer)):
            return AuthVerdict(passed=True, reason=f"dkim=pass by {signer}")
    return AuthVerdict(passed=False, reason=f"no dkim or dmarc pass for {domain}")
