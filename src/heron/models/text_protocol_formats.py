"""How `heron.models.text_protocol` reads each tool-call format it accepts.

The scanner in `text_protocol` finds where a block starts and leaves out examples (code) and
declarations (`<tools>`); the readers here decide what one block holds: a whole reply that is
JSON, a tag block with a JSON or XML-style body, an `<invoke>` element, or a ```` ```tool_call ````
fence. Each returns the calls it found and, for a broken attempt, what is wrong with it. See the
`text_protocol` module docstring for the formats and how far each one is trusted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NoReturn


@dataclass(frozen=True, kw_only=True, slots=True)
class TextToolCall:
    """One tool call found in a model's text (re-exported by `heron.models.text_protocol`)."""

    name: str
    """Canonical known tool name, or the name as written for an unknown tool in a tag block."""
    arguments: dict[str, Any]
    call_id: str | None = None
    """The payload's own id (`id` / `call_id` / `tool_call_id`), when it carried one."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TextParseResult:
    """What a text-protocol reply contained (re-exported by `heron.models.text_protocol`)."""

    text: str
    """Visible text: the reply without tool-call blocks and reasoning, stripped."""
    calls: tuple[TextToolCall, ...]
    """Calls in the order they were written."""
    issue: str | None
    """Why a tool-call attempt could not be parsed; None when nothing looked broken."""


def _reject_constant(name: str) -> NoReturn:
    # NaN / Infinity are not JSON; accepting them would turn a parameter value "NaN" into a float.
    raise ValueError(f"{name} is not valid JSON")


_JSON: Final = json.JSONDecoder(parse_constant=_reject_constant)

_TAG_NAMES: Final = r"tool_calls?|toolcall|tool-call|function_calls?|minimax:tool_?call"
# One scanner for everything that starts with "<": block openers, <invoke> and orphan close tags.
TAG_RE: Final = re.compile(
    rf"<(?:(?P<close>/)?(?P<tag>{_TAG_NAMES})(?:\s[^<>]*)?|invoke\b(?P<inv>[^<>]*))>", re.I
)
_OPEN_RE: Final = re.compile(rf"<(?:{_TAG_NAMES})(?:\s[^<>]*)?>|<invoke\b", re.I)
_CLOSE_RE: Final = re.compile(rf"</(?:{_TAG_NAMES})\s*>", re.I)
# After a JSON body: an optional fence close and stray closing brackets (a common model slip).
_AFTER_JSON_CLOSE_RE: Final = re.compile(rf"\s*(?:```[ \t]*)?[\s}}\]]*</(?:{_TAG_NAMES})\s*>", re.I)
_JSON_LEAD_RE: Final = re.compile(r"\s*(?:```[\w-]*[ \t]*\r?\n)?\s*")
_JSON_SEP_RE: Final = re.compile(r"[\s,]*")
_WS_RE: Final = re.compile(r"\s*")
_FENCE_AFTER_JSON_RE: Final = re.compile(r"\s*```[ \t]*(?:\r?\n|\Z)")
_FENCE_END_RE: Final = re.compile(r"^[ \t]*```[ \t]*$\r?\n?", re.M)

_NAME_ATTR_RE: Final = re.compile(r"""\bname\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_INVOKE_END_RE: Final = re.compile(r"</invoke\s*>", re.I)
_PARAM_RE: Final = re.compile(
    r"""<parameter\s+name\s*=\s*["']([^"']+)["']\s*>(.*?)</parameter\s*>""", re.I | re.S
)
_QWEN_FUNCTION_RE: Final = re.compile(r"<function=([^>\s]+)\s*>(.*?)(?:</function\s*>|\Z)", re.S)
_QWEN_PARAM_RE: Final = re.compile(
    r"<parameter=([^>\s]+)\s*>(.*?)(?:</parameter\s*>|(?=<parameter=)|\Z)", re.S
)
_GLM_NAME_RE: Final = re.compile(r"\s*([\w.:-]+)\s*")
# Neither group may run into the next pair, which keeps a malformed body from backtracking badly.
_GLM_PAIR_RE: Final = re.compile(
    r"<arg_key>([^<]*)</arg_key>\s*<arg_value>((?:(?!<arg_key>).)*?)</arg_value>\s*", re.S
)

