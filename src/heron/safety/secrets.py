"""Credentials heron holds on someone's behalf, kept out of every rendering surface.

A `Secret` wraps one credential (a provider API key, a service token read from the
environment). It never shows its value in a `repr`, a `str` or a log line; the one place that
needs the value asks for it with `reveal()`, and every error message that might quote it goes
through `scrub()` first, which masks this value and anything else that looks like a credential
(`heron.safety.redact.scrub_text`).

Model adapters (`heron.models`) and the model services of the multimodal tool set hold their keys
this way. This module is the home of heron's known secrets: the registry of every credential
the process holds, so that each rendering surface can mask them all, grows here.
"""

from __future__ import annotations

from heron.safety.redact import REDACTED, scrub_text

__all__ = ["Secret"]


class Secret:
    """A credential that never shows itself in a repr, a str or a log line.

    Args:
        value: The credential itself (an API key, a token).
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The credential itself, for the one place that needs it (the SDK client, the
        `Authorization` header)."""
        return self._value

    def scrub(self, text: str) -> str:
        """`text` with this credential, and anything else that looks like one, masked."""
        if self._value and self._value in text:
            text = text.replace(self._value, REDACTED)
        return scrub_text(text)

    def __repr__(self) -> str:
        return f"Secret('{REDACTED}')"

    __str__ = __repr__
