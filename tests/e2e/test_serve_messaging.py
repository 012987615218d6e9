"""A real `heron serve` reaching people, against real local peers: a chat service's incoming
webhook (an HTTP receiver on 127.0.0.1) and an SMTP server on 127.0.0.1.

A chat message needs a reply; the scripted model first answers in its own text (private: it
reaches nobody), gets ONE reminder turn, and sends a card. The button's signed token, posted
back to `/card`, becomes a `card.action` event the model answers with messages — to the user's
chat, and by mail to Bob as the agent itself. A forged token is refused. Bob's mail reply,
delivered over SMTP into serve's own listener, comes back on the thread and marks his message
answered; `heron messages` shows every message with its read state.
"""

from __future__ import annotations

import json
import smtplib
import time
from email.message import EmailMessage
from typing import Any

import httpx

from heron.messages import UserMessage
from heron.safety.signing import signed_headers
from heron.sessions.sqlite_store import SqliteSessionStore
from support.cli import Heron
from support.peers import http_receiver, smtp_sink_thread
from support.waiting import wait_until

SECRET = "messaging-test-secret"
CARD = {
    "title": "Deploy web-2?",
    "summary": "Build 1432 passed; web-2 is ready.",
    "actions": [
        {"type": "button", "id": "deploy", "label": "Deploy", "style": "primary"},
        {"type": "button", "id": "wait", "label": "Wait"},
    ],
}


def post(url: str, path: str, payload: dict[str, Any]) -> httpx.Response:
    body = json.dumps(payload).encode()
    headers = signed_headers(SECRET.encode(), body, time.time())
    return httpx.post(f"{url}{path}", content=body, headers=headers, trust_env=False)