_ENVELOPE_KEY_RE: Final = re.compile(r'"tool_calls"\s*:')
_NAME_KEY_RE: Final = re.compile(r'"name"\s*:')
_ARGUMENTS_KEY_RE: Final = re.compile(r'"(?:arguments|parameters)"\s*:')

_NAME_PREFIXES: Final = ("functions.", "default_api.")


class ToolNames:
    """Resolves a written tool name to its canonical known name."""

    __slots__ = ("_folded", "_known")

    def __init__(self, known: Collection[str]) -> None:
        self._known = known
        self._folded: dict[str, str] | None = None

    def resolve(self, raw: str) -> str | None:
        """The known name `raw` stands for (matched case-insensitively, also without a
        `functions.` or `default_api.` prefix), or None."""
        name = raw.strip()
        if name in self._known:
            return name
        if self._folded is None:
            self._folded = {known.casefold(): known for known in self._known}
        folded = name.casefold()
        found = self._folded.get(folded)
        if found is not None:
            return found
        for prefix in _NAME_PREFIXES:
            if folded.startswith(prefix):
                return self._folded.get(folded[len(prefix) :])
        return None


# A block parser's verdict: (end of the consumed span, calls, issue); None leaves the text alone.
Block = tuple[int, list[TextToolCall], str | None]


def parse_whole_json(text: str, names: ToolNames) -> TextParseResult | None:
    """The reply read as one JSON value (a `tool_calls` envelope, a call object or an array of
    them), or None when it is not a call in that form."""
    if not text or text[0] not in "{[" or text[-1] not in "}]":
        return None
    try:
        value = _JSON.decode(text)
    except (ValueError, RecursionError) as exc:
        if text[0] == "{" and (
            _ENVELOPE_KEY_RE.search(text)
            or (_NAME_KEY_RE.search(text) and _ARGUMENTS_KEY_RE.search(text))
        ):
            issue = f"reply looks like a JSON tool call but is invalid JSON: {_json_error(exc, 0)}"
            return TextParseResult(text="", calls=(), issue=issue)
        return None
    if isinstance(value, dict) and "tool_calls" in value:
        items = value["tool_calls"]
        if items is not None and not isinstance(items, list):
            return None
        calls, issues = _calls_from_values(items or [], names, explicit=True)
        content = value.get("content")
        visible = content.strip() if isinstance(content, str) else ""
        return TextParseResult(text=visible, calls=tuple(calls), issue=join_issues(issues))
    # A bare object or array is only a call when every item is a well-formed call to a known tool;
    # anything else is an ordinary JSON answer.
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        if not isinstance(item, dict) or not _has_call_shape(item):
            return None
        call = _call_from_object(item, names, explicit=False)
        if not isinstance(call, TextToolCall):
            return None
        calls.append(call)
    if not calls:
        return None
    return TextParseResult(text="", calls=tuple(calls), issue=None)


def _has_call_shape(obj: Mapping[str, Any]) -> bool:
    if isinstance(obj.get("function"), dict):
        return True
    return "name" in obj and ("arguments" in obj or "parameters" in obj)


def tag_block(text: str, match: re.Match[str], names: ToolNames) -> Block | None:
    """The block that `TAG_RE` `match` opens: a tag block, an `<invoke>` element or stray
    close-tag debris."""
    if match.group("close"):
        # A close tag with no opener: debris from a wrapper or a recovered block.
        return match.end(), [], None
    if match.group("tag") is None:
        return _invoke_block(text, match, names)
    label = f"<{match.group('tag').lower()}>"
    body_start = match.end()
    inner = TAG_RE.match(text, _skip(_WS_RE, text, body_start))
    if inner is not None and not inner.group("close"):
        # A wrapper around further blocks (`<tool_calls><tool_call>…`, `<function_calls><invoke…`):
        # drop the opener and let the loop handle what is inside.
        return body_start, [], None
    values, error, json_end = _read_json_values(text, body_start)
    if values and error is None:
        calls, issues = _calls_from_values(values, names, explicit=True)
        if not calls and not issues:
            issues = ["no tool call in its JSON"]
        close = _AFTER_JSON_CLOSE_RE.match(text, json_end)
        # Without a close tag the JSON itself delimits the block (a truncated or sloppy reply).
        end = close.end() if close is not None else json_end
        return end, calls, join_issues([f"{label} block with {issue}" for issue in issues])
    body_end, end = _delimit_body(text, body_start)
    body = text[body_start:body_end]
    if not values:
        xml_calls = _xmlish_calls(body, names)
        if xml_calls:
            return end, xml_calls, None
    calls, issues = _calls_from_values(values, names, explicit=True)
    if error is not None:
        issue = f"{label} block with invalid JSON: {error}"
    elif not body.strip():
        issue = f"empty {label} block"
    else:
        issue = f"{label} block does not contain a JSON tool call"
    return end, calls, join_issues([issue, *(f"{label} block with {i}" for i in issues)])


