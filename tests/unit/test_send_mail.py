"""send_mail against a real SMTP server (aiosmtpd on 127.0.0.1): preflight → confirm, tokens,
idempotency keys, an unknown outcome, header injection, credentials, and the whole engine loop."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from heron import Agent, ScriptedModel, Tool, ToolContext, ToolResult
from heron._support.clock import FakeClock
from heron.connectors.mail.send import MailConfig, address_problem, mail_tools
from heron.messages import ToolResultMessage
from heron.safety.idempotency import Confirmations, IdempotencyStore
from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger
from support.engine import Events, call, calls_turn

CTX = ToolContext(call_id="c0", turn_id="t0")
MAIL: dict[str, Any] = {
    "to": ["ana@example.com"],
    "cc": ["ops@example.org"],
    "subject": "Build 1432 failed — see log",
    "body": "Hello Ana,\n.leading dot stays\nthe build failed at step 7.",
}
PASSWORD = "correct-horse-battery-staple-42"


class Mailbox:
    """The server side: what arrived, and how to misbehave."""

    def __init__(self) -> None:
        self.data_commands = 0
        self.envelopes: list[Envelope] = []
        self.refuse: set[str] = set()
        self.drop_after_data = False
        self.logins: list[tuple[str, str]] = []

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        if address in self.refuse:
            return "550 5.1.1 no such mailbox"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.data_commands += 1
        self.envelopes.append(envelope)
        if self.drop_after_data and server.transport is not None:
            server.transport.close()  # the data arrived, the reply never leaves
        return "250 2.0.0 queued as 7F3A"

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        assert isinstance(data, LoginPassword)
        self.logins.append((data.login.decode(), data.password.decode()))
        # handled=False: aiosmtpd answers a failure with 535 itself.
        return AuthResult(success=data.password.decode() == PASSWORD, handled=False)

    def message(self, index: int = 0) -> EmailMessage:
        content = self.envelopes[index].content
        assert isinstance(content, bytes)
        parsed = message_from_bytes(content, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


@pytest.fixture
async def server() -> AsyncIterator[tuple[Mailbox, int]]:
    box = Mailbox()
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(
        lambda: SMTP(
            box,
            hostname="mx.heron.test",
            auth_require_tls=False,
            authenticator=box.authenticate,
        ),
        "127.0.0.1",
        0,
    )
    yield box, listener.sockets[0].getsockname()[1]
    listener.close()
    await listener.wait_closed()


def make_tool(port: int, tmp_path: Path, clock: FakeClock, **config: Any) -> Tool:
    mail = MailConfig(
        host="127.0.0.1",
        port=port,
        from_addr="heron@example.com",
        starttls=False,
        local_hostname="heron.test",
        timeout_s=5,
        **config,
    )
    [send_mail] = mail_tools(
        mail, Confirmations(IdempotencyStore(SqliteIdempotencyLedger(tmp_path), clock=clock.time))
    )
    return send_mail


@pytest.fixture
def send_mail(server: tuple[Mailbox, int], tmp_path: Path, clock: FakeClock) -> Tool:
    return make_tool(server[1], tmp_path, clock)


async def run(t: Tool, **arguments: Any) -> ToolResult:
    return await t.execute(t.validate(arguments), CTX)


async def test_preflight_shows_the_exact_message_and_confirm_delivers_it_once(
    server: tuple[Mailbox, int], send_mail: Tool
) -> None:
    box, port = server
    pre = await run(send_mail, **MAIL)
    assert pre.success and box.data_commands == 0
    message_id = pre.data["message_id"]
    assert re.fullmatch(r"<heron\.[0-9a-f]{16}@example\.com>", message_id)
    for line in [
        "Envelope: MAIL FROM:<heron@example.com>  RCPT TO:<ana@example.com>, <ops@example.org>"
        f"  — via 127.0.0.1:{port}",
        "  From: heron@example.com",
        "  To: ana@example.com",
        "  Cc: ops@example.org",
        "  Subject: Build 1432 failed — see log",
        "  Date: (the time of sending)",
        f"  Message-ID: {message_id}",
        "Hello Ana,\n.leading dot stays\nthe build failed at step 7.\n--- end of body ---",
    ]:
        assert line in pre.output
    sent = await run(send_mail, **MAIL, confirmation_token=pre.data["confirmation_token"])
    assert sent.success, sent.error
    assert sent.output.startswith(f"sent: Message-ID {message_id} accepted by 127.0.0.1:{port}")
    assert "server reply: 250 2.0.0 queued as 7F3A" in sent.output
    assert box.data_commands == 1
    envelope = box.envelopes[0]
    assert envelope.mail_from == "heron@example.com"
    assert envelope.rcpt_tos == ["ana@example.com", "ops@example.org"]
    received = box.message()
    assert received["Message-ID"] == message_id
    assert received["Subject"] == MAIL["subject"]
    assert received.get_content().replace("\r\n", "\n") == MAIL["body"] + "\n"
    assert f"Size: {len(envelope.original_content or b''):,} bytes" in pre.output


async def test_changed_arguments_invalidate_the_token(
    server: tuple[Mailbox, int], send_mail: Tool
) -> None:
    box, _ = server
    token = (await run(send_mail, **MAIL)).data["confirmation_token"]
    changes: list[dict[str, Any]] = [
        {"subject": "Build 1432 fixed"},
        {"cc": []},
        {"to": ["bob@example.com"]},
    ]
    for change in changes:
        result = await run(send_mail, **(MAIL | change), confirmation_token=token)
        assert not result.success
        assert "does not match these exact arguments" in (result.error or "")
    assert box.data_commands == 0
    assert (await run(send_mail, **MAIL, confirmation_token=token)).success


async def test_a_used_token_is_refused(server: tuple[Mailbox, int], send_mail: Tool) -> None:
    box, _ = server
    token = (await run(send_mail, **MAIL)).data["confirmation_token"]
    assert (await run(send_mail, **MAIL, confirmation_token=token)).success
    again = await run(send_mail, **MAIL, confirmation_token=token)
    assert not again.success and "already used" in (again.error or "")
    assert box.data_commands == 1


async def test_an_expired_token_is_refused(
    server: tuple[Mailbox, int], send_mail: Tool, clock: FakeClock
) -> None:
    box, _ = server
    token = (await run(send_mail, **MAIL)).data["confirmation_token"]
    clock.advance(600)
    result = await run(send_mail, **MAIL, confirmation_token=token)
    assert not result.success and "expired at" in (result.error or "")
    assert box.data_commands == 0


async def test_a_connection_dropped_after_data_is_outcome_unknown_and_never_retried(
    server: tuple[Mailbox, int], send_mail: Tool
) -> None:
    box, _ = server
    box.drop_after_data = True
    pre = await run(send_mail, **MAIL, idempotency_key="build-1432-mail")
    token = pre.data["confirmation_token"]
    result = await run(
        send_mail, **MAIL, confirmation_token=token, idempotency_key="build-1432-mail"
    )
    error = result.error or ""
    assert not result.success and error.startswith("outcome unknown: SMTPServerDisconnected")
    assert f"look for Message-ID {pre.data['message_id']} in the sent folder" in error
    assert "start again with a new preflight" in error
    assert box.data_commands == 1  # no automatic retry
    # Retrying the same confirmation, or the same key, does not send again.
    retry = await run(
        send_mail, **MAIL, confirmation_token=token, idempotency_key="build-1432-mail"
    )
    assert "outcome unknown" in (retry.error or "") and retry.data["replayed"] is True
    without_key = await run(send_mail, **MAIL, confirmation_token=token)
    assert "already used" in (without_key.error or "")
    assert box.data_commands == 1


async def test_a_retry_with_the_same_key_returns_the_first_result_and_sends_nothing(
    server: tuple[Mailbox, int], send_mail: Tool
) -> None:
    box, _ = server
    key = {"idempotency_key": "build-1432-mail"}
    token = (await run(send_mail, **MAIL, **key)).data["confirmation_token"]
    first = await run(send_mail, **MAIL, **key, confirmation_token=token)
    assert first.success
    same_call = await run(send_mail, **MAIL, **key, confirmation_token=token)
    new_preflight = await run(send_mail, **MAIL, **key)
    for replay in (same_call, new_preflight):
        assert replay.success and replay.data["replayed"] is True
        assert "nothing was done again]\n" + first.output in replay.output
    other = await run(send_mail, **(MAIL | {"subject": "another mail"}), **key)
    assert not other.success and "different arguments" in (other.error or "")
    assert box.data_commands == 1


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"subject": "hi\r\nBcc: all@evil.example"}, "subject contains a line break"),
        ({"subject": "hi\nthere"}, "subject contains a line break"),
        ({"to": ["ana@example.com\r\nBcc: all@evil.example"]}, "contains a line break"),
        ({"cc": ["ops@example.org\n"]}, "contains a line break"),
        ({"to": ["Ana <ana@example.com>"]}, "is not a plain address"),
        ({"to": ["ana@localhost"]}, "is not a plain address"),
        ({"cc": ["ANA@example.com"]}, "recipients listed more than once: ana@example.com"),
        ({"subject": "  "}, "subject is empty"),
        ({"body": "a\0b"}, "body contains a NUL character"),
    ],
)
async def test_unsafe_or_invalid_messages_are_refused_before_any_token(
    server: tuple[Mailbox, int], send_mail: Tool, change: dict[str, Any], problem: str
) -> None:
    result = await run(send_mail, **(MAIL | change))
    assert not result.success and "confirmation_token" not in str(result.data)
    assert (result.error or "").startswith("send_mail refused: ")
    assert problem in (result.error or "")
    assert server[0].data_commands == 0


def test_the_address_check_accepts_ordinary_addresses() -> None:
    for address in ["a@example.com", "first.last+tag@mail.example.co.uk", "o'neil@x-y.example"]:
        assert address_problem(address) is None
    for address in ["a@b", "a..b@example.com", ".a@example.com", "a@-x.example", "a b@example.com"]:
        assert address_problem(address) is not None


async def test_a_refused_recipient_means_nothing_was_sent_and_the_key_is_free(
    server: tuple[Mailbox, int], send_mail: Tool
) -> None:
    box, _ = server
    box.refuse = {"ana@example.com", "ops@example.org"}
    mail = MAIL | {"idempotency_key": "k"}
    token = (await run(send_mail, **mail)).data["confirmation_token"]
    result = await run(send_mail, **mail, confirmation_token=token)
    assert (result.error or "").startswith("not done: the server refused every recipient")
    assert "Nothing took effect" in (result.error or "") and box.data_commands == 0
    box.refuse = {"ops@example.org"}
    token = (await run(send_mail, **mail)).data["confirmation_token"]  # a new preflight
    partial = await run(send_mail, **mail, confirmation_token=token)
    assert partial.success and partial.data["accepted"] == ["ana@example.com"]
    assert "NOT delivered to these refused recipients: ops@example.org: 550" in partial.output


async def test_credentials_come_from_the_environment_and_are_never_shown(
    server: tuple[Mailbox, int], tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    box, port = server
    monkeypatch.setenv("HERON_TEST_SMTP_USER", "heron-bot")
    monkeypatch.setenv("HERON_TEST_SMTP_PASSWORD", PASSWORD)
    env = {"username_env": "HERON_TEST_SMTP_USER", "password_env": "HERON_TEST_SMTP_PASSWORD"}
    send_mail = make_tool(port, tmp_path, clock, **env)
    pre = await run(send_mail, **MAIL)
    sent = await run(send_mail, **MAIL, confirmation_token=pre.data["confirmation_token"])
    assert sent.success and box.logins == [("heron-bot", PASSWORD)]
    monkeypatch.setenv("HERON_TEST_SMTP_PASSWORD", "wrong-password-123")
    pre2 = await run(send_mail, **MAIL)
    denied = await run(send_mail, **MAIL, confirmation_token=pre2.data["confirmation_token"])
    assert (denied.error or "").startswith("not done: SMTP failed before the message was sent")
    monkeypatch.delenv("HERON_TEST_SMTP_PASSWORD")
    pre3 = await run(send_mail, **MAIL)
    missing = await run(send_mail, **MAIL, confirmation_token=pre3.data["confirmation_token"])
    assert "$HERON_TEST_SMTP_PASSWORD is not set" in (missing.error or "")
    for result in (pre, sent, pre2, denied, pre3, missing):
        assert PASSWORD not in f"{result.output} {result.error} {result.data}"
        assert "wrong-password-123" not in f"{result.output} {result.error} {result.data}"
    assert box.data_commands == 1


def test_credentials_without_starttls_are_refused_for_remote_hosts() -> None:
    with pytest.raises(ValueError, match="without STARTTLS"):
        MailConfig(
            host="smtp.example.com",
            from_addr="heron@example.com",
            starttls=False,
            username_env="U",
            password_env="P",
        )
    with pytest.raises(ValueError, match="from_addr"):
        MailConfig(host="smtp.example.com", from_addr="heron@example.com\r\nBcc: x@y.example")


async def test_preflight_and_confirm_through_the_agent_loop(
    server: tuple[Mailbox, int], send_mail: Tool, events: Events
) -> None:
    box, _ = server
    preflight_turns = [
        calls_turn(call("send_mail", "c1", **MAIL)),
        {"text": "Here is the mail I would send. Shall I send it?"},
    ]
    agent = Agent(model=ScriptedModel(preflight_turns), tools=[send_mail], autonomy="full")
    first = await agent.run("mail Ana about the failed build", sink=events)
    shown = {m.call_id: m.content for m in first.history if isinstance(m, ToolResultMessage)}
    assert shown["c1"].startswith("PREFLIGHT — nothing has been done yet.")
    assert box.data_commands == 0
    found = re.search(r'confirmation_token="(cfm-[^"]+)"', shown["c1"])
    assert found is not None
    confirm_turns = [
        calls_turn(call("send_mail", "c2", **MAIL, confirmation_token=found.group(1))),
        {"text": "Sent."},
    ]
    confirmer = Agent(model=ScriptedModel(confirm_turns), tools=[send_mail], autonomy="full")
    second = await confirmer.run("yes, send it", history=first.history, sink=events)
    assert second.ok
    results = {m.call_id: m.content for m in second.history if isinstance(m, ToolResultMessage)}
    assert results["c2"].startswith("sent: Message-ID <heron.")
    assert box.data_commands == 1 and box.message()["To"] == "ana@example.com"
    events.assert_one_pair_per_call()
