"""`heron serve` starts listener-first: webhooks are durably accepted while the agent side is
still being built, and processed exactly once when it is up — or by the next start, when the
process is killed -9 before that. On the embedded SQLite store and on a shared PostgreSQL one.

The slow part of the start is made slow deterministically: the user's tool module (`--tools`)
opens the FIFO `gate` at import, which blocks until the test opens it for writing. The agent
side imports it; the intake (the bus and the webhook listener) does not.
"""

from __future__ import annotations

import asyncio
import json
import os
import smtplib
import time
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx

from heron.always_on.bus.postgres_store import PostgresBusStore
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.messages import UserMessage
from heron.safety.signing import signed_headers
from heron.sessions.postgres_store import PostgresSessionStore
from support.cli import TIMEOUT_S, Finished, Heron, Running
from support.postgres import PostgresServer, postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here

SECRET = "listener-first-test-secret"
SIGNING = "alerts-signing-value-0123456789"
GATED_TOOLS = '''
from pathlib import Path

from heron import tool

Path("gate").read_bytes()  # a FIFO: waits until the test opens it for writing, then closes it


@tool
def noop() -> str:
    """Do nothing."""
    return "ok"
'''


def serve(heron: Heron, *flags: str) -> Running:
    model = heron.script("script.yaml", [{"text": "done"} for _ in range(4)])
    return heron.start_serve(model, "--session", "main", "--tools", "gated_tools.py", *flags)


def post(url: str, path: str, body: bytes, *, secret: str = SECRET) -> httpx.Response:
    headers = signed_headers(secret.encode(), body, time.time())
    return httpx.post(url + path, content=body, headers=headers, trust_env=False)


def webhook(event_id: str, text: str) -> bytes:
    return json.dumps({"id": event_id, "text": text}).encode()


def stored(state_dir: Path) -> list[tuple[str, str, bool]]:
    """(session, text, consumed) of every bus event, in order."""
    return _stored(SqliteBusStore.open(state_dir))


def _stored(bus: SqliteBusStore | PostgresBusStore) -> list[tuple[str, str, bool]]:
    try:
        return [
            (s.event.session, s.event.content.text, s.consumed)
            for s in asyncio.run(bus.events(limit=None))
        ]
    finally:
        bus.close()


def turns_on(state_dir: Path, session: str, text: str) -> int:
    """How many user messages of the session's history carry `text`."""
    bus = SqliteBusStore.open(state_dir)
    try:
        history = bus.sessions.load(session)
    finally:
        bus.close()
    return sum(1 for m in history if isinstance(m, UserMessage) and text in m.content)


def open_gate(heron: Heron) -> None:
    with (heron.root / "gate").open("wb"):  # the importing thread's read then ends
        pass


def finals(running: Running, sessions: set[str]) -> None:
    """Read events until each of `sessions` ended a turn."""
    waiting = set(sessions)
    while waiting:
        event = running.next_event()
        if event["type"] == "final":
            waiting.discard(event["session"])


def release_and_stop(
    heron: Heron, running: Running, sessions: set[str]
) -> tuple[dict[str, Any], Finished]:
    """Open the gate, wait until the server runs and `sessions` ended a turn, stop it."""
    open_gate(heron)
    started = running.wait_for_event("serve_started")
    finals(running, sessions)
    running.proc.terminate()
    return started, running.finish()