def test_serve_speaks_only_through_its_tools_and_hears_answers_on_every_channel(
    heron: Heron,
) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    with http_receiver() as chat, smtp_sink_thread() as smtp:
        heron.write(
            "heron.toml",
            f"""
[identity]
name = "Heron (Ana's assistant)"
address = "heron@example.com"
signature = "Heron, Ana's assistant — an AI agent"

[user]
name = "ana"
channels = ["im", "console"]
im = "{chat.url}"

[people.bob]
channels = ["mail"]
mail = "bob@example.com"

[channels.mail]
host = "127.0.0.1"
port = {smtp.port}
starttls = false

[messages]
notify_after_s = 3600
""",
        )
        model = heron.script(
            "serve.yaml",
            [
                # 1: the answer in the model's own text reaches nobody ...
                {"text": "Yes, web-2 is deployed.", "expect": {"last_message_contains": "web-2"}},
                # 2: ... so one reminder turn follows, and the model sends a card.
                {
                    "tool_calls": [
                        {"id": "card-1", "name": "send_card", "arguments": {"card": CARD}}
                    ],
                    "expect": {"last_message_contains": "need a reply"},
                },
                {"text": "Asked Ana with a card."},
                # 3: the button press comes back as an event.
                {
                    "tool_calls": [
                        {
                            "id": "msg-1",
                            "name": "send_message",
                            "arguments": {"text": "Deploying web-2 now."},
                        },
                        {
                            "id": "msg-2",
                            "name": "send_message",
                            "arguments": {"text": "Bob, web-2 goes out today; ok?", "to": "bob"},
                        },
                    ],
                    "expect": {"last_message_contains": "pressed [Deploy]"},
                },
                {"text": "Told Ana and Bob."},
                # 4: Bob's reply by mail.
                {"text": "Bob agreed.", "expect": {"last_message_contains": "fine by me"}},
            ],
        )
        heron.write("Maildir/.keep", "")
        serve = heron.start(
            "serve",
            "--model",
            model,
            "--webhook-port",
            "0",
            "--subscribe",
            "im",
            "--subscribe",
            "mail",
            "--maildir",
            "Maildir",
            "--smtp-port",
            "0",
            "--mail-domain",
            "example.com",
            "--poll-interval",
            "0.2",
        )
        started = serve.wait_for_event("serve_started")
        url, smtp_in = started["webhook"], started["smtp"]
        assert {"send_message", "send_card", "send_notification"} <= set(started["tools"])

        asked = post(
            url,
            "/im",
            {
                "platform": "slack",
                "message_id": "m1",
                "sender": {"id": "U1"},
                "text": "is web-2 deployed?",
            },
        )
        assert asked.status_code == 202, asked.text
        serve.wait_for_event("final", text="Asked Ana with a card.")
        wait_until(lambda: len(chat.requests) == 1)
        card = json.loads(chat.requests[0][1])
        assert card["text"].startswith("Deploy web-2?\nBuild 1432 passed; web-2 is ready.")
        [actions] = [b for b in card["blocks"] if b["type"] == "actions"]
        deploy = actions["elements"][0]
        assert deploy["action_id"] == "deploy"

        forged = post(url, "/card", {"token": deploy["value"][:-2] + "xx", "by": "U1"})
        assert forged.status_code == 401 and "action token refused" in forged.json()["error"]
        pressed = post(url, "/card", {"token": deploy["value"], "by": "U1"})
        assert pressed.status_code == 202, pressed.text
        again = post(url, "/card", {"token": deploy["value"], "by": "U1"})
        assert again.json()["status"] == "duplicate"
        serve.wait_for_event("final", text="Told Ana and Bob.")

        wait_until(lambda: len(smtp.envelopes) == 1 and len(chat.requests) == 2)
        assert json.loads(chat.requests[1][1]) == {
            "text": "Deploying web-2 now.\n— Heron, Ana's assistant — an AI agent"
        }
        to_bob = smtp.message()
        assert to_bob["From"] == '"Heron (Ana\'s assistant)" <heron@example.com>'
        assert to_bob["To"] == "bob@example.com"
        assert "Heron, Ana's assistant — an AI agent" in to_bob.get_content()

        reply = EmailMessage()
        reply["From"] = "Bob <bob@example.com>"
        reply["To"] = "heron@example.com"
        reply["Subject"] = "Re: " + str(to_bob["Subject"])
        reply["Message-ID"] = "<bob-reply-1@example.com>"
        reply["In-Reply-To"] = to_bob["Message-ID"]
        reply["References"] = f"{to_bob['References']} {to_bob['Message-ID']}"
        reply.set_content("fine by me\n\nOn Tuesday Heron wrote:\n> Bob, web-2 goes out today; ok?")
        with smtplib.SMTP("127.0.0.1", smtp_in, timeout=10) as client:
            client.send_message(reply)
        serve.wait_for_event("final", text="Bob agreed.")

        serve.interrupt()
        done = serve.finish()
        assert done.code == 0, done.stderr

    listed = heron.run("messages", "list", "--json")
    assert listed.code == 0, listed.stderr
    messages = {m["text"].splitlines()[0]: m for m in map(json.loads, listed.stdout.splitlines())}
    assert set(messages) == {
        "Deploy web-2?",
        "Deploying web-2 now.",
        "Bob, web-2 goes out today; ok?",
    }
    assert messages["Deploy web-2?"]["answered_via"] == "im"
    assert messages["Bob, web-2 goes out today; ok?"]["answered_via"] == "mail"
    assert messages["Deploying web-2 now."]["read_at"] is None
    shown = heron.run("messages", "show", messages["Deploying web-2 now."]["id"])
    assert "from Heron (Ana's assistant) <heron@example.com> to ana" in shown.stdout
    unread = heron.run("messages", "list", "--unread", "--json")
    assert unread.stdout == ""

    store = SqliteSessionStore.open(heron.state_dir)
    try:
        history = store.load("default")
    finally:
        store.close()
    reminders = [m for m in history if isinstance(m, UserMessage) and "need a reply" in m.content]
    assert len(reminders) == 1 and reminders[0].source == "runtime"
