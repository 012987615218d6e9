"""The one limit on data from outside, and the one check of it where the data enters.

Everything that comes from outside heron is hostile until checked: tool-call arguments from a
model, tool results, webhook bodies, MCP payloads, bus events, file names and process output.
Each is checked once, where it enters, against one `InputLimits` (nesting depth and size):

- `parse_json` reads JSON text (str or bytes) without ever recursing past the limit: the
  nesting depth is measured iteratively on the raw text *before* `json.loads` runs, so a body
  nested 100,000 levels deep is refused in microseconds instead of ending in `RecursionError`.
- `check_value` walks an already built JSON-like value (arguments a Python caller handed in, a
  tool's structured data) iteratively, with the same rules.

Both refuse, with an `InputRejected` naming the place (`filter.tags[2]`) and the rule:
nesting deeper than `max_depth`; more than `max_bytes` of JSON; a number that is not finite
as a JSON Schema number (NaN, ±Infinity, or a magnitude no IEEE 754 double holds, such as
10^400 or 1e400); a string or key holding a lone UTF-16 surrogate (not Unicode text); a value
that is not JSON at all. After the check, code may recurse over the value freely (validation,
redaction, canonical JSON, event serialisation): it is at most `max_depth` levels deep.

Text that heron shows and stores but does not parse (tool output, file names, process output,
model text) is never refused: `clean_text` gives it the documented replacement for what is not
Unicode — an undecodable byte kept by Python's `surrogateescape` (U+DC80–U+DCFF) becomes
`\\x` and its two hex digits (`\\xff`), any other lone surrogate its `\\u` escape
(`\\ud800`) — exactly what `bytes.decode("utf-8", "backslashreplace")` shows for the same
bytes (docs/security.md, "Bad input").

The limits are process-wide, like the interpreter's recursion limit they protect; the defaults
below hold unless `[limits]` in heron.toml (or `set_input_limits`) changes them.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from heron.errors import HeronError

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_DEPTH_CEILING",
    "InputLimits",
    "InputRejected",
    "check_value",
    "clean_text",
    "clean_value",
    "describe_number",
    "format_path",
    "has_lone_surrogate",
    "input_limits",
    "is_finite_number",
    "model_json",
    "parse_json",
    "set_input_limits",
]

MAX_DEPTH_CEILING: Final = 200
"""The highest `max_depth` heron accepts: well inside what the recursive code after the check
(jsonschema, pydantic, `json.dumps`, the scrubbers) handles under Python's default recursion
limit of 1000."""


@dataclass(frozen=True, kw_only=True, slots=True)
class InputLimits:
    """How deep and how large one piece of outside data may be."""

    max_depth: int = 64
    """Containers (objects and arrays) nested inside each other; `{"a": [1]}` is 2 deep."""
    max_bytes: int = 16 * 1024 * 1024
    """UTF-8 bytes of one piece of JSON (tool arguments, a webhook body, a tool's structured
    data): above every tool's own limit (`write_file` takes 5 MB of content, which JSON
    escaping may double), so it stops only what no tool could use. A webhook listener's own
    body limit (`max_body`, 1 MiB) is smaller and applies first."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_depth <= MAX_DEPTH_CEILING:
            raise ValueError(f"max_depth must be 1..{MAX_DEPTH_CEILING}, got {self.max_depth}")
        if self.max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, got {self.max_bytes}")


DEFAULT_LIMITS: Final = InputLimits()

_current: InputLimits = DEFAULT_LIMITS


def input_limits() -> InputLimits:
    """The limits in force (the defaults unless `set_input_limits` changed them)."""
    return _current


def set_input_limits(limits: InputLimits) -> InputLimits:
    """Make `limits` the process-wide limits; returns the previous ones (to restore them)."""
    global _current
    previous, _current = _current, limits
    return previous


RejectKind = Literal["size", "depth", "number", "text", "type", "syntax"]


