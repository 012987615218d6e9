"""The mail-triage tools on a real Maildir (the calendar check is in test_calendar.py)."""

from __future__ import annotations

import email.policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any

import pytest

from heron.connectors.mail.maildir import Maildir, maildir_tools
from heron.tools.definition import Tool, ToolContext, ToolResult

CTX = ToolContext(call_id="c1", turn_id="t1")

INVITE_ICS = """BEGIN:VCALENDAR\r
VERSION:2.0\r
PRODID:-//test//test//EN\r
METHOD:REQUEST\r
BEGIN:VEVENT\r
UID:plan-1@example.com\r
SUMMARY:Planning\r
DTSTART:20250314T100000Z\r
DTEND:20250314T110000Z\r
END:VEVENT\r
END:VCALENDAR\r
"""


def mail(
    subject: str,
    body: str,
    *,
    sender: str = "Bob <bob@example.com>",
    message_id: str = "<m1@example.com>",
    html: bool = False,
    invite: bool = False,
) -> bytes:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = "me@home.test"
    message["Subject"] = subject
    message["Date"] = "Mon, 10 Mar 2025 08:00:00 +0000"
    message["Message-ID"] = message_id
    if html:
        message.set_content(body, subtype="html")
    else:
        message.set_content(body)
    if invite:
        message.add_attachment(
            INVITE_ICS.encode(), maintype="text", subtype="calendar", filename="invite.ics"
        )
    return message.as_bytes()


@pytest.fixture
def box(tmp_path: Path) -> Maildir:
    return Maildir(tmp_path / "Maildir")


@pytest.fixture
def tools(box: Maildir) -> dict[str, Tool]:
    return {t.spec.name: t for t in maildir_tools(box, from_addr="me@home.test")}


async def run(t: Tool, **arguments: Any) -> ToolResult:
    return await t.execute(t.validate(arguments), CTX)


async def data(t: Tool, **arguments: Any) -> Any:
    result = await run(t, **arguments)
    assert result.success, result.error
    return result.data


async def test_list_mail_shows_the_inbox_with_ids_senders_and_flags(
    box: Maildir, tools: dict[str, Tool]
) -> None:
    first = box.deliver(mail("Lunch?", "Noon?"))
    second = box.deliver(mail("Report", "Attached.", message_id="<m2@example.com>"))
    listing = await data(tools["list_mail"])
    assert listing["count"] == 2
    assert [m["id"] for m in listing["messages"]] == [first, second]
    assert listing["messages"][0]["from"] == "bob@example.com"
    assert listing["messages"][0]["from_name"] == "Bob"
    assert listing["messages"][1]["subject"] == "Report"
    assert listing["messages"][0]["flags"] == []


async def test_read_mail_returns_the_body_and_the_invitation_it_carries(
    box: Maildir, tools: dict[str, Tool]
) -> None:
    key = box.deliver(mail("Planning", "Can we meet Friday 10:00 UTC?", invite=True))
    full = await data(tools["read_mail"], id=key)
    assert full["body"] == "Can we meet Friday 10:00 UTC?"
    assert full["attachments"] == [{"filename": "invite.ics", "content_type": "text/calendar"}]
    assert "DTSTART:20250314T100000Z" in full["calendar"][0]
    assert full["flags"] == []  # reading does not mark it seen


async def test_an_html_only_mail_is_read_as_text(box: Maildir, tools: dict[str, Tool]) -> None:
    key = box.deliver(mail("Sale", "<p>50% <b>off</b> everything</p>", html=True))
    assert "50%  off  everything" in (await data(tools["read_mail"], id=key))["body"]


async def test_draft_reply_writes_a_threaded_draft_and_sends_nothing(
    box: Maildir, tools: dict[str, Tool]
) -> None:
    key = box.deliver(mail("Planning", "Friday?"))
    before = sorted(p.name for p in (box.root / "new").iterdir())
    draft = await data(tools["draft_reply"], id=key, body="Friday works for me.")
    assert draft["to"] == "Bob <bob@example.com>" and draft["subject"] == "Re: Planning"
    [path] = (box.root / ".Drafts" / "cur").iterdir()
    assert path.name == f"{draft['draft_id']}:2,DS"
    saved = BytesParser(policy=email.policy.default).parsebytes(path.read_bytes())
    assert saved["In-Reply-To"] == "<m1@example.com>"
    assert saved["References"] == "<m1@example.com>"
    assert saved["From"] == "me@home.test"
    assert saved.get_content().strip() == "Friday works for me."
    assert sorted(p.name for p in (box.root / "new").iterdir()) == before
    drafts = await data(tools["list_mail"], folder="Drafts")
    assert drafts["messages"][0]["flags"] == ["draft", "seen"]


async def test_archive_moves_the_message_keeping_its_id_and_is_idempotent(
    box: Maildir, tools: dict[str, Tool]
) -> None:
    key = box.deliver(mail("50% off!", "Buy now."))
    moved = await data(tools["archive_mail"], id=key)
    assert moved == {"id": key, "folder": "Archive", "from_folder": "INBOX"}
    assert (await data(tools["list_mail"]))["count"] == 0
    assert [m["id"] for m in (await data(tools["list_mail"], folder="Archive"))["messages"]] == [
        key
    ]
    again = await data(tools["archive_mail"], id=key)
    assert again["note"] == "already archived"


async def test_high_priority_is_the_maildir_F_flag_set_by_a_rename_only(
    box: Maildir, tools: dict[str, Tool]
) -> None:
    raw = mail("Complaint", "This is unacceptable.")
    key = box.deliver(raw)
    flagged = await data(tools["flag_mail"], id=key, flag="high_priority")
    assert flagged["flags"] == ["high_priority"]
    [path] = (box.root / "cur").iterdir()
    assert path.name == f"{key}:2,F" and path.read_bytes() == raw
    await data(tools["flag_mail"], id=key, flag="seen")
    cleared = await data(tools["flag_mail"], id=key, flag="high_priority", remove=True)
    assert cleared["flags"] == ["seen"]


async def test_an_unknown_id_or_folder_is_a_clear_failure(tools: dict[str, Tool]) -> None:
    for name, args in (
        ("read_mail", {"id": "nope"}),
        ("archive_mail", {"id": "../../etc/passwd"}),
        ("draft_reply", {"id": "nope", "body": "hi"}),
        ("flag_mail", {"id": "nope", "flag": "seen"}),
    ):
        result = await run(tools[name], **args)
        assert not result.success and "no message with id" in (result.error or ""), name
    missing = await run(tools["list_mail"], folder="Spam")
    assert not missing.success and "no folder 'Spam'" in (missing.error or "")


async def test_an_unknown_flag_is_refused_by_the_schema(tools: dict[str, Tool]) -> None:
    with pytest.raises(ValueError, match="flag"):
        tools["flag_mail"].validate({"id": "x", "flag": "deleted"})
