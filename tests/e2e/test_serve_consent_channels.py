"""An MCP OAuth consent that travels by mail, or is pasted in the web console, on a real
`heron serve`.

A real authorization server with an SDK-built protected MCP server on loopback
(`support.oauth_servers`). heron was logged in once; serve starts connected, then the
authorization server revokes its tokens, so the agent's next call finds the server
`auth_required` and serve asks for consent. The operator's only channel is mail: serve's
requests go out to an SMTP server on 127.0.0.1, the operator's replies come in through serve's
own SMTP listener. The gateway's public address does not answer, so the browser cannot come back
to heron: the operator replies with the address it landed on. Replies from another address,
with another login's state, without the trusted server's verdict, or replayed are refused, each
sender told why, and none of them spends the request; the agent's next call goes through. A `no`
refuses the login, and the agent's next call says so. In the web console (the gateway's API),
an operator pastes the address instead; another login's address is refused the same way.
"""

from __future__ import annotations

import asyncio
import json
import smtplib
import time
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx2

from heron.safety.signing import signed_headers
from support.cli import Heron, Running
from support.oauth_servers import Protected, protected_server
from support.peers import SmtpSink, smtp_sink
from support.waiting import poll_until

SECRET = "mail-consent-secret"
CALLBACK = "https://heron.invalid/mcp/oauth/callback"
VERIFIED = "Authentication-Results: mx.example.com; dkim=pass header.d=example.com header.s=s1"


def _configure(heron: Heron, srv: Protected, smtp: SmtpSink) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    heron.write(
        "heron.toml",
        f"""
[agent]
autonomy = "full"

[identity]
name = "Heron"
address = "heron@example.com"

[approvals.approvers]
mail = ["ops@example.com"]

[channels.mail]
host = "127.0.0.1"
port = {smtp.port}
starttls = false
trusted_authserv_ids = ["mx.example.com"]

[gateway]
public_url = "https://heron.invalid"

[mcp.servers.tickets]
url = "{srv.url}"
auth = "oauth"
""",
    )
    heron.write("Maildir/.keep", "")


async def _logged_in_then_revoked(
    heron: Heron, srv: Protected, model: str, *flags: str
) -> tuple[Running, dict[str, Any]]:
    """Log in once (the authorization server consents at once), start serve connected, then
    revoke every token: serve's next call needs a new consent."""
    from heron.mcp.auth import FollowRedirectConsent, McpAuth
    from heron.mcp.config import McpServerConfig

    servers = {"tickets": McpServerConfig(url=srv.url, auth="oauth")}
    auth = McpAuth(servers, state_dir=heron.state_dir, token_key="")
    await auth.login("tickets", channel=FollowRedirectConsent(redirect_uri=CALLBACK))
    serve = heron.start_serve(model, *flags)
    started = await asyncio.to_thread(serve.wait_for_event, "serve_started")
    srv.auth.access.clear()
    srv.auth.refresh.clear()
    return serve, started


MAIL_FLAGS = ("--maildir", "Maildir", "--smtp-port", "0", "--mail-domain", "example.com")


def _sent_to(sink: SmtpSink, address: str) -> list[EmailMessage]:
    found = (sink.message(i) for i in range(len(sink.envelopes)))
    return [m for m in found if m["To"] == address]


async def _mail_to(sink: SmtpSink, address: str, count: int) -> EmailMessage:
    await poll_until(lambda: len(_sent_to(sink, address)) >= count, f"mail {count} to {address}")
    return _sent_to(sink, address)[count - 1]


def _reply(asked: EmailMessage, sender: str, text: str, *, headers: str = "") -> EmailMessage:
    mail = EmailMessage()
    for line in filter(None, headers.splitlines()):
        name, _, value = line.partition(": ")
        mail[name] = value
    mail["From"] = sender
    mail["To"] = "heron@example.com"
    mail["Subject"] = "Re: " + str(asked["Subject"])
    mail["Message-ID"] = f"<{time.monotonic_ns()}@client.example.com>"
    mail["In-Reply-To"] = asked["Message-ID"]
    mail["References"] = asked["Message-ID"]
    mail.set_content(f"{text}\n\nOn Tuesday Heron wrote:\n> {asked.get_content()[:60]}")
    return mail


