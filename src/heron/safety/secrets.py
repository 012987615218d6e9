"""The secrets heron knows, and the credentials it holds on someone's behalf.

**Known secrets.** Some values heron *knows* are secret: the provider key variables it reads
(`OPENAI_API_KEY`, `ANTHROPIC_API_KEY` and the like, whether or not this run uses that
provider), the secret environment variables its configuration names (webhook and notify
secrets, mail, calendar, Notion and GitHub credentials, MCP server credentials and OAuth
tokens). `known_secrets()` is the process's registry of them: built once from the environment,
completed from the configuration (`KnownSecrets.add_env`) and by the code that obtains a secret
at run time (`KnownSecrets.add`, e.g. an OAuth token).

Such a value never reaches the model, an event, a log or a store. Where it would enter the data
path — a tool's output, a file read, a process's output, a webhook body, an MCP result — it
becomes a reserved placeholder, `«secret:OPENAI_API_KEY»`, so the model still sees that
something is there (`KnownSecrets.mask`). Tool calls whose arguments carry a placeholder to a
tool that changes something are refused (`placeholders_in`), and so are calls that carry a
known value itself (`KnownSecrets.names_in`): a secret reaches only its declared consumer — a
provider key its provider adapter, an MCP credential its own server, a webhook secret the
signer. Values shorter than `MIN_SECRET_CHARS` are not registered: masking them would mangle
ordinary words.

Shapes that only *look like* credentials are another matter (`heron.safety.shapes`): they
stay raw on the data path and are masked on rendering surfaces (`heron.safety.redact`).

**`Secret`** wraps one credential heron holds (a provider API key, a service token). It never
shows its value in a `repr`, a `str` or a log line; the one place that needs the value asks for
it with `reveal()`, and every error message that might quote it goes through `scrub()` first.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Final

from heron.safety.shapes import PLACEHOLDER_PREFIX, REDACTED, is_secret_key, mask_shapes

__all__ = [
    "MIN_SECRET_CHARS",
    "PLACEHOLDER_PREFIX",
    "PROVIDER_KEY_VARIABLES",
    "KnownSecrets",
    "Secret",
    "install_log_masking",
    "known_secrets",
    "placeholder",
    "placeholders_in",
    "secret_env_names",
]

MIN_SECRET_CHARS: Final = 8
"""Shorter values are not registered (a placeholder for `1234` would garble every number)."""

PROVIDER_KEY_VARIABLES: Final = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENAI_COMPATIBLE_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
    "OPENROUTER_API_KEY",
    "DEEPSEEK_API_KEY",
    "XAI_API_KEY",
    "TOGETHER_API_KEY",
    "FIREWORKS_API_KEY",
    "COHERE_API_KEY",
    "PERPLEXITY_API_KEY",
    "HF_TOKEN",
)
"""Model providers' key variables: known secrets whether or not this run uses the provider."""

HERON_SECRET_VARIABLES: Final = (
    "HERON_WEBHOOK_SECRET",
    "HERON_TOKEN_KEY",
    "NOTION_TOKEN",
    "GITHUB_TOKEN",
)
"""The defaults of heron's own secret settings (`heron serve`'s webhook secret, the MCP token
files' key, the Notion and GitHub connectors' tokens)."""

SECRET_NAME_SUFFIXES: Final = (
    "_API_KEY",
    "_APIKEY",
    "_TOKEN",
    "_SECRET",
    "_PASSWORD",
    "_PASSWD",
    "_ACCESS_KEY",
    "_PRIVATE_KEY",
)
"""Any variable of heron's environment whose name ends like this is known to be a secret too
(`AWS_SECRET_ACCESS_KEY`, `SLACK_BOT_TOKEN`)."""

_PLACEHOLDER_RE: Final = re.compile(re.escape(PLACEHOLDER_PREFIX) + r"([A-Za-z0-9_.-]+)»")
_NAME_RE: Final = re.compile(r"[A-Za-z0-9_.-]+")


def placeholder(name: str) -> str:
    """The text that stands for the known secret `name`: `«secret:NAME»`."""
    return f"{PLACEHOLDER_PREFIX}{name}»"


def placeholders_in(value: Any) -> list[str]:
    """The names of the placeholders in a JSON-like value (strings, mapping keys and values,
    lists), in order of first appearance."""
    found: dict[str, None] = {}
    for text in _strings(value):
        if PLACEHOLDER_PREFIX in text:
            found.update(dict.fromkeys(_PLACEHOLDER_RE.findall(text)))
    return list(found)


