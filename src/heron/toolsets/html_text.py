"""HTML to readable text, for reading web pages and documents.

`html_to_text` keeps what a reader of the page would see: headings as `#` lines, list items as
`-` or `1.` lines, `<pre>` with its whitespace, image alt text, and links numbered `[n]` in the
text with their absolute URLs listed apart. Scripts, styles, navigation, templates, SVG and
iframes are dropped.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

__all__ = ["html_to_text"]

_SKIPPED = frozenset({"script", "style", "nav", "noscript", "template", "svg", "iframe"})
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_BLOCKS = frozenset({"p", "div", "section", "article", "main", "header", "footer", "aside"}) | {
    *("blockquote", "table", "tr", "form", "figure", "figcaption", "dl", "dt", "dd", "hr"),
    *("address", "details", "summary"),
}
_SPACES = re.compile(r"\s+")


class _HtmlText(HTMLParser):
    """Collects the readable text of a page: headings as `#`, list items as `-`, links as [n]."""

    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.title = ""
        self.links: list[str] = []
        self._numbers: dict[str, int] = {}
        self._parts: list[str] = []
        self._newlines = 0  # trailing newlines of the output so far
        self._skip = 0
        self._pre = 0
        self._lists: list[int | None] = []  # None for <ul>, the item counter for <ol>
        self._href: str | None = None
        self._in_title = False

    def text(self) -> str:
        lines = "".join(self._parts).split("\n")
        joined = "\n".join(line.rstrip() for line in lines)
        return re.sub(r"\n{3,}", "\n\n", joined).strip("\n")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self._skip += 1
        if self._skip:
            return
        if tag == "title":
            self._in_title = True
        elif tag in _HEADINGS:
            self._break(2)
            self._emit("#" * int(tag[1]) + " ")
        elif tag in ("ul", "ol"):
            self._break(1)
            self._lists.append(0 if tag == "ol" else None)
        elif tag == "li":
            self._break(1)
            counter = self._lists[-1] if self._lists else None
            if counter is not None:
                self._lists[-1] = counter + 1
            indent = "  " * max(0, len(self._lists) - 1)
            self._emit(indent + (f"{counter + 1}. " if counter is not None else "- "))
        elif tag == "br":
            self._emit("\n")
        elif tag == "pre":
            self._break(2)
            self._pre += 1
        elif tag in ("td", "th") and self._parts and not self._newlines:
            self._emit(" ")
        elif tag == "img":
            alt = (dict(attrs).get("alt") or "").strip()
            if alt:
                self._emit(f"[image: {alt}]")
        elif tag == "a":
            self._href = self._link(dict(attrs).get("href"))
        elif tag in _BLOCKS:
            self._break(2 if tag == "p" else 1)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED:
            self._skip = max(0, self._skip - 1)
            return
        if self._skip:
            return
        if tag == "title":
            self._in_title = False
        elif tag in _HEADINGS or tag == "p":
            self._break(2)
        elif tag in ("ul", "ol"):
            if self._lists:
                self._lists.pop()
            self._break(1)
        elif tag == "pre":
            self._pre = max(0, self._pre - 1)
            self._break(2)
        elif tag == "a" and self._href is not None:
            number = self._numbers.setdefault(self._href, len(self._numbers) + 1)
            if number > len(self.links):
                self.links.append(self._href)
            self._emit(f" [{number}]")
            self._href = None
        elif tag in _BLOCKS:
            self._break(1)

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._in_title:
            self.title = _SPACES.sub(" ", self.title + data).strip()
        elif self._pre:
            self._emit(data)
        else:
            text = _SPACES.sub(" ", data)
            if not self._parts or self._newlines or self._parts[-1].endswith(" "):
                text = text.lstrip()
            self._emit(text)

    def _link(self, href: str | None) -> str | None:
        if not href or href.startswith("#"):
            return None
        try:
            url = urljoin(self.base_url, href.strip())
            return url if urlsplit(url).scheme in ("http", "https", "mailto") else None
        except ValueError:  # a malformed href ("http://[oops") is left as plain text
            return None

    def _emit(self, text: str) -> None:
        if not text:
            return
        self._parts.append(text)
        stripped = text.rstrip("\n")
        trailing = len(text) - len(stripped)
        self._newlines = self._newlines + trailing if not stripped.strip(" ") else trailing

    def _break(self, count: int) -> None:
        if self._parts and self._newlines < count:
            self._emit("\n" * (count - self._newlines))


def html_to_text(html: str, *, base_url: str = "") -> tuple[str, str, list[str]]:
    """Readable text of an HTML page: (title, text, links). Link `n` is marked `[n]` in the text.

    Scripts, styles, navigation, templates, SVG and iframes are dropped; headings become `#`
    lines, list items `-` or `1.` lines, `<pre>` keeps its whitespace.
    """
    parser = _HtmlText(base_url)
    parser.feed(html)
    parser.close()
    return parser.title, parser.text(), parser.links
