"""Text tool-call protocol: prompt, parser and history rendering for models without native tools.

Such a model is told (by `render_tool_protocol_prompt`) to write
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks in its reply. Models trained on
other conventions drift from that, so `parse_text_tool_calls` accepts a family of formats:

* the whole reply as JSON: an OpenAI-style `{"content", "tool_calls": [...]}` envelope, a single
  `{"name", "arguments"|"parameters"}` object, or an array of such objects;
* tag blocks `<tool_call>`, `<tool_calls>`, `<toolcall>`, `<tool-call>`, `<function_call>`,
  `<function_calls>` and `<minimax:tool_call>` with a JSON body (also Qwen3-Coder
  `<function=name><parameter=key>` and GLM `<arg_key>/<arg_value>` bodies);
* attribute XML `<invoke name="x"><parameter name="k">v</parameter></invoke>`;
* ```` ```tool_call ```` fences with a JSON body.

Trust is graded by how explicit the format is. Tag blocks and the `tool_calls` envelope are
unambiguous protocol, so a call to an unknown tool is still returned and the engine answers it
"unknown tool", which teaches the model. Shape-only formats (a bare JSON object or array, fences,
attribute XML) are executed only when they name a known tool; otherwise they stay visible text.

Never executed: JSON in prose without tags, `<tools>` blocks (Hermes-style *declarations*), and
anything inside Markdown code (inline code spans and fences other than ```` ```tool_call ````),
because that is how models show examples. A reply that is nothing but one fenced block is the
exception: there is no prose to show an example in, so the block body is parsed.

When a block is clearly a call attempt but cannot be parsed, `TextParseResult.issue` says why.
Valid blocks in the same reply are still returned alongside the issue, so the caller decides
whether to run them or ask for a corrected reply. Broken blocks are removed from the visible text
either way, so protocol debris never reaches the user.
"""

from __future__ import annotations

import bisect
import json
import re
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NoReturn

MAX_MALFORMED_RETRIES: Final = 2
"""Corrective round trips allowed per turn before `MALFORMED_FALLBACK_ANSWER` is returned."""

PARSE_ERROR_FEEDBACK: Final[str] = (
    "[Tool call parse error]\n"
    "Your last reply looked like a tool call, but heron could not read it, so nothing was run. "
    'To call a tool, write <tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call> '
    "with valid JSON and a tool name from the list you were given. "
    "If no tool is needed, answer in plain language instead."
)
"""User message sent after a reply whose tool-call attempt could not be parsed."""

