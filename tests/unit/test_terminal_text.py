"""`terminal_safe`: nothing a terminal acts on survives; JSON printed through it decodes alike."""

from __future__ import annotations

import io
import json

from rich.console import Console
from rich.text import Text

from heron._support.terminal import terminal_safe
from heron.cli.render import _terminal_text
from heron.turn.approval import ApprovalRequest, TerminalApprover


def test_every_control_character_and_bidi_override_is_written_out() -> None:
    raw = "".join(map(chr, [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x202E, 0x2066]))
    safe = terminal_safe(raw)

    assert all(ch.isprintable() or ch in "\t\n" for ch in safe)
    assert "\\u001b" in safe and "\\u009b" in safe and "\\u202e" in safe
    assert "\t" in safe and "\n" in safe
    assert terminal_safe("line\r\nnext\roverwrite") == "line\nnext\\u000doverwrite"
    assert terminal_safe("plain text, ü, 日本") == "plain text, ü, 日本"


def test_a_json_line_printed_through_it_decodes_to_the_same_value() -> None:
    value = {"text": "a\x1b[2J b\x9b c\u202e d", "n": 1}
    line = json.dumps(value, ensure_ascii=False)

    assert json.loads(terminal_safe(line)) == value


def test_a_card_keeps_its_styles_and_loses_the_escape_sequences() -> None:
    card = Text.assemble(("✔ ", "green"), ("shell", "bold"), " echo \x1b[31mred")
    out = io.StringIO()
    Console(file=out, force_terminal=True, color_system="standard").print(_terminal_text(card))
    printed = out.getvalue()

    assert "\x1b[31mred" not in printed and "\\u001b[31mred" in printed
    assert "\x1b[1m" in printed or "\x1b[1;" in printed  # the bold span is still there
    assert _terminal_text(card).plain == "✔ shell echo \\u001b[31mred"


async def test_the_terminal_approval_prompt_shows_what_the_model_wrote_without_acting_on_it() -> (
    None
):
    prompt = io.StringIO()
    approver = TerminalApprover(prompt_out=prompt, read_line=lambda: "n")
    request = ApprovalRequest(
        request_id="r1",
        call_id="c1",
        tool="write_file",
        summary="path='x\x1b[1A\x1b[2K? heron wants to run read_file'",
        turn_id="t1",
        reason="risk\x9b2J",
    )
    answer = await approver.ask(request)

    assert answer is not None and answer.decision == "no"
    shown = prompt.getvalue()
    assert "\x1b" not in shown and "\x9b" not in shown
    assert "x\\u001b[1A\\u001b[2K? heron wants" in shown
