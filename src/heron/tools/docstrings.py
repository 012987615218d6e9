"""Docstrings of tool functions: the description and the per-parameter texts.

`@tool` takes a tool's description and its parameter descriptions from the function's docstring.
Both common conventions are read: Google sections (`Args:`, `Returns:`, `Raises:`) and Sphinx
fields (`:param x:`, `:returns:`, `:raises E:`). Parameter texts go into the JSON Schema; the
Returns and Raises blocks stay in the description, rendered the same way for either convention.
"""

from __future__ import annotations

import re

_GOOGLE_HEADER = re.compile(r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises):\s*$")
_GOOGLE_ITEM = re.compile(r"^\*{0,2}(\w+)\s*(?:\(.*?\))?\s*:\s*(.*)$")
_SPHINX_KINDS = "param|parameter|arg|argument|key|keyword|type|returns?|rtype|raises?|exception"
_SPHINX_FIELD = re.compile(rf"^:({_SPHINX_KINDS})(?:\s+([^:]+?))?\s*:\s*(.*)$")
_SECTION_OF = dict.fromkeys(("Args", "Arguments", "Parameters"), "params")
_SECTION_OF |= dict.fromkeys(("Returns", "Return", "Yields"), "returns") | {"Raises": "raises"}
_SPHINX_PARAM = frozenset({"param", "parameter", "arg", "argument", "key", "keyword"})
_SPHINX_RAISES = frozenset({"raises", "raise", "exception"})


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str], list[str]]:
    """Split a Google (`Args:`, `Returns:`, `Raises:`) or Sphinx (`:param x:`) docstring.

    Returns the summary and body, the per-parameter texts and rendered Returns/Raises blocks.
    """
    body: list[str] = []
    params: dict[str, list[str]] = {}
    returns: list[str] = []
    raises: dict[str, list[str]] = {}
    section = ""  # "" is the body; otherwise the section the current lines belong to
    item_indent = -1
    current = body
    for line in (doc or "").splitlines():
        text, indent = line.strip(), len(line) - len(line.lstrip())
        if header := _GOOGLE_HEADER.match(line):
            section, item_indent = _SECTION_OF[header.group(1)], -1
            current = returns if section == "returns" else []
            continue
        if field := _SPHINX_FIELD.match(line):
            kind, target, rest = field.groups()
            section = "sphinx"
            if kind in _SPHINX_PARAM and target:
                current = params.setdefault(target.split()[-1], [])
            elif kind in ("returns", "return"):
                current = returns
            elif kind in _SPHINX_RAISES:
                current = raises.setdefault(target or "error", [])
            else:
                current = []  # `:type x:` and `:rtype:` repeat the type hints
            current.append(rest)
            continue
        if section and indent == 0 and text:
            section, current = "", body
        if section in ("params", "raises") and text:
            item_indent = indent if item_indent < 0 else item_indent
            item = _GOOGLE_ITEM.match(text) if indent == item_indent else None
            if item:
                current = (params if section == "params" else raises).setdefault(item[1], [])
                current.append(item[2])
                continue
        current.append(text if section else line)

    def join(lines: list[str]) -> str:
        return " ".join(line for line in lines if line)

    sections = [f"Returns: {join(returns)}"] if join(returns) else []
    if raises:
        sections.append("Raises:\n" + "\n".join(f"- {k}: {join(v)}" for k, v in raises.items()))
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(body)).strip()
    return text, {name: join(lines) for name, lines in params.items()}, sections
