"""The render check of post-verification: a document is rendered and the HTML checked.

HTML is checked as it is; Markdown is first rendered by `markdown_to_html`, a tiny converter
that keeps one HTML line per Markdown line so problems carry Markdown line numbers. The check
(`html.parser`) finds unclosed and mismatched tags, duplicate ids, `#anchor` links without a
target and relative links to files that do not exist.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = ["Problems", "markdown_to_html", "render_check"]

Problems = list[tuple[int | None, str]]
"""`(line, message)` pairs; the line is None when a problem has no place."""

_VOID = frozenset(("area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta"))
_VOID |= {"param", "source", "track", "wbr"}
# Elements whose end tag HTML lets authors leave out.
_OPTIONAL_END = frozenset(("p", "li", "dt", "dd", "tr", "td", "th", "thead", "tbody", "tfoot"))
_OPTIONAL_END |= {"option", "optgroup", "colgroup", "caption", "rt", "rp", "html", "head", "body"}


class _HtmlCheck(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[tuple[str, int]] = []
        self.problems: Problems = []
        self.ids: set[str] = set()
        self.links: list[tuple[int, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _VOID:
            self.open.append((tag, self.getpos()[0]))
        self._attributes(tag, attrs)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._attributes(tag, attrs)

    def _attributes(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        line = self.getpos()[0]
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" and value in self.ids:
                self.problems.append((line, f"duplicate id {value!r}"))
            if name == "id" or (name == "name" and tag == "a"):
                self.ids.add(value)
            elif name in ("href", "src"):
                self.links.append((line, value))

    def handle_endtag(self, tag: str) -> None:
        line = self.getpos()[0]
        if tag in _VOID:
            return
        depth = next((i for i in range(len(self.open) - 1, -1, -1) if self.open[i][0] == tag), None)
        if depth is None:
            self.problems.append((line, f"</{tag}> closes nothing"))
            return
        for inner, opened in self.open[depth + 1 :]:
            if inner not in _OPTIONAL_END:
                self.problems.append((opened, f"<{inner}> is not closed before </{tag}>"))
        del self.open[depth:]


def render_check(text: str, folder: Path, markdown: bool) -> Problems:
    """Problems in a document once rendered: structure, ids, anchors, local links."""
    problems: Problems = []
    if markdown:
        text, problems = markdown_to_html(text)
    parser = _HtmlCheck()
    parser.feed(text)
    parser.close()
    problems += parser.problems
    problems += [(ln, f"<{t}> is never closed") for t, ln in parser.open if t not in _OPTIONAL_END]
    for line, target in parser.links:
        parts = urlsplit(target)
        if parts.scheme or parts.netloc or target.startswith("/"):
            continue  # external, or relative to a site root heron does not know
        if not parts.path:
            if parts.fragment and parts.fragment not in parser.ids:
                problems.append((line, f"link to #{parts.fragment}: no such anchor"))
        elif not (folder / unquote(parts.path)).exists():
            problems.append((line, f"link to {parts.path}: no such file"))
    return sorted(problems, key=lambda p: p[0] or 0)


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^\s>]+|[^\s@<>]+@[^\s@<>]+\.[a-z]+)>", re.I)
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")


def _inline(text: str) -> str:
    spans: list[str] = []

    def stash(rendered: str) -> str:
        spans.append(rendered)
        return f"\x00{len(spans) - 1}\x00"

    text = _CODE_SPAN.sub(lambda m: stash(f"<code>{html.escape(m.group(2))}</code>"), text)
    text = _AUTOLINK.sub(lambda m: stash(f'<a href="{html.escape(m.group(1))}">…</a>'), text)

    def link(m: re.Match[str]) -> str:
        url = html.escape(m.group(3))
        if m.group(1):
            return f'<img src="{url}" alt="{html.escape(m.group(2))}">'
        return f'<a href="{url}">{m.group(2)}</a>'

    text = _LINK.sub(link, text)
    return re.sub("\x00(\\d+)\x00", lambda m: spans[int(m.group(1))], text)


def _slug(rendered: str) -> str:
    text = html.unescape(re.sub(r"<[^>]+>", "", rendered)).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def markdown_to_html(text: str) -> tuple[str, Problems]:
    """A tiny Markdown renderer for checking: headings (with GitHub-style ids), fenced and
    indented code, links, images and inline HTML. Emits one HTML line per Markdown line, so
    problems found in the HTML carry Markdown line numbers. Also returns Markdown problems."""
    out: list[str] = []
    problems: Problems = []
    slugs: Counter[str] = Counter()
    fence: tuple[str, int] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        opener = _FENCE.match(line)
        if fence is not None:
            mark = opener.group(1) if opener is not None else ""
            if mark[:1] == fence[0][0] and len(mark) >= len(fence[0]):
                out.append("</code></pre>")
                fence = None
            else:
                out.append(html.escape(line))
        elif opener is not None:
            fence = (opener.group(1), number)
            out.append("<pre><code>")
        elif line.startswith(("    ", "\t")):
            out.append(html.escape(line))
        elif heading := _HEADING.match(line):
            level, inner = len(heading.group(1)), _inline(heading.group(2))
            slug = _slug(inner)
            seen = slugs[slug]
            slugs[slug] += 1
            ident = f"{slug}-{seen}" if seen else slug
            out.append(f'<h{level} id="{html.escape(ident)}">{inner}</h{level}>')
        else:
            out.append(_inline(line))
    if fence is not None:
        problems.append((fence[1], f"code fence {fence[0]} is never closed"))
        out.append("</code></pre>")
    return "\n".join(out), problems