def test_webhooks_accepted_while_the_agent_side_starts_are_processed_once_after(
    heron: Heron,
) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    # A secret only the configuration names (not secret-shaped by its variable's name).
    heron.env["ALERTS_SIGNING"] = SIGNING
    heron.write(
        "heron.toml",
        '[telemetry]\nalerts_webhook_secret_env = "ALERTS_SIGNING"\n\n[limits]\nmax_depth = 8\n',
    )
    heron.write("gated_tools.py", GATED_TOOLS)
    os.mkfifo(heron.root / "gate")
    running = serve(heron)
    try:
        accepting = running.wait_for_event("serve_accepting")
        url = accepting["webhook"]
        assert accepting["http"] is None

        # The agent side waits on the gate: every answer here comes from the intake alone.
        first = post(url, "/webhook", webhook("e1", "first while starting"))
        assert first.status_code == 202, first.text
        other = post(url, "/webhook/other", webhook("e2", "second, to another session"))
        assert other.status_code == 202, other.text
        again = post(url, "/webhook", webhook("e1", "first while starting"))
        assert (again.status_code, again.json()["status"]) == (200, "duplicate")
        forged = post(url, "/webhook", webhook("e3", "forged"), secret="not-the-secret")
        assert forged.status_code == 401
        assert post(url, "/webhook", b"{not json").status_code == 400
        deep = {"id": "e5", "text": "too deep", "data": [[[[[[[[[]]]]]]]]]}  # 10 levels
        assert post(url, "/webhook", json.dumps(deep).encode()).status_code == 422  # [limits]
        # A route of the agent side is not taken yet: "retry later", not "no such path".
        card = post(url, "/card", b"{}")
        assert (card.status_code, card.json()["status"]) == (503, "starting")
        assert card.headers["retry-after"] == "1"
        leaked = post(url, "/webhook", webhook("e4", f"the signing key is {SIGNING}"))
        assert leaked.status_code == 202, leaked.text
        assert stored(heron.state_dir)[:2] == [
            ("main", "first while starting", False),
            ("other", "second, to another session", False),
        ]
        # Masked as it was stored, though the agent side has not registered anything yet.
        [(_, masked, _)] = stored(heron.state_dir)[2:]
        assert SIGNING not in masked and masked.startswith("the signing key is ")

        open_gate(heron)
        started = running.wait_for_event("serve_started")
        assert "noop" in started["tools"]
        finals(running, {"main", "other"})
        # Mounted now: `/card` is a route (an unsigned request to it is refused, not 503).
        assert post(url, "/card", b"{}", secret="not-the-secret").status_code == 401
        running.proc.terminate()
        finished = running.finish()
    finally:
        if (heron.root / "gate").is_fifo():
            (heron.root / "gate").unlink()  # never leave a reader blocked
    assert finished.code == 0, finished.stderr
    assert [e["type"] for e in finished.events()].count("serve_accepting") == 1

    assert all(consumed for _, _, consumed in stored(heron.state_dir))
    assert turns_on(heron.state_dir, "main", "first while starting") == 1
    assert turns_on(heron.state_dir, "other", "second, to another session") == 1


def test_kill_9_while_the_agent_side_starts_loses_no_accepted_event(heron: Heron) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    heron.write("gated_tools.py", GATED_TOOLS)
    gate = heron.root / "gate"
    os.mkfifo(gate)
    one = serve(heron)
    url = one.wait_for_event("serve_accepting")["webhook"]
    for index, (path, text) in enumerate(
        [("/webhook", "accepted before the kill"), ("/webhook/other", "and this one too")]
    ):
        response = post(url, path, webhook(f"k{index}", text))
        assert response.status_code == 202, response.text
    one.proc.kill()  # SIGKILL with the agent side still waiting on the gate
    one.proc.wait(timeout=TIMEOUT_S)
    assert [consumed for _, _, consumed in stored(heron.state_dir)] == [False, False]

    gate.unlink()
    gate.write_bytes(b"")  # a plain file: the next start's import does not wait
    two = serve(heron)
    two.wait_for_event("serve_started")
    finals(two, {"main", "other"})
    two.proc.terminate()
    finished = two.finish()
    assert finished.code == 0, finished.stderr

    assert all(consumed for _, _, consumed in stored(heron.state_dir))
    assert turns_on(heron.state_dir, "main", "accepted before the kill") == 1
    assert turns_on(heron.state_dir, "other", "and this one too") == 1