MALFORMED_FALLBACK_ANSWER: Final[str] = (
    "I could not finish this request: my attempts to use a tool kept coming out in a format "
    "that could not be read. Please try again, perhaps with a simpler request."
)
"""Final answer once `MAX_MALFORMED_RETRIES` corrective messages did not help."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TextToolCall:
    """One tool call found in a model's text."""

    name: str
    """Canonical known tool name, or the name as written for an unknown tool in a tag block."""
    arguments: dict[str, Any]
    call_id: str | None = None
    """The payload's own id (`id` / `call_id` / `tool_call_id`), when it carried one."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TextParseResult:
    """What a text-protocol reply contained."""

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

_THINK_RE: Final = re.compile(r"<(think|thinking)\s*>.*?</\1\s*>", re.I | re.S)
_THINK_CLOSE_RE: Final = re.compile(r"</think(?:ing)?\s*>", re.I)
_TRAILING_MARKERS: Final = ("<|eom|>", "<eom>", "<|eom_id|>", "<|eot_id|>", "<|im_end|>")

_TAG_NAMES: Final = r"tool_calls?|toolcall|tool-call|function_calls?|minimax:tool_?call"
# One scanner for everything that starts with "<": block openers, <invoke> and orphan close tags.
_TAG_RE: Final = re.compile(
    rf"<(?:(?P<close>/)?(?P<tag>{_TAG_NAMES})(?:\s[^<>]*)?|invoke\b(?P<inv>[^<>]*))>", re.I
)
_OPEN_RE: Final = re.compile(rf"<(?:{_TAG_NAMES})(?:\s[^<>]*)?>|<invoke\b", re.I)
_CLOSE_RE: Final = re.compile(rf"</(?:{_TAG_NAMES})\s*>", re.I)
# After a JSON body: an optional fence close and stray closing brackets (a common model slip).
_AFTER_JSON_CLOSE_RE: Final = re.compile(rf"\s*(?:```[ \t]*)?[\s}}\]]*</(?:{_TAG_NAMES})\s*>", re.I)
_JSON_LEAD_RE: Final = re.compile(r"\s*(?:```[\w-]*[ \t]*\r?\n)?\s*")
_JSON_SEP_RE: Final = re.compile(r"[\s,]*")
_WS_RE: Final = re.compile(r"\s*")

# Regexes here start with a literal so the engine can skip ahead; line starts are checked in code.
_FENCE_OPEN_RE: Final = re.compile(r"```[ \t]*(?P<label>tool[_-]?call)[ \t]*\r?\n", re.I)
_FENCE_AFTER_JSON_RE: Final = re.compile(r"\s*```[ \t]*(?:\r?\n|\Z)")
_FENCE_END_RE: Final = re.compile(r"^[ \t]*```[ \t]*$\r?\n?", re.M)
_SOLE_FENCE_RE: Final = re.compile(
    r"\A```[ \t]*(?:json|xml|tool[_-]?call)?[ \t]*\r?\n(?P<body>(?:(?!```).)*?)\r?\n?```\Z",
    re.I | re.S,
)

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

_BACKTICK_FENCE_RE: Final = re.compile(r"```(`*)([^\n]*)")
_TILDE_FENCE_RE: Final = re.compile(r"~~~(~*)([^\n]*)")
_TOOL_FENCE_INFO_RE: Final = re.compile(r"\s*tool[_-]?call\s*\Z", re.I)
_BACKTICK_RUN_RE: Final = re.compile(r"`+")
_TOOLS_DECL_RE: Final = re.compile(r"<tools\s*>.*?(?:</tools\s*>|\Z)", re.I | re.S)

_ENVELOPE_KEY_RE: Final = re.compile(r'"tool_calls"\s*:')
_NAME_KEY_RE: Final = re.compile(r'"name"\s*:')
_ARGUMENTS_KEY_RE: Final = re.compile(r'"(?:arguments|parameters)"\s*:')
_BLANK_LINES_RE: Final = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")

_NAME_PREFIXES: Final = ("functions.", "default_api.")


class _Names:
    """Resolves a written tool name to its canonical known name."""

    __slots__ = ("_folded", "_known")

    def __init__(self, known: Collection[str]) -> None:
        self._known = known
        self._folded: dict[str, str] | None = None

    def resolve(self, raw: str) -> str | None:
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
_Block = tuple[int, list[TextToolCall], str | None]


def parse_text_tool_calls(text: str, known_tools: Collection[str]) -> TextParseResult:
    """Extract tool calls from a text-protocol reply.

    `known_tools` are the tool names offered this iteration; names match case-insensitively and
    come back in their canonical spelling. See the module docstring for the accepted formats and
    what is deliberately never executed.
    """
    cleaned = _strip_reasoning(text)
    names = _Names(known_tools)
    result = _parse(cleaned, names)
    if not result.calls and result.issue is None:
        sole = _SOLE_FENCE_RE.match(cleaned)
        if sole is not None:
            inner = _parse(sole.group("body"), names)
            if inner.calls or inner.issue is not None:
                return inner
    return result


def _strip_reasoning(text: str) -> str:
    if "<" not in text:
        return text.strip()
    text = _THINK_RE.sub("", text)
    # Some chat templates put the opening <think> in the prompt, so the reply only has the close.
    orphan = _THINK_CLOSE_RE.search(text)
    if orphan is not None:
        text = text[orphan.end() :]
    text = text.strip()
    while True:
        marker = next((m for m in _TRAILING_MARKERS if text.endswith(m)), None)
        if marker is None:
            return text
        text = text[: -len(marker)].rstrip()


def _parse(text: str, names: _Names) -> TextParseResult:
    whole = _parse_whole_json(text, names)
    if whole is not None:
        return whole
    if "<" not in text and "```" not in text:
        return TextParseResult(text=text, calls=(), issue=None)
    return _scan(text, names)


def _parse_whole_json(text: str, names: _Names) -> TextParseResult | None:
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
        return TextParseResult(text=visible, calls=tuple(calls), issue=_join(issues))
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


def _scan(text: str, names: _Names) -> TextParseResult:
    has_fence = "```" in text
    masks: list[tuple[int, int]] | None = None
    inline_code = _InlineCode(text)
    pieces: list[str] = []
    calls: list[TextToolCall] = []
    issues: list[str] = []
    visible_from = 0
    pos = 0
    tag: re.Match[str] | None = None
    fence: re.Match[str] | None = None
    while True:
        # Each next match is kept until passed, so a far-away one is not searched for repeatedly.
        if tag is None or tag.start() < pos:
            tag = _TAG_RE.search(text, pos)
        if has_fence and (fence is None or fence.start() < pos):
            fence = _FENCE_OPEN_RE.search(text, pos)
            while fence is not None and not _at_line_start(text, fence.start()):
                fence = _FENCE_OPEN_RE.search(text, fence.end())
            has_fence = fence is not None
        match = tag if fence is None or (tag is not None and tag.start() < fence.start()) else fence
        if match is None:
            break
        if masks is None:
            masks = _masked_spans(text)
        masked_until = _mask_end(masks, match.start())
        if masked_until is not None:
            pos = max(masked_until, match.end())
            continue
        code_end = inline_code.span_end(match.start(), since=visible_from)
        if code_end is not None:
            pos = max(code_end, match.end())
            continue
        if match is fence:
            block = _fence_block(text, match, names)
        else:
            block = _tag_block(text, match, names)
        if block is None:
            pos = match.end()
            continue
        end, block_calls, issue = block
        pieces.append(text[visible_from : match.start()])
        visible_from = pos = end
        calls.extend(block_calls)
        if issue is not None:
            issues.append(issue)
    pieces.append(text[visible_from:])
    visible = _BLANK_LINES_RE.sub("\n\n", "".join(pieces)).strip()
    return TextParseResult(text=visible, calls=tuple(calls), issue=_join(issues))


def _masked_spans(text: str) -> list[tuple[int, int]]:
    """Spans whose tags are examples or declarations, never calls: code fences and <tools>."""
    spans = _code_fence_spans(text)
    if "<" in text:
        code = list(spans)
        inline_code = _InlineCode(text)
        spans.extend(
            m.span()
            for m in _TOOLS_DECL_RE.finditer(text)
            if _mask_end(code, m.start()) is None
            and inline_code.span_end(m.start(), since=0) is None
        )
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _code_fence_spans(text: str) -> list[tuple[int, int]]:
    """Markdown fenced code blocks other than ```` ```tool_call ```` fences; unclosed ones run to
    the end of the text, as in CommonMark."""
    marks: list[re.Match[str]] = []
    if "```" in text:
        marks.extend(_BACKTICK_FENCE_RE.finditer(text))
    if "~~~" in text:
        marks.extend(_TILDE_FENCE_RE.finditer(text))
    marks.sort(key=lambda m: m.start())
    spans: list[tuple[int, int]] = []
    opener: re.Match[str] | None = None
    for mark in marks:
        if not _at_line_start(text, mark.start()):
            continue
        if opener is None:
            if mark.group(0)[0] == "`" and "`" in mark.group(2):
                continue  # an inline code span, not a fence
            opener = mark
        elif (
            mark.group(0)[0] == opener.group(0)[0]
            and len(mark.group(1)) >= len(opener.group(1))
            and not mark.group(2).strip()
        ):
            if not _TOOL_FENCE_INFO_RE.match(opener.group(2)):
                spans.append((opener.start(), mark.end()))
            opener = None
    if opener is not None and not _TOOL_FENCE_INFO_RE.match(opener.group(2)):
        spans.append((opener.start(), len(text)))
    return spans