class InputRejected(HeronError, ValueError):
    """Outside data broke a rule of `InputLimits` or is not JSON; nothing was taken in.

    `problem` is one line for the sender (the model reads it, a webhook sender gets it in the
    4xx body): `where: what`, worded like an argument validation error.
    """

    def __init__(self, kind: RejectKind, path: Sequence[str | int], message: str) -> None:
        self.kind: RejectKind = kind
        self.path = tuple(path)
        self.message = message
        """The rule that was broken, without the place."""
        self.problem = self.problem_at("arguments")
        super().__init__(self.problem)

    def problem_at(self, root: str) -> str:
        """`problem`, naming the whole value `root` (`body`) instead of `arguments`."""
        # A key may hold the very surrogate refused: the problem itself must be clean text.
        return f"{clean_text(format_path(self.path)) if self.path else root}: {self.message}"


def format_path(path: Sequence[str | int]) -> str:
    """`("filter", "tags", 2)` -> `filter.tags[2]`; the empty path is the arguments object."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "arguments"


# -- numbers --------------------------------------------------------------------------------

_MAX_FINITE_INT: Final = int(sys.float_info.max)
_MAX_DIGITS: Final = len(str(_MAX_FINITE_INT))


@dataclass(frozen=True, slots=True)
class _NotFinite:
    """A number in JSON text that is not a finite double (`NaN`, `1e400`, a 400-digit integer);
    kept as written so the refusal can quote it."""

    text: str


def is_finite_number(value: object) -> bool:
    """True for an int or float (not bool) that a finite IEEE 754 double can hold."""
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int):
        return -_MAX_FINITE_INT <= value <= _MAX_FINITE_INT
    return False


def describe_number(value: object) -> str:
    """How a refusal names a number: `NaN`, `-Infinity`, `integer 10000…0 (401 digits)`."""
    if isinstance(value, _NotFinite):
        text = value.text
        if text.lstrip("-").isdigit():
            return f"integer of {len(text.lstrip('-'))} digits"
        return text if len(text) <= 24 else f"{text[:12]}…{text[-4:]} ({len(text)} characters)"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return f"number {value!r}"
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) < 10**24:
            return f"integer {value}"
        return f"integer of about {int(abs(value).bit_length() * 0.30103) + 1} digits"
    return type(value).__name__


def _parse_int(text: str) -> int | _NotFinite:
    # `int()` itself refuses more than 4300 digits with a ValueError; stop far earlier.
    if len(text) - text.startswith("-") > _MAX_DIGITS:
        return _NotFinite(text)
    value = int(text)
    return value if -_MAX_FINITE_INT <= value <= _MAX_FINITE_INT else _NotFinite(text)


def _parse_float(text: str) -> float | _NotFinite:
    value = float(text)
    return value if math.isfinite(value) else _NotFinite(text)


def _parse_constant(text: str) -> _NotFinite:
    return _NotFinite(text)  # NaN, Infinity, -Infinity: accepted by Python, not by JSON


# -- text -----------------------------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogate(text: str) -> bool:
    """True when `text` holds a surrogate code point, so it is not encodable as UTF-8."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _replace_surrogate(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    # U+DC80..U+DCFF is how `surrogateescape` keeps an undecodable byte 0x80..0xFF.
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def clean_text(text: str) -> str:
    """`text`, made encodable as UTF-8 with the documented replacement (see the module
    docstring); valid text comes back unchanged (the same object). A surrogate pair split
    into two code points is joined into the character it encodes."""
    if not has_lone_surrogate(text):
        return text
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return _SURROGATE.sub(_replace_surrogate, joined)