async def _deliver(port: int, mail: EmailMessage) -> None:
    def send() -> None:
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
            client.send_message(mail)

    await asyncio.to_thread(send)


async def _redirect_of(url: str) -> str:
    """The operator's browser: the authorization server consents at once and redirects."""
    async with httpx2.AsyncClient(follow_redirects=False, timeout=10) as http:
        answer = await http.get(url)
    assert answer.status_code in (302, 303, 307), answer.text
    return str(answer.headers["location"])


def _authorization_url(mail: EmailMessage) -> str:
    return next(x.strip() for x in mail.get_content().splitlines() if "/authorize?" in x)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


async def _post(url: str, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    headers = signed_headers(SECRET.encode(), body, time.time())
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.post(f"{url}/webhook", content=body, headers=headers)
    assert response.status_code == 202, response.text


def _whoami(call: str, asked: str, then: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "tool_calls": [{"id": call, "name": "tickets__whoami", "arguments": {}}],
            "expect": {"last_message_contains": asked},
        },
        then,
    ]


def _whoami_twice(heron: Heron, first: str, then: dict[str, Any]) -> str:
    """The script of a turn asking the server who the user is (answered `first`) and of a
    later one asking again (answered `then`)."""
    return heron.script(
        "serve.yaml",
        [*_whoami("w1", "who am I", {"text": first}), *_whoami("w2", "and now", then)],
    )


async def test_the_operator_consents_by_mail_reply_and_refused_replies_lose_nothing(
    heron: Heron,
) -> None:
    from heron.mcp.auth import token_path

    model = _whoami_twice(
        heron,
        "Waiting for the login.",
        {"text": "You are in.", "expect": {"last_message_contains": "you are authorised"}},
    )
    async with smtp_sink() as smtp, protected_server(scopes=["tickets:read"]) as srv:
        _configure(heron, srv, smtp)
        serve, started = await _logged_in_then_revoked(heron, srv, model, *MAIL_FLAGS)
        await _post(started["webhook"], {"id": "m1", "text": "who am I at tickets?"})
        waiting = await asyncio.to_thread(serve.wait_for_event, "tool_result", id="w1")
        await asyncio.to_thread(serve.wait_for_event, "final", text="Waiting for the login.")
        asked = await _mail_to(smtp, "ops@example.com", 1)
        location = await _redirect_of(_authorization_url(asked))
        assert location.startswith(CALLBACK + "?")

        refusals: dict[str, list[str]] = {}
        for who, text, headers in (
            ("mallory@example.com", location, VERIFIED.replace("example.com;", "x;")),
            ("ops@example.com", location.replace("state=", "state=other"), VERIFIED),
            ("ops@example.com", location, ""),  # no trusted server vouches for the sender
        ):
            await _deliver(started["smtp"], _reply(asked, who, text, headers=headers))
            told = refusals.setdefault(who, [])
            count = len(told) + (2 if who == "ops@example.com" else 1)
            told.append((await _mail_to(smtp, who, count)).get_content())
        tokens = token_path(heron.state_dir, "tickets")
        issued_before, revoked = len(srv.auth.issued), _read(tokens)

        accepted = _reply(asked, "Ops <ops@example.com>", location, headers=VERIFIED)
        await _deliver(started["smtp"], accepted)
        recorded = (await _mail_to(smtp, "ops@example.com", 4)).get_content()
        await poll_until(lambda: _read(tokens) not in (b"", revoked), "serve's new tokens")
        await _deliver(started["smtp"], accepted)  # the same reply again
        replay = (await _mail_to(smtp, "ops@example.com", 5)).get_content()

        await _post(started["webhook"], {"id": "m2", "text": "and now, who am I?"})
        connected = await asyncio.to_thread(serve.wait_for_event, "tool_result", id="w2")
        await asyncio.to_thread(serve.wait_for_event, "final", text="You are in.")
        serve.interrupt()
        stopped = await asyncio.to_thread(serve.finish)
        secrets = srv.auth.secrets()
        new_logins = len(srv.auth.authorizations) - 1

    subject = str(asked["Subject"])
    assert subject.startswith(
        "[high] MCP server 'tickets' needs your consent for tickets:read (ask-"
    )
    content = asked.get_content()
    assert CALLBACK in content and "first line of a reply to this request's mail" in content
    assert "x-heron" not in content and "sealed" not in content  # no key, no digest in the mail
    assert waiting["status"] != "ok" and "consent" in waiting["output"], waiting
    [mallory] = refusals["mallory@example.com"]
    forged, unverified = refusals["ops@example.com"]
    assert "only ops@example.com may answer" in mallory
    assert "its `state` is not this request's" in forged
    assert "authenticated mail" in unverified
    assert issued_before == 1  # no refused reply completed the login
    assert "Recorded:" in recorded and "answered by mail:ops@example.com" in recorded
    assert "already used" in replay
    assert connected["status"] == "ok" and new_logins == 1, connected
    assert b"access_token" in _read(tokens) and stopped.code == 0, stopped.stderr
    # The code and the tokens stay out of the database, serve's output and every mail sent.
    database = b"".join(p.read_bytes() for p in heron.state_dir.glob("heron.db*"))
    sent = "".join(smtp.message(i).as_string() for i in range(len(smtp.envelopes)))
    assert b"code=" not in database
    for secret in secrets:
        assert secret.encode() not in database, secret
        assert secret not in stopped.stdout + stopped.stderr + sent, secret


