"""Redaction helpers for every rendering surface.

Two kinds of secrets are told apart. Values heron *knows* are secret (`heron.safety.secrets`:
provider keys, configured credentials) are replaced by their placeholder (`«secret:NAME»`)
wherever they enter the data path, and again by every scrubber here. Text that only *looks
like* a credential (`heron.safety.shapes`) stays raw on the data path — the model sees tool
output as the tool produced it — and is masked wherever it is rendered for people or machines
outside that path (observer records, logs, progress lines, streamed events, approval summaries,
audit entries, listings of stored jobs, commands and bus events).

* `scrub_text` replaces known secrets by their placeholders and masks credential shapes in free
  text, keeping a short prefix so operators can still tell which credential was involved.
* `scrub_value` does the same over a JSON-like value, blanking whole values under secret keys.
* `summarize_args` renders tool arguments as one safe line for approval prompts and audit.
* `sanitize_replacement` cleans an operator's deny-with-edit text before it becomes a tool result.

Every scrubber is idempotent: scrubbing already scrubbed text changes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from heron.safety.secrets import known_secrets
from heron.safety.shapes import REDACTED, is_secret_key, json_has_shapes, mask_shapes

__all__ = [
    "REDACTED",
    "is_secret_key",
    "sanitize_replacement",
    "scrub_encoded",
    "scrub_text",
    "scrub_value",
    "summarize_args",
]


def scrub_text(text: str) -> str:
    """Mask credentials in free text for display.

    Known secrets become their placeholders (`«secret:OPENAI_API_KEY»`). Then values of at least
    eight characters after credential-like keys (`token=…`, `"api_key": "…"`,
    `Authorization: …`) keep their first four characters and end in `*[REDACTED]`; shorter values
    are left alone. `Bearer` tokens, well-known key shapes (`sk-…`, `ghp_…`, `github_pat_…`,
    `xoxb-…`, AWS `AKIA…`) are masked wherever they appear, and PEM private-key bodies are replaced
    whole. Idempotent: `scrub_text(scrub_text(x)) == scrub_text(x)`.
    """
    if not text:
        return text
    return mask_shapes(known_secrets().mask(text))


def scrub_value(value: Any) -> Any:
    """Return a scrubbed copy of a JSON-like value; the input is never modified.

    Any mapping entry whose key `is_secret_key` has its whole value (of any type) replaced by
    `"[REDACTED]"`; every other string is passed through `scrub_text`. Lists and tuples keep
    their type; other leaves (numbers, booleans, `None`) are returned as they are.
    """
    kind = type(value)
    if kind is str:
        return scrub_text(value)
    # Exact types first: an ABC check per leaf costs more than the scrub of a short string.
    if kind in _SCALARS:
        return value
    if kind is dict or isinstance(value, Mapping):
        known = known_secrets()
        return {
            (known.mask(k) if isinstance(k, str) else k): REDACTED
            if isinstance(k, str) and is_secret_key(k)
            else scrub_value(v)
            for k, v in value.items()
        }
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, list):
        return [scrub_value(item) for item in value]
    if isinstance(value, tuple):
        return tuple(scrub_value(item) for item in value)
    return value


_SCALARS = frozenset({int, float, bool, type(None)})


def scrub_encoded(value: Any, encoded: str) -> Any:
    """`scrub_value(value)`, given `encoded`, the compact JSON of `value` (`ensure_ascii=False`):
    `value` itself when that text shows neither a known secret nor a credential shape nor a
    secret key (then scrubbing would change nothing), so a clean value costs scans of its JSON
    instead of a walk."""
    if known_secrets().in_json(encoded) or json_has_shapes(encoded):
        return scrub_value(value)
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
