"""Keep OAuth secrets out of every surface heron renders: logs, events, audits, status lines.

Every token, refresh token, client secret and authorization code heron handles is remembered
here (`remember_secret`), and `scrub_secrets` masks each one wherever it appears in a text, on
top of `heron.safety.redact.scrub_text`'s pattern-based masking. Each is also a known secret of
the process (`heron.safety.secrets`, as `«secret:MCP_OAUTH»`), so it never enters the data path
either. `install_log_filter` puts the
same masking on the loggers of the SDK's OAuth client and HTTP libraries, and drops the SDK's
"OAuth flow error" traceback when the flow only stopped because heron is waiting for consent
(heron reports that itself, once).
"""

from __future__ import annotations

import logging
import threading

from heron.mcp.auth.causes import find_cause
from heron.safety.redact import scrub_text
from heron.safety.secrets import known_secrets

__all__ = ["install_log_filter", "remember_secret", "scrub_secrets"]

_MIN_CHARS = 8
"""Shorter values are not remembered: masking them would mangle ordinary words."""
_MAX_REMEMBERED = 512
_KEEP = 4

_lock = threading.Lock()
_secrets: dict[str, None] = {}  # insertion-ordered set: the oldest is forgotten first

_LOGGERS = ("mcp.client.auth", "mcp.client.auth.oauth2", "mcp.client.auth.utils", "httpx2", "httpx")


def remember_secret(*values: str | None) -> None:
    """Remember secret values so `scrub_secrets` masks them from now on (and every entry point
    of the data path replaces them by `«secret:MCP_OAUTH»`)."""
    known = known_secrets()
    for value in values:
        known.add("MCP_OAUTH", value)
    with _lock:
        for value in values:
            if value and len(value) >= _MIN_CHARS and value not in _secrets:
                _secrets[value] = None
                while len(_secrets) > _MAX_REMEMBERED:
                    del _secrets[next(iter(_secrets))]


def scrub_secrets(text: str) -> str:
    """`text` with every remembered secret masked (first four characters kept), then
    `scrub_text`. Idempotent."""
    if not text:
        return text
    with _lock:
        known = [s for s in _secrets if s in text]
    for secret in sorted(known, key=len, reverse=True):
        text = text.replace(secret, secret[:_KEEP] + "*[REDACTED]")
    return scrub_text(text)


class _ScrubFilter(logging.Filter):
    def __init__(self, quiet: tuple[type[BaseException], ...]) -> None:
        super().__init__("heron-oauth-scrub")
        self._quiet = quiet

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and self._quiet and find_cause(exc, self._quiet) is not None:
            return False
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: let logging report it as usual
            return True
        record.msg, record.args = scrub_secrets(message), None
        if record.exc_info:
            # The traceback's text is rendered from the exception: render it scrubbed now.
            formatted = logging.Formatter().formatException(record.exc_info)
            record.exc_text, record.exc_info = scrub_secrets(formatted), None
        return True


_installed = False


def install_log_filter(quiet: tuple[type[BaseException], ...] = ()) -> None:
    """Scrub the OAuth-related loggers (once per process); records whose exception is one of
    `quiet` are dropped."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    scrubber = _ScrubFilter(quiet)
    for name in _LOGGERS:
        logging.getLogger(name).addFilter(scrubber)