def _delimit_body(text: str, body_start: int) -> tuple[int, int]:
    """(body end, block end) for a body that is not clean JSON: up to a close tag, else the next
    opener, else the end of the text."""
    opener = _OPEN_RE.search(text, body_start)
    limit = opener.start() if opener is not None else len(text)
    close = _CLOSE_RE.search(text, body_start, limit)
    if close is not None:
        return close.start(), close.end()
    return limit, limit


def _read_json_values(text: str, start: int) -> tuple[list[Any], str | None, int]:
    """Decode consecutive JSON objects/arrays from `start`: (values, error, end of the last one)."""
    pos = _skip(_JSON_LEAD_RE, text, start)
    values: list[Any] = []
    end = pos
    while pos < len(text) and text[pos] in "{[":
        try:
            value, end = _JSON.raw_decode(text, pos)
        except (ValueError, RecursionError) as exc:
            return values, _json_error(exc, start), end
        values.append(value)
        pos = _skip(_JSON_SEP_RE, text, end)
    return values, None, end


def _skip(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """Position after `pattern` (one that always matches, such as optional whitespace) at `pos`."""
    found = pattern.match(text, pos)
    return found.end() if found is not None else pos


def _json_error(exc: ValueError | RecursionError, offset: int) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at character {exc.pos - offset}"
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    return str(exc)


def _calls_from_values(
    values: Sequence[Any], names: ToolNames, *, explicit: bool
) -> tuple[list[TextToolCall], list[str]]:
    """Calls from decoded JSON values; unknown names are dropped unless `explicit`."""
    calls: list[TextToolCall] = []
    issues: list[str] = []
    for value in values:
        if isinstance(value, list):
            nested_calls, nested_issues = _calls_from_values(value, names, explicit=explicit)
            calls.extend(nested_calls)
            issues.extend(nested_issues)
        elif isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
            nested_calls, nested_issues = _calls_from_values(
                value["tool_calls"], names, explicit=explicit
            )
            calls.extend(nested_calls)
            issues.extend(nested_issues)
        elif isinstance(value, dict):
            outcome = _call_from_object(value, names, explicit=explicit)
            if isinstance(outcome, TextToolCall):
                calls.append(outcome)
            elif outcome is not None:
                issues.append(outcome)
        else:
            issues.append("a JSON value that is not a call object")
    return calls, issues


def _call_from_object(
    obj: Mapping[str, Any], names: ToolNames, *, explicit: bool
) -> TextToolCall | str | None:
    """A call, a description of what is wrong with it, or None for a well-formed call to a tool
    that is unknown (only when not `explicit`)."""
    function = obj.get("function")
    if isinstance(function, dict):
        raw_name = function.get("name")
        raw_args = function.get("arguments", function.get("parameters"))
        id_sources: tuple[Any, ...] = (
            obj.get("id"),
            obj.get("call_id"),
            obj.get("tool_call_id"),
            function.get("id"),
        )
    else:
        raw_name = obj.get("name")
        if "description" in obj and "arguments" not in obj:
            return "a tool declaration instead of a call"
        raw_args = obj["arguments"] if "arguments" in obj else obj.get("parameters")
        id_sources = (obj.get("id"), obj.get("call_id"), obj.get("tool_call_id"))
    if not isinstance(raw_name, str) or not raw_name.strip():
        return "a call without a tool name"
    name = names.resolve(raw_name)
    if name is None:
        if not explicit:
            return None
        name = raw_name.strip()
    arguments = _decode_arguments(raw_args)
    if arguments is None:
        return f"arguments for {name!r} that are not a JSON object"
    call_id = next((i for i in id_sources if isinstance(i, str) and i.strip()), None)
    return TextToolCall(name=name, arguments=arguments, call_id=call_id)


def _decode_arguments(raw: Any) -> dict[str, Any] | None:
    """Arguments as an object; JSON strings are decoded, double-encoded ones unwrapped."""
    value = raw
    for _ in range(3):
        if value is None:
            return {}
        if isinstance(value, dict):
            return value
        if not isinstance(value, str):
            return None
        if not value.strip():
            return {}
        try:
            value = _JSON.decode(value.strip())
        except (ValueError, RecursionError):
            return None
    return None


def _invoke_block(text: str, match: re.Match[str], names: ToolNames) -> Block | None:
    attr = _NAME_ATTR_RE.search(match.group("inv"))
    if attr is None:
        return None
    name = names.resolve(attr.group(1) if attr.group(1) is not None else attr.group(2))
    if name is None:
        return None
    close = _INVOKE_END_RE.search(text, match.end())
    if close is None:
        return len(text), [], f'<invoke name="{name}"> element without </invoke>'
    body = text[match.end() : close.start()]
    arguments = {key: _decode_value(value) for key, value in _PARAM_RE.findall(body)}
    return close.end(), [TextToolCall(name=name, arguments=arguments)], None


def _xmlish_calls(body: str, names: ToolNames) -> list[TextToolCall]:
    """Calls from XML-style bodies inside a tool-call tag (Qwen3-Coder and GLM conventions)."""
    if "<function=" in body:
        return [
            TextToolCall(
                name=names.resolve(raw) or raw,
                arguments={k: _decode_value(v) for k, v in _QWEN_PARAM_RE.findall(params)},
            )
            for raw, params in _QWEN_FUNCTION_RE.findall(body)
        ]
    head = _GLM_NAME_RE.match(body)
    if head is None:
        return []
    arguments: dict[str, Any] = {}
    pos = head.end()
    while pos < len(body):
        pair = _GLM_PAIR_RE.match(body, pos)
        if pair is None:
            return []
        arguments[pair.group(1).strip()] = _decode_value(pair.group(2))
        pos = pair.end()
    raw_name = head.group(1)
    name = names.resolve(raw_name)
    if name is None and not arguments:
        # A lone unknown word in a tag is more likely junk than a call to a missing tool.
        return []
    return [TextToolCall(name=name or raw_name, arguments=arguments)]


def _decode_value(raw: str) -> Any:
    """An XML parameter value: JSON when it parses, else the text without its framing newlines."""
    stripped = raw.strip()
    if stripped:
        try:
            return _JSON.decode(stripped)
        except (ValueError, RecursionError):
            pass
    value = raw[1:] if raw.startswith("\n") else raw
    return value[:-1] if value.endswith("\n") else value


def fence_block(text: str, match: re.Match[str], names: ToolNames) -> Block | None:
    """The ```` ```tool_call ```` fence whose opening line is `match`; None when its JSON holds
    no call to a known tool."""
    label = f"```{match.group('label').lower()} fence"
    body_start = match.end()
    values, error, json_end = _read_json_values(text, body_start)
    if values and error is None:
        calls, issues = _calls_from_values(values, names, explicit=False)
        if not calls and not issues:
            return None
        close = _FENCE_AFTER_JSON_RE.match(text, json_end)
        end = close.end() if close is not None else json_end
        return end, calls, join_issues([f"{label} with {issue}" for issue in issues])
    close = _FENCE_END_RE.search(text, body_start)
    body_end, end = (close.start(), close.end()) if close is not None else (len(text), len(text))
    if error is not None:
        issue = f"{label} with invalid JSON: {error}"
    elif not text[body_start:body_end].strip():
        issue = f"empty {label}"
    else:
        issue = f"{label} without a JSON tool call"
    return end, [], issue


def join_issues(issues: Sequence[str]) -> str | None:
    """The issues as one message, each once, in order; None when there are none."""
    return "; ".join(dict.fromkeys(issues)) if issues else None