def clean_value(value: Any) -> Any:
    """A copy of a JSON-like value with every string and key passed through `clean_text`
    (the value itself when nothing needed cleaning). For values within the limits only."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, Mapping):
        items = [(clean_value(k), clean_value(v)) for k, v in value.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        cleaned = [clean_value(item) for item in value]
        if all(a is b for a, b in zip(cleaned, value, strict=True)):
            return value
        return type(value)(cleaned) if isinstance(value, tuple) else cleaned
    return value


def model_json(model: BaseModel, **options: Any) -> str:
    """`model.model_dump_json(**options)`, or — when the model holds text that is not Unicode,
    which JSON cannot carry — the same JSON with the documented replacement (`clean_text`).

    The net under every store and rendering surface (sessions, the bus, JSON-lines events):
    data is cleaned where it enters, so this fallback only catches a value built in Python that
    skipped the entry checks, and it never makes a record unstorable.
    """
    try:
        return model.model_dump_json(**options)
    except PydanticSerializationError:
        dumped = model.model_dump(mode="json", **options)
        return json.dumps(clean_value(dumped), ensure_ascii=False, separators=(",", ":"))


# -- the checks -----------------------------------------------------------------------------

# A JSON string literal (escapes honoured) and everything that is not a bracket.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _depth_of_text(text: str) -> int:
    """The deepest nesting of brackets outside string literals, without recursion."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    depth = deepest = 0
    for char in brackets:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _too_deep(limits: InputLimits) -> str:
    return f"nested more than {limits.max_depth} levels deep (the limit of heron's input checks)"


def _too_large(size: int, limits: InputLimits) -> str:
    return f"{size:,} bytes or more of JSON, over the limit of {limits.max_bytes:,}"


def parse_json(text: str | bytes, *, limits: InputLimits | None = None) -> Any:
    """Parse JSON text from outside, checking it against `limits` (default: the ones in force).

    Bytes must be UTF-8. Raises `InputRejected`: `size` (checked first, on the raw length),
    `depth` (measured on the raw text before parsing), `syntax` (not JSON, with the position),
    then whatever `check_value` finds in the parsed value (`number`, `text`).
    """
    limits = limits or _current
    if isinstance(text, bytes | bytearray):
        if len(text) > limits.max_bytes:
            raise InputRejected("size", (), _too_large(len(text), limits))
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            # JSON text is UTF-8 (RFC 8259): other bytes are not JSON at all.
            problem = f"not UTF-8 text (byte {exc.start} is invalid)"
            raise InputRejected("syntax", (), problem) from None
    elif len(text) * 4 > limits.max_bytes:  # else it fits whatever its characters are
        size = len(text) if len(text) > limits.max_bytes else _utf8_size(text)
        if size > limits.max_bytes:
            raise InputRejected("size", (), _too_large(size, limits))
    # A text with few brackets cannot be deep; skip the scan for the common small case.
    if (text.count("[") + text.count("{") > limits.max_depth) and _depth_of_text(
        text
    ) > limits.max_depth:
        raise InputRejected("depth", (), _too_deep(limits))
    odd: list[_NotFinite] = []

    def number(parse: Callable[[str], float | int | _NotFinite]) -> Callable[[str], Any]:
        def hook(raw: str) -> Any:
            parsed = parse(raw)
            if isinstance(parsed, _NotFinite):
                odd.append(parsed)
            return parsed

        return hook

    try:
        value = json.loads(
            text,
            parse_int=number(_parse_int),
            parse_float=number(_parse_float),
            parse_constant=number(_parse_constant),
        )
    except json.JSONDecodeError as exc:
        raise InputRejected(
            "syntax", (), f"invalid JSON: {exc.msg} at position {exc.pos}"
        ) from None
    except RecursionError:  # a bracket hidden from the scan; never expected
        raise InputRejected("depth", (), _too_deep(limits)) from None
    # The walk only runs to say where a refused number or string sits: most text has none.
    if odd or has_lone_surrogate(text) or _SURROGATE_ESCAPE.search(text):
        check_value(value, limits=limits, measured=True)
    return value


_Trail = tuple[Any, str | int] | None
"""Where a value sits: `(parent trail, key or index)`, built into a path only for a refusal."""


def _path(trail: _Trail) -> tuple[str | int, ...]:
    parts: list[str | int] = []
    while trail is not None:
        trail, part = trail
        parts.append(part)
    return tuple(reversed(parts))


