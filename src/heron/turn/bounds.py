"""Bounding tool results before they enter model-visible history.

Lengths are counted in characters (not bytes). The cut keeps the head (two thirds) and the
tail (one third) and says exactly how much was left out, so truncation is never silent.
"""

from __future__ import annotations


def truncation_marker(omitted: int) -> str:
    return f"\n\n[… {omitted} characters omitted by heron's tool-result limit …]\n\n"


def bound_text(text: str, max_chars: int) -> tuple[str, bool]:
    """Return `text` cut to at most about `max_chars` characters, and whether it was cut.

    `max_chars <= 0` disables bounding. When the limit is too small for a marker, a plain
    prefix is returned.
    """
    if max_chars <= 0 or len(text) <= max_chars:
        return text, False
    head = max_chars * 2 // 3
    tail = max_chars - head
    omitted = len(text) - head - tail
    marker = truncation_marker(omitted)
    if len(marker) >= max_chars:
        return text[:max_chars], True
    # Give the marker's own length back from the head and tail so the whole stays near max_chars.
    budget = max_chars - len(marker)
    head = budget * 2 // 3
    tail = budget - head
    omitted = len(text) - head - tail
    return text[:head] + truncation_marker(omitted) + text[len(text) - tail :], True


def render_bounded(text: str, max_chars: int) -> str:
    """Scrubbed and bounded text for rendering surfaces (events, observer, progress).

    Scrubbing comes first, so a cut can never leave a credential fragment too short to be
    recognised. Huge outputs are pre-cut to generous head and tail windows before scrubbing,
    so the cost stays proportional to what is shown.
    """
    from heron.safety.redact import scrub_text

    if _precuts(text, max_chars):
        window = 4 * max_chars
        text = text[:window] + truncation_marker(len(text) - 2 * window) + text[-window:]
    return bound_text(scrub_text(text), max_chars)[0]


def render_bounded_twice(text: str, first: int, second: int) -> tuple[str, str]:
    """`render_bounded(text, first)` and `render_bounded(text, second)` (a call's card and its
    observer record), scrubbing `text` once when neither limit pre-cuts it."""
    if _precuts(text, first) or _precuts(text, second):
        return render_bounded(text, first), render_bounded(text, second)
    from heron.safety.redact import scrub_text

    scrubbed = scrub_text(text)
    return bound_text(scrubbed, first)[0], bound_text(scrubbed, second)[0]


def _precuts(text: str, max_chars: int) -> bool:
    # Beyond twice the window of 4 × `max_chars` on each side, only the windows are scrubbed.
    return max_chars > 0 and len(text) > 8 * max_chars