async def test_a_no_by_mail_refuses_the_login_and_the_agent_is_told(heron: Heron) -> None:
    model = _whoami_twice(heron, "Waiting for the login.", {"text": "Still refused."})
    async with smtp_sink() as smtp, protected_server(scopes=["tickets:read"]) as srv:
        _configure(heron, srv, smtp)
        serve, started = await _logged_in_then_revoked(heron, srv, model, *MAIL_FLAGS)
        await _post(started["webhook"], {"id": "m1", "text": "who am I at tickets?"})
        await asyncio.to_thread(serve.wait_for_event, "final", text="Waiting for the login.")
        asked = await _mail_to(smtp, "ops@example.com", 1)
        refuse = _reply(asked, "ops@example.com", "no", headers=VERIFIED)
        await _deliver(started["smtp"], refuse)
        recorded = (await _mail_to(smtp, "ops@example.com", 2)).get_content()
        await asyncio.to_thread(serve.wait_for_stderr, "mcp: the login to tickets failed")
        await _post(started["webhook"], {"id": "m2", "text": "and now, who am I?"})
        refused = await asyncio.to_thread(serve.wait_for_event, "tool_result", id="w2")
        serve.interrupt()
        stopped = await asyncio.to_thread(serve.finish)
        issued = len(srv.auth.issued)

    assert "Recorded:" in recorded
    assert refused["status"] != "ok" and "refused by mail:ops@example.com" in refused["output"]
    assert issued == 1  # only the first login's tokens
    assert stopped.code == 0, stopped.stderr


