"""The YAML front matter of a Markdown file from outside (a `SKILL.md`, an `agents/NAME.md`):
split from the body, loaded by a bounded YAML loader, or read line by line when YAML refuses it.

`yaml.safe_load` is safe from code execution but not from size: an alias (`*a`) is the same
object again, so 100 kB of text referred to 1,500 times is 150 MB as soon as anything joins,
prints or serialises it; nesting is composed by recursion (`RecursionError` near 1,000
levels); an integer of 5,000 digits raises a bare `ValueError`. `load_front_matter` refuses
anchors and aliases, every explicit tag but the plain YAML types (`!!str`, `!!int`, …: no
`!!python/…`, `!!binary`, `!local`), nesting deeper than `MAX_DEPTH`, and integers Python
would not convert — each as a `FrontMatterRefused` (a `yaml.MarkedYAMLError`, with its line),
before anything is built. Such front matter is a handful of flat keys; none of this takes
anything a real one uses.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import yaml
from yaml.events import AliasEvent, MappingStartEvent, NodeEvent, SequenceStartEvent

from heron.errors import HeronError

__all__ = [
    "MAX_DEPTH",
    "FrontMatterRefused",
    "lenient_yaml",
    "load_front_matter",
    "split_front_matter",
]

MAX_DEPTH = 16
"""Mappings and lists inside each other, the top-level mapping included."""
_CORE = "tag:yaml.org,2002:"
_PLAIN_TAGS = frozenset(
    f"{_CORE}{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map")
)
_NO_ALIASES = "YAML anchors and aliases are not read"
_MAX_DIGITS = 4_000  # below Python's int/str conversion limit (4,300)


class FrontMatterRefused(HeronError, yaml.MarkedYAMLError):
    """YAML heron does not load from front matter: an alias or anchor, an explicit tag, nesting
    past `MAX_DEPTH`, a number too long to convert. Carries the mark (line) of the place."""


def _shown(text: str, *, tag: bool = False) -> str:
    """An anchor or tag for a message: the file's own text, so cut short."""
    if tag and text.startswith(_CORE):
        text = "!!" + text.removeprefix(_CORE)
    return text if len(text) <= 64 else text[:63] + "…"


class _BoundedLoader(yaml.SafeLoader):
    """`SafeLoader` that refuses, while composing, what could make the value large or deep."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, AliasEvent):
            self._refuse(f"an alias (*{_shown(event.anchor or '')}): {_NO_ALIASES}", event)
        if isinstance(event, NodeEvent) and event.anchor is not None:
            self._refuse(f"an anchor (&{_shown(event.anchor)}): {_NO_ALIASES}", event)
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in _PLAIN_TAGS:
            shown = _shown(tag, tag=True)
            self._refuse(f"the tag {shown}: tags other than plain types are not read", event)
        nested = isinstance(event, MappingStartEvent | SequenceStartEvent)
        if nested:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                self._refuse(f"values nested more than {MAX_DEPTH} levels deep are not read", event)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= nested

    def _refuse(self, problem: str, event: Any) -> NoReturn:
        raise FrontMatterRefused(problem=problem, problem_mark=event.start_mark)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    digits = sum(c.isdigit() for c in node.value)
    if digits > min(_MAX_DIGITS, sys.get_int_max_str_digits() or _MAX_DIGITS):
        raise FrontMatterRefused(
            problem=f"a number of {digits} digits is not read", problem_mark=node.start_mark
        )
    return yaml.SafeLoader.construct_yaml_int(loader, node)


_BoundedLoader.add_constructor(f"{_CORE}int", _construct_int)


def load_front_matter(text: str) -> Any:
    """The front matter's value; raises `FrontMatterRefused` (bounds) or `yaml.YAMLError`."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def split_front_matter(text: str) -> tuple[str, str, int] | None:
    """(front matter, body, line of the body) or None when the file does not start with one."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None
    for n, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return "".join(lines[1:n]), "".join(lines[n + 1 :]), n + 2
    return None


def lenient_yaml(text: str) -> dict[str, Any]:
    """Top-level `key: value` lines taken literally (the first `: ` splits), with `metadata`
    and list values read from their indented lines: what YAML would have meant in the
    common mistakes (unquoted colons, stray quotes). Flat by construction, never larger than
    the text, and linear in it (continuation lines are joined once, at the end)."""
    data: dict[str, Any] = {}
    more: dict[str, list[str]] = {}
    key: str | None = None
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if raw[:1] in " \t" and key is not None:
            item = raw.strip()
            current = data.get(key)
            if item.startswith("- "):
                if not isinstance(current, list):
                    current = data[key] = []
                current.append(item[2:].strip())
            elif ":" in item:
                if not isinstance(current, dict):
                    current = data[key] = {}
                sub, _, value = item.partition(":")
                current[sub.strip()] = _unquote(value.strip())
            elif isinstance(current, str):
                more.setdefault(key, []).append(item)
            continue
        name, sep, value = raw.partition(":")
        if not sep:
            continue
        key = name.strip()
        more.pop(key, None)
        data[key] = _unquote(value.strip()) if value.strip() else None
    for name, parts in more.items():
        if isinstance(data.get(name), str):
            data[name] = " ".join([data[name], *parts]).strip()
    return data


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value
