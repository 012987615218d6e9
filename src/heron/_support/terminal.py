"""Outside text made safe for a terminal.

What heron prints for a person — the model's text and arguments, tool output, a stored
history, an approval request — comes from outside. Raw, an escape sequence in it could clear
the screen, set the window title, plant a hyperlink, move the cursor over an approval prompt,
or reorder a line with bidirectional overrides. `terminal_safe` writes every control character
(C0 but tab and newline, DEL, C1) and every bidirectional override as a `\\u` escape with four
hex digits (`\\u001b` for ESC): visible to a person, and inside a JSON string the very escape
JSON itself would use, so a JSON line printed through it decodes to the same value.
"""

from __future__ import annotations

__all__ = ["line_safe", "terminal_safe"]

_CONTROLS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_TABLE = {c: f"\\u{c:04x}" for c in (*_CONTROLS, *_BIDI) if c not in (0x09, 0x0A)}


def terminal_safe(text: str) -> str:
    """`text` with nothing in it a terminal would act on (a CRLF line end becomes LF)."""
    return text.replace("\r\n", "\n").translate(_TABLE)


_LINE_TABLE = {**_TABLE, 0x09: "\\u0009", 0x0A: "\\u000a"}


def line_safe(text: str) -> str:
    """`terminal_safe` for text shown inside one line (a file name in a list): a newline or a
    tab in it is escaped too, so it cannot start a line of its own."""
    return text.translate(_LINE_TABLE)