async def test_an_operator_pastes_the_address_in_the_web_console_and_a_wrong_one_is_refused(
    heron: Heron,
) -> None:
    from heron._support.vocabulary import ACTIVE_STATUSES
    from heron.gateway.auth import hash_token
    from heron.mcp.auth import token_path
    from heron.mcp.auth.desk_consent import CONSENT_TOOL

    token = "operator-token-for-the-consent-test"
    model = _whoami_twice(heron, "Waiting for the login.", {"text": "You are in."})
    async with protected_server(scopes=["tickets:read"]) as srv:
        heron.env["HERON_WEBHOOK_SECRET"] = SECRET
        heron.write(
            "heron.toml",
            f"""
[agent]
autonomy = "full"

[approvals.approvers]
gateway = ["ops"]
console = ["alice"]  # serve's stderr line says when it has asked

[[gateway.tokens]]
principal = "ops"
role = "operator"
sha256 = "{hash_token(token)}"

[gateway]
public_url = "https://heron.invalid"

[mcp.servers.tickets]
url = "{srv.url}"
auth = "oauth"
""",
        )
        serve, started = await _logged_in_then_revoked(heron, srv, model, "--http-port", "0")
        await _post(started["webhook"], {"id": "m1", "text": "who am I at tickets?"})
        await asyncio.to_thread(serve.wait_for_event, "final", text="Waiting for the login.")
        await asyncio.to_thread(serve.wait_for_stderr, "needs your consent")
        tokens = token_path(heron.state_dir, "tickets")
        revoked = _read(tokens)
        auth = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(base_url=started["http"], headers=auth, timeout=10) as api:
            pending = (await api.get("/v1/requests")).json()["requests"]
            [asked] = [r for r in pending if r["tool"] == CONSENT_TOOL]
            url = next(x.strip() for x in asked["question"].splitlines() if "/authorize?" in x)
            location = await _redirect_of(url)
            other = location.replace("state=", "state=other")
            refused = await api.post(f"/v1/requests/{asked['id']}/answer", json={"value": other})
            still = (await api.get(f"/v1/requests/{asked['id']}")).json()
            answered = await api.post(
                f"/v1/requests/{asked['id']}/answer", json={"value": location}
            )
        # The new tokens are in the token file: the next connection uses them.
        await poll_until(lambda: _read(tokens) not in (b"", revoked), "serve's new tokens")
        await _post(started["webhook"], {"id": "m2", "text": "and now, who am I?"})
        connected = await asyncio.to_thread(serve.wait_for_event, "tool_result", id="w2")
        serve.interrupt()
        stopped = await asyncio.to_thread(serve.finish)

    assert refused.status_code == 422, refused.text
    assert "its `state` is not this request's" in refused.json()["error"]
    assert still["status"] in ACTIVE_STATUSES, still
    assert answered.status_code == 200, answered.text
    assert answered.json()["answered_by"] == "gateway:ops"
    assert connected["status"] == "ok", connected
    assert stopped.code == 0, stopped.stderr


async def test_a_server_without_tokens_at_start_joins_the_session_once_its_consent_is_answered(
    heron: Heron,
) -> None:
    """serve starts with no tokens at all, so the server has no tools in the session; the
    operator answers the consent with `heron approvals answer`, and without a restart the
    agent's next call to the server's tool goes through, in the session that was awake."""
    from heron.humans.sqlite_store import SqliteRequestStore
    from heron.mcp.auth.desk_consent import CONSENT_TOOL

    model = _whoami_twice(heron, "No such tool yet.", {"text": "You are in."})
    async with protected_server(scopes=["tickets:read"]) as srv:
        heron.env["HERON_WEBHOOK_SECRET"] = SECRET
        heron.write(
            "heron.toml",
            f"""
[agent]
autonomy = "full"

[approvals.approvers]
console = ["alice"]

[mcp.servers.tickets]
url = "{srv.url}"
auth = "oauth"
""",
        )
        serve = heron.start_serve(model)
        started = await asyncio.to_thread(serve.wait_for_event, "serve_started")
        await asyncio.to_thread(serve.wait_for_stderr, "needs your consent")
        await _post(started["webhook"], {"id": "m1", "text": "who am I at tickets?"})
        before = await asyncio.to_thread(serve.wait_for_event, "tool_result", id="w1")
        store = SqliteRequestStore.open_dir(heron.state_dir)
        try:
            [asked] = [r for r in store.list(limit=10) if r.tool == CONSENT_TOOL]
        finally:
            store.close()
        url = next(x.strip() for x in asked.question.splitlines() if "/authorize?" in x)
        location = await _redirect_of(url)
        answered = await asyncio.to_thread(
            heron.run, "approvals", "answer", asked.id, location, "--as", "alice"
        )
        # serve says when the server's tools are in the sessions: no restart, no sleep.
        await asyncio.to_thread(serve.wait_for_stderr, "tool(s) now in the sessions")
        await _post(started["webhook"], {"id": "m2", "text": "and now, who am I?"})
        after = await asyncio.to_thread(serve.wait_for_event, "tool_result", id="w2")
        serve.interrupt()
        stopped = await asyncio.to_thread(serve.finish)

    assert before["status"] != "ok" and "Unknown tool" in str(before), before
    assert answered.code == 0, answered.stderr
    assert after["status"] == "ok", after
    assert stopped.code == 0, stopped.stderr
    assert "MCP server 'tickets': 1 tool(s) now in the sessions" in stopped.stderr
