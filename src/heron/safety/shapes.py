"""Credential shapes: text that only *looks like* a secret, and how it is masked for display.

heron knows some secrets by value (`heron.safety.secrets`: provider keys, configured
credentials); those become placeholders wherever they enter the data path. Everything else that
has the shape of a credential — a value after `token=` or `"api_key":`, a `Bearer` token, an
`sk-…`/`ghp_…`/`AKIA…` key, a PEM private-key body — is not known to be one, so it stays raw on
the data path (the model may need it) and is masked only where text is rendered for people and
other programs (`heron.safety.redact`, the surface scrubbers built on `mask_shapes`).

Masking keeps the first four characters (`abcd*[REDACTED]`) so an operator can tell which
credential was involved. A reserved placeholder (`«secret:NAME»`) is never masked again.
"""

from __future__ import annotations

import re
import string

__all__ = ["PLACEHOLDER_PREFIX", "REDACTED", "is_secret_key", "json_has_shapes", "mask_shapes"]

PLACEHOLDER_PREFIX = "«secret:"
"""How every placeholder for a known secret begins (`«secret:OPENAI_API_KEY»`)."""

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
# One scan for every part: the check runs for each argument key on every rendered call.
_SECRET_KEY_RE = re.compile("|".join(map(re.escape, _SECRET_KEY_PARTS)))

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


# Every pattern above begins with one of these (in the lowercased text), so text in which none
# occurs has nothing to mask: one scan instead of three, the common case on every surface.
_ANY_SHAPE_RE = re.compile(
    r"authorization|token|api[_-]?key|access[_-]?key|private[_-]?key|user[_-]?key|passwd"
    r"|password|passphrase|secret|bearer|credential|cookie|session[_-]?id"
    r"|sk-|sk_|rk_|gh[pousr]_|github_pat_|xox[abprs]-|akia|asia|aiza"
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
        # A placeholder is not a credential: neither its value nor its own `secret:` word.
        key_start = match.start()
        if text.startswith(PLACEHOLDER_PREFIX, start) or (
            key_start > 0 and text.startswith(PLACEHOLDER_PREFIX, key_start - 1)
        ):
            continue
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


def mask_shapes(text: str) -> str:
    """Mask what looks like a credential in free text, for display.

    Values of at least eight characters after credential-like keys (`token=…`, `"api_key": "…"`,
    `Authorization: …`) keep their first four characters and end in `*[REDACTED]`; shorter values
    are left alone. `Bearer` tokens, well-known key shapes (`sk-…`, `ghp_…`, `github_pat_…`,
    `xoxb-…`, AWS `AKIA…`) are masked wherever they appear, and PEM private-key bodies are replaced
    whole. Idempotent, and placeholders of known secrets are left as they are.
    """
    if not text:
        return text
    if "PRIVATE KEY-----" in text:
        text = _PEM_RE.sub(_mask_pem, text)
    elif _ANY_SHAPE_RE.search(text.translate(_ASCII_LOWER)) is None:
        return text
    text = _mask_values(text, _KEYED_RE, word_start=False)
    # `forbearer xyz` is a word, not an auth scheme.
    text = _mask_values(text, _BEARER_RE, word_start=True)
    return _TOKEN_RE.sub(_mask_token, text)


def json_has_shapes(text: str) -> bool:
    """Whether a value whose JSON is `text` may hold a credential shape or a secret key.

    False only when no string or key of the value holds one: what the patterns look for has
    no character JSON escapes (quotes, backslashes, controls), so a match inside a string or
    a key is a match in its JSON. One scan of the text instead of a walk of the value. Text
    that is not ASCII may lowercase differently (`is_secret_key` lowercases all of Unicode):
    it may hold anything.
    """
    if not text.isascii():
        return True
    lowered = text.lower()
    # `auth` is the one secret-key part the shapes' prefilter does not begin with.
    return "auth" in lowered or "private key-----" in lowered or bool(_ANY_SHAPE_RE.search(lowered))


def is_secret_key(key: str) -> bool:
    """Whether a mapping key names a secret (case-insensitive substring match).

    Deliberately broad: `oauth_token`, `X-API-Key`, `DBPassword` and `AuthHeader` all count. The
    cost of a false positive (an `author` field shown as redacted) is a less useful display; the
    cost of a false negative is a leaked credential.
    """
    normalized = key.lower().replace("-", "_")
    return _SECRET_KEY_RE.search(normalized) is not None