def _strings(value: Any) -> Iterable[str]:
    # Iterative: argument nesting is bounded where it is parsed, but this never recurses.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            for key, inner in item.items():
                if isinstance(key, str):
                    yield key
                stack.append(inner)
        elif isinstance(item, list | tuple):
            stack.extend(item)


def _is_secret_variable(name: str) -> bool:
    upper = name.upper()
    return upper.endswith(SECRET_NAME_SUFFIXES)


class KnownSecrets:
    """A registry of secret values by name, and the masking every entry point applies.

    Thread-safe; adding is rare (start-up, a new OAuth token), masking is frequent and reads an
    immutable snapshot. The same value under a second name keeps its first name.
    """

    def __init__(
        self, values: Mapping[str, str] | None = None, *, min_chars: int = MIN_SECRET_CHARS
    ) -> None:
        self.min_chars = min_chars
        self._lock = threading.Lock()
        self._names: dict[str, str] = {}  # value -> name
        self._entries: tuple[tuple[str, str], ...] = ()  # (value, placeholder), longest first
        self._byte_entries: tuple[tuple[bytes, bytes], ...] = ()
        self._json_values: tuple[str, ...] = ()  # each value as it reads inside a JSON string
        for name, value in (values or {}).items():
            self.add(name, value)

    def add(self, name: str, value: str | None) -> bool:
        """Register `value` as the secret `name`; False when it is too short or known already."""
        if not _NAME_RE.fullmatch(name):
            raise ValueError(f"a secret's name is letters, digits, '_', '.' or '-': {name!r}")
        if not value or len(value) < self.min_chars:
            return False
        with self._lock:
            if value in self._names:
                return False
            self._names[value] = name
            ordered = sorted(self._names.items(), key=lambda item: -len(item[0]))
            self._entries = tuple((v, placeholder(n)) for v, n in ordered)
            self._byte_entries = tuple(
                (v.encode("utf-8", "surrogatepass"), p.encode("utf-8")) for v, p in self._entries
            )
            self._json_values = tuple(json.dumps(v, ensure_ascii=False)[1:-1] for v, _ in ordered)
        return True

    def add_env(self, names: Iterable[str], environ: Mapping[str, str] | None = None) -> None:
        """Register the values of these environment variables (those that are set) under
        their names."""
        env = os.environ if environ is None else environ
        for name in names:
            if _NAME_RE.fullmatch(name):
                self.add(name, env.get(name))

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the registered secrets (never their values)."""
        return tuple(sorted(set(self._names.values())))

    def name_of(self, value: str) -> str | None:
        """The name `value` is registered under, if it is a known secret."""
        return self._names.get(value)

    def __len__(self) -> int:
        return len(self._entries)

    def replacements(self) -> tuple[tuple[str, str], ...]:
        """(value, placeholder) pairs, longest value first, for a masker heron cannot run in
        its own process (a detached job's supervisor). Hand them over a pipe, never a file."""
        return self._entries

    def mask(self, text: str) -> str:
        """`text` with every known secret replaced by its placeholder. Idempotent."""
        entries = self._entries
        if not entries or not text:
            return text
        for value, mark in entries:
            if value in text:
                text = text.replace(value, mark)
        return text

    def mask_bytes(self, data: bytes) -> bytes:
        """`mask` for raw bytes (process output), on the secrets' UTF-8 encodings."""
        entries = self._byte_entries
        if not entries or not data:
            return data
        for value, mark in entries:
            if value in data:
                data = data.replace(value, mark)
        return data

    def mask_value(self, value: Any) -> Any:
        """A copy of a JSON-like value with `mask` applied to every string (mapping keys
        included); other leaves are returned as they are, and an unchanged value is returned
        itself."""
        if not self._entries:
            return value
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, Mapping):
            return {
                (self.mask(k) if isinstance(k, str) else k): self.mask_value(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self.mask_value(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self.mask_value(item) for item in value)
        return value

    def in_json(self, text: str) -> bool:
        """Whether a known secret may occur in the value whose JSON (`ensure_ascii=False`) is
        `text`. JSON escapes a string character by character, so a string holding a secret
        holds its escaped form: a text without any escaped form holds none."""
        values = self._json_values
        return bool(values) and any(value in text for value in values)

    def names_in(self, value: Any) -> list[str]:
        """The names of the known secrets whose values appear in a JSON-like value."""
        entries = self._entries
        if not entries:
            return []
        found: dict[str, None] = {}
        for text in _strings(value):
            for secret, mark in entries:
                if secret in text:
                    found[mark[len(PLACEHOLDER_PREFIX) : -1]] = None
        return list(found)

    def __repr__(self) -> str:
        return f"KnownSecrets(names={list(self.names)!r})"


_registry: KnownSecrets | None = None
_registry_lock = threading.Lock()


def known_secrets() -> KnownSecrets:
    """The process's registry, built on first use from the environment: the provider key
    variables, heron's own secret settings and every variable named like a secret
    (`SECRET_NAME_SUFFIXES`). The configuration adds the variables it names
    (`register_secrets`)."""
    global _registry
    if _registry is None:
        with _registry_lock:
            if _registry is None:
                registry = KnownSecrets()
                registry.add_env(PROVIDER_KEY_VARIABLES)
                registry.add_env(HERON_SECRET_VARIABLES)
                registry.add_env(sorted(n for n in os.environ if _is_secret_variable(n)))
                _registry = registry
    return _registry


_log_masking = False


def install_log_masking() -> None:
    """Make every log record of this process carry placeholders instead of known secrets:
    its message (arguments merged in) and its traceback are masked when the record is made,
    before any handler formats it. For front ends (the `heron` command installs it); idempotent."""
    global _log_masking
    with _registry_lock:
        if _log_masking:
            return
        _log_masking = True
    make = logging.getLogRecordFactory()

    def masked(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        known = known_secrets()
        if not len(known):
            return record
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: let the handler report it as usual
            return record
        record.msg, record.args = known.mask(message), None
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = known.mask(text)
        return record

    logging.setLogRecordFactory(masked)


def secret_env_names(value: Any) -> list[str]:
    """The environment variables a configuration value names as holding secrets: every string
    field `*_env` whose stem names a secret (`password_env`, `token_env`, `secret_env`,
    `client_secret_env`, `api_key_env`) and every `from_env` (MCP credentials), found in
    pydantic models, dataclasses, mappings and lists."""
    found: dict[str, None] = {}
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            fields: Iterable[tuple[Any, Any]] = item.items()
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
            continue
        elif hasattr(item, "model_dump") or hasattr(item, "__dataclass_fields__"):
            names = getattr(type(item), "model_fields", None) or getattr(
                item, "__dataclass_fields__", {}
            )
            fields = ((name, getattr(item, name, None)) for name in names)
        else:
            continue
        for key, inner in fields:
            if isinstance(key, str) and isinstance(inner, str) and _names_secret_env(key):
                found[inner] = None
            elif not isinstance(inner, str | int | float | bool) and inner is not None:
                stack.append(inner)
    return list(found)


def _names_secret_env(field: str) -> bool:
    if field == "from_env":
        return True
    return field.endswith("_env") and is_secret_key(field.removesuffix("_env"))


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
        """`text` with this credential masked, the known secrets replaced by their
        placeholders, and anything else that looks like a credential masked."""
        if self._value and self._value in text:
            text = text.replace(self._value, REDACTED)
        return mask_shapes(known_secrets().mask(text))

    def __repr__(self) -> str:
        return f"Secret('{REDACTED}')"

    __str__ = __repr__


def register_secrets(config: Any, environ: Mapping[str, str] | None = None) -> list[str]:
    """Register the secrets `config` names with the process's known secrets: every `*_env`
    setting that names a secret (`password_env`, `token_env`, `secret_env`,
    `client_secret_env`, `private_key_env`, `alerts_webhook_secret_env`, MCP credentials'
    `from_env`, the MCP token files' `token_key_env`) and the values of MCP servers' `env`
    and `headers` entries under secret-like names. Returns the variables' names. (Here, not in
    `heron.config.build`, which re-exports it: `heron serve` registers them before it listens,
    without importing the agent.)"""
    known = known_secrets()
    names = secret_env_names(config)
    known.add_env(names, environ)
    for server, cfg in config.mcp.servers.items():
        for key, value in [*cfg.env.items(), *cfg.headers.items()]:
            if is_secret_key(key):
                known.add(re.sub(r"[^A-Za-z0-9_.-]", "_", f"mcp.{server}.{key}"), value)
    return names
