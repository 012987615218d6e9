"""One card on every channel, against real local peers (an SMTP server and an HTTP receiver on
127.0.0.1): each shows the card's plain text and the agent's identity; the outbox routes by
urgency and preference, holds pushes in quiet hours and recalls unread urgent messages."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from heron._support.clock import FakeClock
from heron.collaboration.cards import Card
from heron.collaboration.channels import ConsoleChannel, ImChannel, MailChannel, WebhookChannel
from heron.collaboration.config import PersonConfig, QuietHours
from heron.collaboration.identity import AgentIdentity
from heron.collaboration.outbox import Outbox, Person, plan_channels
from heron.collaboration.sqlite_store import SqliteMessageStore
from heron.collaboration.tokens import MessageKeyStore, TokenError, TokenSigner
from support.peers import HttpReceiver, SmtpSink, http_receiver, smtp_sink

IDENTITY = AgentIdentity(
    name="Heron (Ana's assistant)",
    address="heron@example.com",
    signature="Heron, Ana's assistant — an AI agent",
)
CARD = Card.model_validate(
    {
        "title": "Deploy web-2?",
        "summary": "Build 1432 passed; web-2 is ready.",
        "blocks": [
            {"type": "fields", "fields": [{"label": "Build", "value": "1432"}]},
            {"type": "divider"},
            {"type": "text", "text": "Tests: 812 passed."},
        ],
        "actions": [
            {"type": "button", "id": "deploy", "label": "Deploy", "style": "primary"},
            {"type": "button", "id": "wait", "label": "Wait"},
            {"type": "link", "label": "Build log", "url": "https://ci.example.com/1432"},
        ],
    }
)
PLAIN = (
    "Deploy web-2?\nBuild 1432 passed; web-2 is ready.\n\nBuild: 1432\n\n----\n\n"
    "Tests: 812 passed.\n\nActions: [Deploy]  [Wait]  Build log: https://ci.example.com/1432"
)


@pytest.fixture
async def smtp() -> AsyncIterator[SmtpSink]:
    async with smtp_sink() as sink:
        yield sink


@pytest.fixture
def http() -> Iterator[HttpReceiver]:
    with http_receiver() as r:
        yield r


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1_767_261_600.0)  # 2026-01-01 10:00 UTC


def outbox(
    tmp_path: Path,
    clock: FakeClock,
    person: PersonConfig,
    *,
    smtp_port: int = 0,
    console: io.StringIO | None = None,
) -> Outbox:
    channels = [
        ConsoleChannel(console, clock=clock),
        WebhookChannel(clock=clock),
        ImChannel(clock=clock),
        MailChannel(
            host="127.0.0.1", port=smtp_port or 9, identity=IDENTITY, starttls=False, clock=clock
        ),
    ]
    return Outbox(
        SqliteMessageStore.open(tmp_path),
        identity=IDENTITY,
        people={"ana": person},
        user="ana",
        channels=channels,
        signer=TokenSigner(MessageKeyStore(tmp_path), clock=clock),
        clock=clock,
    )


def test_a_card_renders_as_plain_text_and_refuses_twin_actions() -> None:
    assert CARD.plain_text() == PLAIN
    with pytest.raises(ValueError, match="distinct"):
        Card.model_validate(
            {
                "title": "t",
                "summary": "s",
                "actions": [
                    {"type": "button", "id": "a", "label": "Go"},
                    {"type": "button", "id": "b", "label": "go"},
                ],
            }
        )


async def test_the_card_reaches_every_channel_with_its_plain_text_and_the_identity(
    tmp_path: Path, clock: FakeClock, smtp: SmtpSink, http: HttpReceiver
) -> None:
    console = io.StringIO()
    everywhere = PersonConfig(
        channels=["console", "im", "webhook", "mail"],
        mail="ana@example.com",
        webhook=http.url,
        im=http.url.replace("/hook", "/im"),
    )
    box = outbox(tmp_path, clock, everywhere, smtp_port=smtp.port, console=console)
    sent = {}
    for channel in ("im", "webhook", "mail"):
        message = await box.send(kind="card", text="", card=CARD, session="ops", only=channel)
        sent[channel] = message
        assert message.delivered() == {"console": "ok", channel: "ok"}, channel
        assert message.text == PLAIN

    # Console: header with id and sender, the plain text, how to act, the sign-off.
    shown = console.getvalue()
    assert PLAIN in shown and "from Heron (Ana's assistant) <heron@example.com> to ana" in shown
    assert f"heron messages act {sent['im'].id} ACTION" in shown
    assert "— Heron, Ana's assistant — an AI agent" in shown

    # IM: the incoming-webhook shape, text first, blocks with the buttons' tokens.
    (_, im_body), (_, hook_body) = http.requests
    im = json.loads(im_body)
    assert im["text"].startswith(PLAIN) and im["text"].endswith(
        "— Heron, Ana's assistant — an AI agent"
    )
    kinds = [b["type"] for b in im["blocks"]]
    assert kinds == ["header", "section", "section", "divider", "section", "actions", "context"]
    buttons = im["blocks"][5]["elements"]
    assert [b.get("action_id") for b in buttons] == ["deploy", "wait", None]
    assert buttons[2]["url"] == "https://ci.example.com/1432"
    claim = box.claim_action(buttons[0]["value"])
    assert (claim.message.id, claim.action.id) == (sent["im"].id, "deploy")
    assert sent["im"].id in im["blocks"][-1]["elements"][0]["text"]

    # Webhook: heron's JSON with the card, each button's token and the identity.
    hook = json.loads(hook_body)
    assert (hook["text"], hook["card"]["title"], hook["from"]["name"]) == (
        PLAIN,
        "Deploy web-2?",
        "Heron (Ana's assistant)",
    )
    assert [a["id"] for a in hook["actions"]] == ["deploy", "wait"]
    assert box.claim_action(hook["actions"][1]["token"]).action.label == "Wait"

    # Mail: From the agent, threaded by the message id, the plain text and how to answer.
    mail = smtp.message()
    assert mail["From"] == '"Heron (Ana\'s assistant)" <heron@example.com>'
    assert mail["Message-ID"] == f"<heron.{sent['mail'].id}@example.com>"
    assert mail["Subject"] == "Deploy web-2?"
    body = mail.get_content().replace("\r\n", "\n")
    assert PLAIN in body and "reply with one of these as the first line: Deploy, Wait" in body
    assert body.rstrip().endswith(f"Heron, Ana's assistant — an AI agent\nref {sent['mail'].id}")
    assert sent["mail"].deliveries[-1].ref == mail["Message-ID"]
    assert box.store.find_by_ref([mail["Message-ID"]]) == box.store.get(sent["mail"].id)


async def test_mail_of_one_session_threads_together(
    tmp_path: Path, clock: FakeClock, smtp: SmtpSink
) -> None:
    person = PersonConfig(channels=["mail"], mail="ana@example.com")
    box = outbox(tmp_path, clock, person, smtp_port=smtp.port)
    first = await box.send(kind="message", text="One.", session="ops")
    await box.send(kind="message", text="Two.", session="ops")
    one, two = smtp.message(0), smtp.message(1)
    assert one["References"] == one["In-Reply-To"]  # the thread's stable root
    assert two["In-Reply-To"] == f"<heron.{first.id}@example.com>"
    assert two["References"].split()[0] == one["References"]


def test_a_forged_altered_or_expired_action_token_is_refused(
    tmp_path: Path, clock: FakeClock
) -> None:
    signer = TokenSigner(MessageKeyStore(tmp_path), clock=clock)
    token = signer.mint("action", ("msg-1", "deploy"), ttl_s=60)
    assert signer.verify(token, "action").parts == ("msg-1", "deploy")
    other = TokenSigner(MessageKeyStore(tmp_path / "elsewhere"), clock=clock)
    with pytest.raises(TokenError, match="key this heron does not hold"):
        signer.verify(other.mint("action", ("msg-1", "deploy"), ttl_s=60), "action")
    head, _, digest = token.rpartition(".")
    with pytest.raises(TokenError, match="signature mismatch"):
        signer.verify(head + "." + ("A" if digest[0] != "A" else "B") + digest[1:], "action")
    with pytest.raises(TokenError, match="not a reply token"):
        signer.verify(token, "reply")
    clock.advance(61)
    with pytest.raises(TokenError, match="expired"):
        signer.verify(token, "action")


def test_urgency_and_preference_choose_the_channels() -> None:
    ana = Person(
        name="ana",
        config=PersonConfig(
            channels=["console", "im", "mail"], mail="a@x.y", im="https://c.example/h"
        ),
    )
    available = ["console", "im", "mail"]
    plans = {
        u: plan_channels(ana, u, now=0, available=available).now
        for u in ("low", "normal", "high", "urgent")
    }
    assert plans == {
        "low": ("console",),
        "normal": ("console",),  # console first in her list
        "high": ("console", "im", "mail"),  # the first push that works
        "urgent": ("console", "im", "mail"),
    }
    mail_first = Person(name="ana", config=PersonConfig(channels=["mail", "console"], mail="a@x.y"))
    assert plan_channels(mail_first, "normal", now=0, available=available).now == (
        "console",
        "mail",
    )


async def test_quiet_hours_hold_pushes_until_they_end_and_urgent_breaks_them(
    tmp_path: Path, clock: FakeClock, http: HttpReceiver
) -> None:
    quiet = QuietHours(start="09:00", end="12:00", timezone="Europe/Berlin")  # 11:00 there
    person = PersonConfig(channels=["console", "webhook"], webhook=http.url, quiet_hours=quiet)
    box = outbox(tmp_path, clock, person)
    held = await box.send(kind="notification", text="Report ready.", urgency="high")
    assert held.delivered() == {"console": "ok"} and held.pending == ("webhook",)
    assert held.due_at == clock.time() + 3600  # 12:00 in Berlin
    urgent = await box.send(kind="notification", text="db-1 is down.", urgency="urgent")
    assert urgent.delivered() == {"console": "ok", "webhook": "ok"}
    assert len(http.requests) == 1
    clock.advance(1800)
    assert await box.tick() == []
    clock.advance(1800)
    [done] = await box.tick()
    assert done.id == held.id and done.delivered() == {"console": "ok", "webhook": "ok"}
    assert len(http.requests) == 2


async def test_an_unread_urgent_message_moves_to_the_next_channel_until_read(
    tmp_path: Path, clock: FakeClock, http: HttpReceiver, smtp: SmtpSink
) -> None:
    person = PersonConfig(
        channels=["console", "webhook", "mail"],
        webhook=http.url,
        mail="ana@example.com",
        recall_after_s=600,
    )
    box = outbox(tmp_path, clock, person, smtp_port=smtp.port)
    first = await box.send(kind="notification", text="db-1 is down.", urgency="urgent")
    assert first.delivered() == {"console": "ok", "webhook": "ok"}
    assert (first.pending, first.due_at) == (("mail",), clock.time() + 600)
    clock.advance(599)
    assert await box.tick() == [] and smtp.envelopes == []
    clock.advance(1)
    [recalled] = await box.tick()
    assert recalled.delivered()["mail"] == "ok" and len(smtp.envelopes) == 1

    second = await box.send(kind="notification", text="db-2 is down.", urgency="urgent")
    assert box.opened(second.id, via="console")
    clock.advance(600)
    assert await box.tick() == [] and len(smtp.envelopes) == 1  # read: no recall
