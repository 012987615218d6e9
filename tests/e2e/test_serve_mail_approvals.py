"""Mail as an approval channel, on a real `heron serve` with real SMTP peers: the request goes
out by mail to the configured approver (an SMTP server on 127.0.0.1); a forged reply (another
sender) is refused and its sender told; the approver's "approve" reply, delivered into serve's
own SMTP listener, decides it — the tool runs once, the decision is signed and verifies — and a
replay of that reply is refused."""

from __future__ import annotations

import json
import smtplib
import time
from email.message import EmailMessage

import httpx

from heron.safety.signing import signed_headers
from support.cli import Heron
from support.peers import SmtpSink, smtp_sink_thread
from support.waiting import wait_until

SECRET = "mail-approvals-secret"
PAY_TOOL = '''
from pathlib import Path

import heron


@heron.tool(requires_approval=True)
def pay(to: str, amount: int) -> str:
    """Pay an invoice; every payment is one line in payments.log.

    Args:
        to: The payee.
        amount: How much, in whole euros.
    """
    with (Path.cwd() / "payments.log").open("a", encoding="utf-8") as log:
        log.write(f"{to} {amount}\\n")
    return f"paid {amount} to {to}"
'''


def reply(to_request: EmailMessage, sender: str, text: str, message_id: str) -> EmailMessage:
    mail = EmailMessage()
    mail["From"] = sender
    mail["To"] = "heron@example.com"
    mail["Subject"] = "Re: " + str(to_request["Subject"])
    mail["Message-ID"] = message_id
    mail["In-Reply-To"] = to_request["Message-ID"]
    mail["References"] = to_request["Message-ID"]
    mail.set_content(f"{text}\n\nOn Tuesday heron wrote:\n> {to_request.get_content()[:40]}")
    return mail


def deliver(port: int, mail: EmailMessage) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
        client.send_message(mail)


def sent_to(sink: SmtpSink, address: str) -> list[EmailMessage]:
    return [sink.message(i) for i in range(len(sink.envelopes)) if sink.message(i)["To"] == address]


def test_an_approver_answers_by_mail_and_forged_and_replayed_replies_are_refused(
    heron: Heron,
) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    heron.write("pay.py", PAY_TOOL)
    with smtp_sink_thread() as smtp:
        heron.write(
            "heron.toml",
            f"""
[identity]
name = "Heron"
address = "heron@example.com"

[approvals.approvers]
mail = ["ops@example.com"]

[channels.mail]
host = "127.0.0.1"
port = {smtp.port}
starttls = false
""",
        )
        model = heron.script(
            "serve.yaml",
            [
                {
                    "tool_calls": [
                        {"id": "c_pay", "name": "pay", "arguments": {"to": "ACME", "amount": 120}}
                    ],
                    "expect": {"last_message_contains": "pay ACME"},
                },
                {"text": "Waiting for ops."},
                {
                    "tool_calls": [
                        {
                            "id": "tell",
                            "name": "send_message",
                            "arguments": {"text": "I asked ops to approve paying ACME 120."},
                        }
                    ],
                    "expect": {"last_message_contains": "need a reply"},
                },
                {"text": "Told you."},
                {
                    "text": "Paid ACME 120.",
                    "expect": {"last_message_contains": "approved by mail:ops@example.com"},
                },
            ],
        )
        heron.write("Maildir/.keep", "")
        serve = heron.start_serve(
            model,
            "--tools",
            "pay.py",
            "--maildir",
            "Maildir",
            "--smtp-port",
            "0",
            "--mail-domain",
            "example.com",
            subscribe="im",
        )
        started = serve.wait_for_event("serve_started")
        body = json.dumps(
            {
                "platform": "chat",
                "message_id": "m1",
                "sender": {"id": "U9"},
                "text": "please pay ACME 120 for invoice 7",
            }
        ).encode()
        posted = httpx.post(
            f"{started['webhook']}/im",
            content=body,
            headers=signed_headers(SECRET.encode(), body, time.time()),
            trust_env=False,
        )
        assert posted.status_code == 202, posted.text
        assert serve.wait_for_event("tool_result", id="c_pay")["status"] == "awaiting_approval"
        serve.wait_for_event("final", text="Told you.")
        wait_until(lambda: len(sent_to(smtp, "ops@example.com")) == 1)
        [request_mail] = sent_to(smtp, "ops@example.com")
        assert request_mail["From"] == "Heron <heron@example.com>"
        assert str(request_mail["Message-ID"]).startswith("<heron.reply.h1.reply.")
        content = request_mail.get_content()
        assert "Tool: pay" in content and "'approve' or 'deny: reason'" in content

        forged = reply(request_mail, "Mallory <mallory@example.com>", "approve", "<forged@x>")
        deliver(started["smtp"], forged)
        wait_until(lambda: len(sent_to(smtp, "mallory@example.com")) == 1)
        [told_mallory] = sent_to(smtp, "mallory@example.com")
        assert "only ops@example.com may answer" in told_mallory.get_content()
        assert not (heron.root / "payments.log").exists()

        approve = reply(
            request_mail, "Ops <ops@example.com>", "approve: invoice 7 is right", "<ok@x>"
        )
        deliver(started["smtp"], approve)
        serve.wait_for_event("final", text="Paid ACME 120.")
        wait_until(lambda: len(sent_to(smtp, "ops@example.com")) == 2)
        assert "Recorded:" in sent_to(smtp, "ops@example.com")[1].get_content()

        replay = reply(request_mail, "Ops <ops@example.com>", "approve", "<replay@x>")
        deliver(started["smtp"], replay)
        wait_until(lambda: len(sent_to(smtp, "ops@example.com")) == 3)
        assert "already used" in sent_to(smtp, "ops@example.com")[2].get_content()

        serve.interrupt()
        assert serve.finish().code == 0

    assert (heron.root / "payments.log").read_text(encoding="utf-8") == "ACME 120\n"
    listed = heron.run("approvals", "list", "--status", "all", "--json")
    [request] = json.loads(listed.stdout)
    assert request["answered_by"] == "mail:ops@example.com"
    verified = heron.run("approvals", "verify", request["id"])
    assert verified.code == 0 and verified.stdout.startswith("valid:"), verified.stdout
