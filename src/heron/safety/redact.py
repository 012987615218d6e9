"""Redaction helpers for every rendering surface.

The data path stays raw: the model sees tool output exactly as the tool produced it. Anything
rendered for people or machines outside that path (observer records, logs, progress lines,
streamed events, approval summaries, audit entries) goes through these helpers first.

* `scrub_text` masks credentials in free text, keeping a short prefix so operators can still
  tell which credential was involved.
* `scrub_value` does the same over a JSON-like value, blanking whole values under secret keys.
* `summarize_args` renders tool arguments as one safe line for approval prompts and audit.
* `sanitize_replacement` cleans an operator's deny-with-edit text before it becomes a tool result.

Every scrubber is idempotent: scrubbing already scrubbed text changes nothing.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from typing import Any

__all__ = [
    "REDACTED",
    "is_secret_key",
    "sanitize_replacement",
    "scrub_text",
    "scrub_value",
    "summarize_args",
]

REDACTED = "[REDACTED]"
"""What replaces a whole value under a secret key in `scrub_value`."""

_MASK = "*" + REDACTED
_KEEP = 4
"""Characters of a masked value left visible: enough to recognise a key, too few to use it."""

# Matched as substrings of the lowercased key with `-` read as `_`, so `X-API-Key`, `oauth_token`
# and `DBPassword` are all caught.
_SECRET_KEY_PARTS = (
    "secret",
    "password",
    "passwd",
    "passphrase",
    "token",
    "auth",
    "bearer",
    "credential",
    "cookie",
    "api_key",
    "apikey",
    "private_key",
    "privatekey",
    "access_key",
    "user_key",
    "session_id",
    "sessionid",
)

# PEM blocks first: the key=value pass would otherwise mask only the `-----BEGIN` header and
# leave the key body readable. A block cut off by truncation is masked to the end of the text.
_PEM_RE = re.compile(
    r"(-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----)(.*?)(-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
    re.DOTALL,
)

# Credentials introduced by a key. This and `_BEARER_RE` run case-sensitively over an
# ASCII-lowercased copy of the text: leading lowercase literals let the regex engine skip ahead
# by first character, which `re.IGNORECASE` would prevent (about 10x slower on long output).
# Forms: `key=value`, `key: value`, `"key": "value"`, `key='value'`, `Authorization: Basic value`.
# The key may be the tail of a longer identifier (`oauth_token`, `client_secret`). Values shorter
# than eight characters are left alone: they are rarely credentials and masking them hurts
# readability. Quoted values honour backslash escapes so an escaped quote cannot end them early,
# and need no closing quote so a value cut off by truncation is still masked. Unquoted values
# exclude brackets, so a re-scan of an already masked value (`abcd*[REDACTED]`) sees only
# `abcd*`, too short to match again.
_KEYED_RE = re.compile(
    r"""
    (?:authorization|token|api[_-]?key|access[_-]?key|private[_-]?key|user[_-]?key
      |passwd|password|passphrase|secret|bearer|credentials?|set[_-]?cookie|cookie
      |session[_-]?id)
    ["']?\s*[:=]\s*
    (?:
        "(?P<dq>(?:[^"\\\n]|\\.){8,})
      | '(?P<sq>(?:[^'\\\n]|\\.){8,})
      | (?:(?:basic|bearer|digest|negotiate|token)\s+)?
        (?P<bare>[^\s"'`,;&<>()\[\]{}]{8,})
    )
    """,
    re.VERBOSE,
)
# A free-standing bearer token, wherever it appears (`curl -H "Authorization: Bearer …"`).
_BEARER_RE = re.compile(r"bearer\s+(?P<value>[a-z0-9\-._~+/]{8,}=*)")
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)

# Well-known token shapes that are secrets wherever they appear. Every branch starts with a
# literal character so the engine can skip ahead; the word-boundary test lives in `_is_word_start`
# because a leading `\b` would disable that. Digits are required in `sk-` keys so prose such as
# `sk-learn-compatible-models` is not mangled.
_TOKEN_RE = re.compile(
    r"""
        sk-(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{16,}
      | sk_(?:live|test)_[A-Za-z0-9]{16,}
      | rk_(?:live|test)_[A-Za-z0-9]{16,}
      | gh[pousr]_[A-Za-z0-9]{30,}
      | github_pat_[A-Za-z0-9_]{22,}
      | xox[abprs]-[A-Za-z0-9-]{10,}
      | AKIA[0-9A-Z]{16}
      | ASIA[0-9A-Z]{16}
      | AIza[0-9A-Za-z_-]{35}
    """,
    re.VERBOSE,
)


def _mask(secret: str) -> str:
    return secret[:_KEEP] + _MASK


def _is_word_start(text: str, index: int) -> bool:
    return index == 0 or not (text[index - 1].isalnum() or text[index - 1] == "_")


def _mask_pem(match: re.Match[str]) -> str:
    return match.group(1) + REDACTED + match.group(3)


def _mask_values(text: str, pattern: re.Pattern[str], *, word_start: bool) -> str:
    # Match on the lowercased copy, cut from the original: lowercasing ASCII keeps every length,
    # so spans line up, and the kept prefix keeps its original case.
    pieces: list[str] = []
    done = 0
    for match in pattern.finditer(text.translate(_ASCII_LOWER)):
        if word_start and not _is_word_start(text, match.start()):
            continue
        # Every alternative ends in one named value group; `lastgroup` is the one that matched.
        start, end = match.span(match.lastgroup or 0)
        pieces.append(text[done:start])
        pieces.append(_mask(text[start:end]))
        done = end
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def _mask_token(match: re.Match[str]) -> str:
    if not _is_word_start(match.string, match.start()):
        return match.group(0)
    return _mask(match.group(0))


def scrub_text(text: str) -> str:
    """Mask credentials in free text for display.

    Values of at least eight characters after credential-like keys (`token=…`, `"api_key": "…"`,
    `Authorization: …`) keep their first four characters and end in `*[REDACTED]`; shorter values
    are left alone. `Bearer` tokens, well-known key shapes (`sk-…`, `ghp_…`, `github_pat_…`,
    `xoxb-…`, AWS `AKIA…`) are masked wherever they appear, and PEM private-key bodies are replaced
    whole. Idempotent: `scrub_text(scrub_text(x)) == scrub_text(x)`.
    """
    if not text:
        return text
    if "PRIVATE KEY-----" in text:
        text = _PEM_RE.sub(_mask_pem, text)
    text = _mask_values(text, _KEYED_RE, word_start=False)
    # `forbearer xyz` is a word, not an auth scheme.
    text = _mask_values(text, _BEARER_RE, word_start=True)
    return _TOKEN_RE.sub(_mask_token, text)


def is_secret_key(key: str) -> bool:
    """Whether a mapping key names a secret (case-insensitive substring match).

    Deliberately broad: `oauth_token`, `X-API-Key`, `DBPassword` and `AuthHeader` all count. The
    cost of a false positive (an `author` field shown as redacted) is a less useful display; the
    cost of a false negative is a leaked credential.
    """
    normalized = key.lower().replace("-", "_")
    return any(part in normalized for part in _SECRET_KEY_PARTS)


def scrub_value(value: Any) -> Any:
    """Return a scrubbed copy of a JSON-like value; the input is never modified.

    Any mapping entry whose key `is_secret_key` has its whole value (of any type) replaced by
    `"[REDACTED]"`; every other string is passed through `scrub_text`. Lists and tuples keep
    their type; other leaves (numbers, booleans, `None`) are returned as they are.
    """
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, Mapping):
        return {
            k: REDACTED if isinstance(k, str) and is_secret_key(k) else scrub_value(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [scrub_value(item) for item in value]
    if isinstance(value, tuple):
        return tuple(scrub_value(item) for item in value)
    return value


# Controls and invisible formatting characters in a one-line summary could break the approval
# prompt's layout or rewrite it on a terminal (ANSI escapes, bidi overrides), so they are shown
# escaped rather than interpreted.
_DISPLAY_UNSAFE_RE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_unsafe(match: re.Match[str]) -> str:
    char = match.group(0)
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def _display(text: str, limit: int) -> str:
    text = _DISPLAY_UNSAFE_RE.sub(_escape_unsafe, text)
    return text if len(text) <= limit else text[:limit] + "…"


def summarize_args(arguments: Mapping[str, Any], *, max_value_chars: int = 80) -> str:
    """Render tool arguments as one display-safe line for approval prompts and audit entries.

    `path` comes first when present, then the other arguments in their given order, as `k: v`
    joined by `", "`. Values under secret keys become `[redacted]`; other values are scrubbed,
    non-strings rendered as compact JSON, control and bidi characters shown escaped, and
    anything longer than `max_value_chars` cut and ended with `…`.
    """
    if max_value_chars < 0:
        raise ValueError(f"max_value_chars must be >= 0, got {max_value_chars}")
    keys = list(arguments)
    if "path" in arguments:
        keys.remove("path")
        keys.insert(0, "path")
    parts: list[str] = []
    for key in keys:
        name = _display(key, max_value_chars)
        if is_secret_key(key):
            parts.append(f"{name}: [redacted]")
            continue
        value = arguments[key]
        if isinstance(value, str):
            rendered = scrub_text(value)
        else:
            rendered = json.dumps(
                scrub_value(value), ensure_ascii=False, separators=(",", ":"), default=repr
            )
        parts.append(f"{name}: {_display(rendered, max_value_chars)}")
    return ", ".join(parts)


# Unicode `Cc` (C0, DEL, C1) minus the whitespace a result may legitimately contain. Dropping ESC
# defuses ANSI sequences: what is left (`[31m`) is inert text.
_REPLACEMENT_DROP = {
    code: None for code in (*range(0x00, 0x20), *range(0x7F, 0xA0)) if chr(code) not in "\n\r\t"
}


def sanitize_replacement(text: str, *, max_bytes: int = 65536) -> str:
    """Clean an operator's deny-with-edit replacement before it becomes a synthetic tool result.

    Control characters other than `\\n`, `\\r` and `\\t` are dropped (ESC included), and the
    result is capped at `max_bytes` of UTF-8, cut on a character boundary.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
    cleaned = text.translate(_REPLACEMENT_DROP)
    # Four bytes per character is the UTF-8 maximum, so short text needs no encoding at all.
    if len(cleaned) * 4 <= max_bytes:
        return cleaned
    encoded = cleaned.encode("utf-8", "surrogatepass")
    if len(encoded) <= max_bytes:
        return cleaned
    # Back up over continuation bytes (0b10xxxxxx) so a character straddling the cap is dropped
    # whole instead of leaving a broken sequence.
    cut = max_bytes
    while cut > 0 and encoded[cut] & 0xC0 == 0x80:
        cut -= 1
    return encoded[:cut].decode("utf-8", "surrogatepass")