def test_mail_over_smtp_is_accepted_while_the_agent_side_starts_and_processed_once_after(
    heron: Heron,
) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    heron.write("gated_tools.py", GATED_TOOLS)
    os.mkfifo(heron.root / "gate")
    model = heron.script("script.yaml", [{"text": "done"} for _ in range(2)])
    mail_flags = ("--maildir", "Maildir", "--smtp-port", "0", "--mail-domain", "example.com")
    running = heron.start_serve(
        model, "--session", "main", "--tools", "gated_tools.py", *mail_flags, subscribe="mail"
    )
    try:
        accepting = running.wait_for_event("serve_accepting")
        mail = EmailMessage()
        mail["From"] = "Ana <ana@example.com>"
        mail["To"] = "heron@example.com"
        mail["Subject"] = "sent while starting"
        mail["Message-ID"] = "<early-1@example.com>"
        mail.set_content("Is the report ready?")
        with smtplib.SMTP("127.0.0.1", accepting["smtp"], timeout=TIMEOUT_S) as client:
            refused = client.sendmail("ana@example.com", ["heron@example.com"], mail.as_bytes())
        assert refused == {}
        assert len(list((heron.root / "Maildir" / "new").iterdir())) == 1  # stored, not yet taken
        started, finished = release_and_stop(heron, running, {"main"})
        assert started["smtp"] == accepting["smtp"]  # the one listener, taken over
    finally:
        if (heron.root / "gate").is_fifo():
            (heron.root / "gate").unlink()
    assert finished.code == 0, finished.stderr
    assert list((heron.root / "Maildir" / "new").iterdir()) == []
    assert [(s, consumed) for s, _, consumed in stored(heron.state_dir)] == [("main", True)]
    assert turns_on(heron.state_dir, "main", "Is the report ready?") == 1


def test_on_a_shared_postgresql_store_webhooks_are_accepted_before_the_agent_side(
    heron: Heron, postgres_url: str
) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    heron.write("gated_tools.py", GATED_TOOLS)
    os.mkfifo(heron.root / "gate")
    running = serve(heron, "--store", postgres_url)
    try:
        url = running.wait_for_event("serve_accepting")["webhook"]
        # The agent side waits on the gate: the intake alone answers, into the shared bus.
        first = post(url, "/webhook", webhook("p1", "accepted into postgres"))
        assert first.status_code == 202, first.text
        again = post(url, "/webhook", webhook("p1", "accepted into postgres"))
        assert (again.status_code, again.json()["status"]) == (200, "duplicate")
        assert post(url, "/webhook", webhook("p2", "x"), secret="wrong").status_code == 401
        card = post(url, "/card", b"{}")
        assert (card.status_code, card.json()["status"]) == (503, "starting")
        shared = PostgresBusStore(PostgresSessionStore.open(postgres_url))
        assert _stored(shared) == [("main", "accepted into postgres", False)]
        _, finished = release_and_stop(heron, running, {"main"})
    finally:
        if (heron.root / "gate").is_fifo():
            (heron.root / "gate").unlink()
    assert finished.code == 0, finished.stderr
    shared = PostgresBusStore(PostgresSessionStore.open(postgres_url))
    assert _stored(shared) == [("main", "accepted into postgres", True)]
    sessions = PostgresSessionStore.open(postgres_url)
    try:
        history = sessions.load("main")
    finally:
        sessions.close()
    texts = [m.content for m in history if isinstance(m, UserMessage)]
    assert sum("accepted into postgres" in text for text in texts) == 1


def test_serve_on_a_store_it_cannot_use_says_so_before_listening(
    heron: Heron, postgres_server: PostgresServer
) -> None:
    heron.env["HERON_WEBHOOK_SECRET"] = SECRET
    model = heron.script("script.yaml", [{"text": "done"}])
    unmigrated = postgres_server.empty_database()  # no heron schema: refused, not written
    finished = heron.start_serve(model, "--store", unmigrated).finish()
    assert finished.code == 2, finished.stderr
    assert "run `heron db migrate --store <url>`" in finished.stderr, finished.stderr
    assert "Traceback" not in finished.stderr
    assert "serve_accepting" not in finished.stdout