def _leaf_size(item: Any, trail: _Trail, strict_text: bool = True) -> int:
    """The JSON size of a scalar, or -1 for a container; raises for what is refused."""
    kind = type(item)
    if kind is str:
        if strict_text and not item.isascii() and has_lone_surrogate(item):
            raise InputRejected("text", _path(trail), _surrogate_problem(item))
        return len(item) + 3
    if kind is int or kind is float:
        if not is_finite_number(item):
            problem = f"expected a finite number, got {describe_number(item)}"
            raise InputRejected("number", _path(trail), problem)
        return 8
    if kind is bool or item is None:
        return 5
    if kind is dict or kind is list:
        return -1
    if isinstance(item, _NotFinite):
        problem = f"expected a finite number, got {describe_number(item)}"
        raise InputRejected("number", _path(trail), problem)
    if isinstance(item, Mapping | list | tuple):
        return -1
    if isinstance(item, str | int | float):  # subclasses (an enum member, a numpy scalar)
        scalar = str(item) if isinstance(item, str) else float(item)
        return _leaf_size(scalar, trail, strict_text)
    problem = f"expected a JSON value, got {type(item).__name__}"
    raise InputRejected("type", _path(trail), problem)


def check_value(
    value: Any,
    *,
    limits: InputLimits | None = None,
    measured: bool = False,
    strict_text: bool = True,
) -> bool:
    """Check a JSON-like value against `limits` without recursion; raises `InputRejected`.

    Objects are mappings with string keys, arrays lists or tuples; anything else is refused
    (`type`). The size is the length of the value's compact JSON, estimated from its strings
    and scalars (`measured`: the caller measured the text already, only the rest is checked).
    `strict_text=False` lets lone surrogates pass, for a caller that gives them the documented
    replacement (`clean_value`) instead of refusing them: the result says whether there were
    any (so the copy is made only then).
    """
    limits = limits or _current
    budget = None if measured else limits.max_bytes
    dirty = False
    if isinstance(value, str):
        dirty = _odd_text(value, None, strict_text)
    size = _leaf_size(value, None, strict_text)
    if size >= 0:
        if budget is not None and size > budget:
            raise InputRejected("size", (), _too_large(size, limits))
        return dirty
    size = 0
    # Containers still to look into, with their depth: a stack, never the Python call stack.
    stack: list[tuple[Any, int, _Trail]] = [(value, 1, None)]
    while stack:
        container, depth, trail = stack.pop()
        if depth > limits.max_depth:
            raise InputRejected("depth", _path(trail), _too_deep(limits))
        kind = type(container)
        is_object = kind is dict or (kind is not list and isinstance(container, Mapping))
        children: Any = container.items() if is_object else enumerate(container)
        size += 2
        for key, child in children:
            if is_object:
                if not isinstance(key, str):
                    problem = f"object keys must be strings, got {type(key).__name__}"
                    raise InputRejected("type", _path(trail), problem)
                size += len(key) + 4
                if not key.isascii():
                    dirty = _odd_text(key, (trail, key), strict_text) or dirty
            child_kind = type(child)
            if child_kind is str:  # the common cases, inline
                size += len(child) + 3
                if not child.isascii():
                    dirty = _odd_text(child, (trail, key), strict_text) or dirty
                continue
            if child_kind is int and -_MAX_FINITE_INT <= child <= _MAX_FINITE_INT:
                size += 8
                continue
            at = (trail, key)
            leaf = _leaf_size(child, at, strict_text)
            if leaf < 0:
                stack.append((child, depth + 1, at))
            else:
                size += leaf
                if isinstance(child, str):  # a str subclass
                    dirty = _odd_text(child, at, strict_text) or dirty
        if budget is not None and size > budget:
            raise InputRejected("size", (), _too_large(size, limits))
    return dirty


def _odd_text(text: str, trail: _Trail, strict: bool) -> bool:
    """Whether `text` holds a lone surrogate; refused (`InputRejected`) when `strict`."""
    if not has_lone_surrogate(text):
        return False
    if strict:
        raise InputRejected("text", _path(trail), _surrogate_problem(text))
    return True


def _surrogate_problem(text: str) -> str:
    match = _SURROGATE.search(text)
    code = ord(match.group(0)) if match else 0xD800
    return (
        f"text holds a lone surrogate (\\u{code:04x}), which is not Unicode; send the character "
        "itself or a valid surrogate pair"
    )