def _at_line_start(text: str, index: int) -> bool:
    line_start = text.rfind("\n", 0, index) + 1
    return not text[line_start:index].strip(" \t")


class _InlineCode:
    """Finds backtick code spans around tokens, which are examples rather than calls.

    Queries come in increasing position order, so backtick runs are counted incrementally and a
    long line full of code spans costs linear time.
    """

    __slots__ = ("_counted_to", "_inside", "_origin", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._origin = -1
        self._counted_to = 0
        self._inside = False

    def span_end(self, index: int, *, since: int) -> int | None:
        """End of the code span `index` sits in, or None. Backticks before `since` (the end of the
        previous block, whose JSON may hold some) don't count."""
        text = self._text
        origin = max(text.rfind("\n", 0, index) + 1, since)
        if origin != self._origin:
            self._origin, self._counted_to, self._inside = origin, origin, False
        runs = len(_BACKTICK_RUN_RE.findall(text, self._counted_to, index))
        self._counted_to = index
        self._inside ^= runs % 2 == 1
        if not self._inside:
            return None
        line_end = text.find("\n", index)
        closing = _BACKTICK_RUN_RE.search(text, index, len(text) if line_end == -1 else line_end)
        return closing.end() if closing is not None else None


def _mask_end(spans: Sequence[tuple[int, int]], index: int) -> int | None:
    """End of the span in sorted, disjoint `spans` that contains `index`, or None."""
    at = bisect.bisect_right(spans, (index, sys.maxsize)) - 1
    if at >= 0 and spans[at][0] <= index < spans[at][1]:
        return spans[at][1]
    return None


def _tag_block(text: str, match: re.Match[str], names: _Names) -> _Block | None:
    if match.group("close"):
        # A close tag with no opener: debris from a wrapper or a recovered block.
        return match.end(), [], None
    if match.group("tag") is None:
        return _invoke_block(text, match, names)
    label = f"<{match.group('tag').lower()}>"
    body_start = match.end()
    inner = _TAG_RE.match(text, _skip(_WS_RE, text, body_start))
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
        return end, calls, _join([f"{label} block with {issue}" for issue in issues])
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
    return end, calls, _join([issue, *(f"{label} block with {i}" for i in issues)])


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
    values: Sequence[Any], names: _Names, *, explicit: bool
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
    obj: Mapping[str, Any], names: _Names, *, explicit: bool
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


def _invoke_block(text: str, match: re.Match[str], names: _Names) -> _Block | None:
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


def _xmlish_calls(body: str, names: _Names) -> list[TextToolCall]:
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


def _fence_block(text: str, match: re.Match[str], names: _Names) -> _Block | None:
    label = f"```{match.group('label').lower()} fence"
    body_start = match.end()
    values, error, json_end = _read_json_values(text, body_start)
    if values and error is None:
        calls, issues = _calls_from_values(values, names, explicit=False)
        if not calls and not issues:
            return None
        close = _FENCE_AFTER_JSON_RE.match(text, json_end)
        end = close.end() if close is not None else json_end
        return end, calls, _join([f"{label} with {issue}" for issue in issues])
    close = _FENCE_END_RE.search(text, body_start)
    body_end, end = (close.start(), close.end()) if close is not None else (len(text), len(text))
    if error is not None:
        issue = f"{label} with invalid JSON: {error}"
    elif not text[body_start:body_end].strip():
        issue = f"empty {label}"
    else:
        issue = f"{label} without a JSON tool call"
    return end, [], issue


def _join(issues: Sequence[str]) -> str | None:
    return "; ".join(dict.fromkeys(issues)) if issues else None


def render_tool_protocol_prompt(tools: Sequence[Mapping[str, Any]]) -> str:
    """The system-prompt section that teaches a text-only model to call `tools`.

    Each tool is a `{"name", "description", "parameters"}` mapping (`ToolSpec.to_wire()`). Returns
    an empty string when there are no tools, since the protocol would only invite invented calls.
    """
    if not tools:
        return ""
    lines = [
        "## Tool calling protocol",
        "",
        "You can use the tools listed below. To call one, write a block like this in your reply:",
        "",
        "<tool_call>",
        '{"name": "<tool name>", "arguments": {"<parameter>": "<value>"}}',
        "</tool_call>",
        "",
        '- The body is one JSON object: "name" is a tool name from the list, spelled exactly, and '
        '"arguments" is an object that fits that tool\'s parameter schema ({} if it takes none).',
        "- Write one block per call. For several calls, write several blocks; they are handled in "
        "the order you write them.",
        "- Write blocks as plain text, not inside code fences.",
        "- After your calls, end your reply. The results arrive in the next message as "
        "<tool_result> blocks.",
        "- When you need no tool, answer in plain language without any <tool_call> block.",
        "",
        "### Available tools",
    ]
    for tool in tools:
        description = str(tool.get("description") or "").strip()
        schema = tool.get("parameters") or {"type": "object", "properties": {}}
        lines += ["", f"#### {tool['name']}"]
        if description:
            lines.append(description)
        lines.append(f"Parameters (JSON Schema): {_dumps(schema)}")
    return "\n".join(lines) + "\n"


def render_tool_results(results: Sequence[tuple[str, str, str, bool]]) -> str:
    """One user message carrying `(name, call_id, content, is_error)` results back to the model."""
    parts = ["[Tool results]\n"]
    for name, call_id, content, is_error in results:
        status = "error" if is_error else "ok"
        parts.append(
            f'<tool_result name="{_attr(name)}" id="{_attr(call_id)}" status="{status}">\n'
            f"{content}\n</tool_result>\n"
        )
    return "".join(parts)


def render_assistant_tool_calls(
    text: str, calls: Sequence[tuple[str, str, Mapping[str, Any]]]
) -> str:
    """An assistant turn as a text-protocol model would have written it: `text`, then one
    `<tool_call>` block per `(call_id, name, arguments)`. `parse_text_tool_calls` reads it back."""
    blocks = []
    for call_id, name, arguments in calls:
        payload: dict[str, Any] = {"name": name, "arguments": arguments}
        if call_id:
            payload["id"] = call_id
        blocks.append(f"<tool_call>\n{_dumps(payload)}\n</tool_call>")
    sections = [section for section in (text.strip(), "\n".join(blocks)) if section]
    return "\n\n".join(sections)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=_jsonable)


def _jsonable(value: Any) -> Any:
    # Specs and arguments are typed as Mapping, which json only serialises when it is a dict.
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _attr(value: str) -> str:
    return (
        value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")
    )
