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

Markdown fences are how models show examples, and also how some wrap their real calls
(```` ```xml ````, ```` ```json ```` or a bare ```` ``` ```` around `<tool_call>` blocks, after a
line of prose). A fenced block whose body is nothing but tool-call blocks is a wrapper: its calls
are read as if unfenced and the fence lines leave the visible text, so the raw protocol never
becomes the user's answer. Like ZeroClaw, heron keeps such blocks as examples (visible, not run)
when the prose around them says so ("for example", "e.g.", "for instance", 示例, 例如, …).

Never executed: JSON in prose without tags, `<tools>` blocks (Hermes-style *declarations*),
inline code spans, and fences whose body mixes tool-call blocks with anything else (code, prose),
because that is how models show examples. A reply that is nothing but one fenced block is parsed
as its body: there is no prose to show an example in.

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
from typing import Any, Final

from heron.models.text_protocol_formats import (
    TAG_RE,
    TextParseResult,
    TextToolCall,
    ToolNames,
    fence_block,
    join_issues,
    parse_whole_json,
    tag_block,
)

__all__ = [
    "MALFORMED_FALLBACK_ANSWER",
    "MAX_MALFORMED_RETRIES",
    "PARSE_ERROR_FEEDBACK",
    "TextParseResult",
    "TextToolCall",
    "parse_text_tool_calls",
    "render_assistant_tool_calls",
    "render_tool_protocol_prompt",
    "render_tool_results",
]

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

_THINK_RE: Final = re.compile(r"<(think|thinking)\s*>.*?</\1\s*>", re.I | re.S)
_THINK_CLOSE_RE: Final = re.compile(r"</think(?:ing)?\s*>", re.I)
_TRAILING_MARKERS: Final = ("<|eom|>", "<eom>", "<|eom_id|>", "<|eot_id|>", "<|im_end|>")

# Regexes here start with a literal so the engine can skip ahead; line starts are checked in code.
_FENCE_OPEN_RE: Final = re.compile(r"```[ \t]*(?P<label>tool[_-]?call)[ \t]*\r?\n", re.I)
_SOLE_FENCE_RE: Final = re.compile(
    r"\A```[ \t]*(?:json|xml|tool[_-]?call)?[ \t]*\r?\n(?P<body>(?:(?!```).)*?)\r?\n?```\Z",
    re.I | re.S,
)

_BACKTICK_FENCE_RE: Final = re.compile(r"```(`*)([^\n]*)")
_TILDE_FENCE_RE: Final = re.compile(r"~~~(~*)([^\n]*)")
_TOOL_FENCE_INFO_RE: Final = re.compile(r"\s*tool[_-]?call\s*\Z", re.I)
_BACKTICK_RUN_RE: Final = re.compile(r"`+")
_TOOLS_DECL_RE: Final = re.compile(r"<tools\s*>.*?(?:</tools\s*>|\Z)", re.I | re.S)

_BLANK_LINES_RE: Final = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")
# Prose that presents fenced protocol as an example (ZeroClaw's list, in English and Chinese).
# "sample" is left out: "read the sample data" is ordinary task prose. `example.py` is a name.
_EXAMPLE_RE: Final = re.compile(
    r"(?<![\w./-])(?:examples?|e\.g\.|for instance)(?![\w/-]|\.\w)|示例|例如|例子|比方说|譬如",
    re.I,
)


def parse_text_tool_calls(text: str, known_tools: Collection[str]) -> TextParseResult:
    """Extract tool calls from a text-protocol reply.

    `known_tools` are the tool names offered this iteration; names match case-insensitively and
    come back in their canonical spelling. See the module docstring for the accepted formats and
    what is deliberately never executed.
    """
    cleaned = _strip_reasoning(text)
    names = ToolNames(known_tools)
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


def _parse(text: str, names: ToolNames) -> TextParseResult:
    whole = parse_whole_json(text, names)
    if whole is not None:
        return whole
    if "<" not in text and "```" not in text:
        return TextParseResult(text=text, calls=(), issue=None)
    if "<" in text and ("```" in text or "~~~" in text):
        text = _unwrap_call_fences(text, names)
    return _scan(text, names)


def _unwrap_call_fences(text: str, names: ToolNames) -> str:
    """`text` without the fence lines around fenced blocks that hold nothing but tool-call
    blocks, unless the prose outside them presents them as examples."""
    wrappers: list[_Fence] = []
    for fence in _code_fences(text):
        body = text[fence.body_start : fence.body_end]
        if "<" not in body or _TOOL_FENCE_INFO_RE.match(fence.info):
            continue
        inner = _scan(body, names)
        if not inner.text and (inner.calls or inner.issue is not None):
            wrappers.append(fence)
    if not wrappers:
        return text
    pieces: list[str] = []
    prose: list[str] = []
    at = 0
    for fence in wrappers:
        prose.append(text[at : fence.start])
        pieces += [text[at : fence.start], text[fence.body_start : fence.body_end]]
        at = fence.end
    prose.append(text[at:])
    pieces.append(text[at:])
    if _EXAMPLE_RE.search("".join(prose)):
        return text
    return "".join(pieces)


def _scan(text: str, names: ToolNames) -> TextParseResult:
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
            tag = TAG_RE.search(text, pos)
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
        block = fence_block(text, match, names) if match is fence else tag_block(text, match, names)
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
    return TextParseResult(text=visible, calls=tuple(calls), issue=join_issues(issues))


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
    return [(f.start, f.end) for f in _code_fences(text) if not _TOOL_FENCE_INFO_RE.match(f.info)]


@dataclass(frozen=True, slots=True)
class _Fence:
    """One fenced code block: `[start, end)` with its marker lines, `[body_start, body_end)`
    without them, and the opener's info string (`xml`, `json`, ``)."""

    start: int
    body_start: int
    body_end: int
    end: int
    info: str


def _code_fences(text: str) -> list[_Fence]:
    """Every Markdown fenced code block, in order; an unclosed one runs to the end of the text."""
    marks: list[re.Match[str]] = []
    if "```" in text:
        marks.extend(_BACKTICK_FENCE_RE.finditer(text))
    if "~~~" in text:
        marks.extend(_TILDE_FENCE_RE.finditer(text))
    marks.sort(key=lambda m: m.start())
    fences: list[_Fence] = []
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
            fences.append(_fence(text, opener, mark.start(), mark.end()))
            opener = None
    if opener is not None:
        fences.append(_fence(text, opener, len(text), len(text)))
    return fences


def _fence(text: str, opener: re.Match[str], close_start: int, end: int) -> _Fence:
    body_start = min(opener.end() + 1, close_start)  # past the opener's newline
    body_end = max(text.rfind("\n", 0, close_start) + 1, body_start)  # the closing line's start
    if close_start == len(text):
        body_end = len(text)
    return _Fence(
        start=opener.start(),
        body_start=body_start,
        body_end=body_end,
        end=end,
        info=opener.group(2),
    )


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
