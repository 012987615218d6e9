"""The web console in headless Chromium (Playwright, the system Chromium heron already uses)
against a real `heron serve --http-port` subprocess.

A person logs in with a token, sees a pending approval appear live, with its exact arguments,
and clicks Approve: the tool's result appears on its card. A page of another origin that posts
the same approval with the person's cookie is refused (403); the same approval answered again
from `heron approvals` is "already answered". A dropped stream is resumed from the last frame
seen and no frame (so no card) arrives twice.

`HERON_UPDATE_SCREENSHOTS=1` also writes the screenshots used in docs/gateway.md.
"""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from support.cli import Heron
from support.gateway import BUILD_COMMAND, BUILD_TURNS, OPS, bearer, post_webhook, start
from support.waiting import wait_until

CHROMIUM = "/usr/bin/chromium"
DOCS = Path(__file__).resolve().parents[2] / "docs"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


class _Elsewhere(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<!doctype html><title>elsewhere</title>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def elsewhere() -> Iterator[str]:
    """A page of another origin on this host (another port: the same site, so the console's
    cookie goes along with its requests)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Elsewhere)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def shoot(page: Page, name: str) -> None:
    if os.environ.get("HERON_UPDATE_SCREENSHOTS") == "1":
        page.screenshot(path=str(DOCS / name), full_page=False)


def log_in(page: Page, http: str) -> None:
    page.goto(f"{http}/")
    page.fill("#token", OPS)
    page.click("#login-form button[type=submit]")
    expect(page.locator("#who")).to_have_text("ops (operator)")
    expect(page.locator('#sessions li[data-session="main"]')).to_have_class("active")


def test_an_approval_appears_live_is_approved_in_the_browser_and_its_result_card_appears(
    heron: Heron, browser: Browser, elsewhere: str
) -> None:
    running, webhook, http = start(heron)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    log_in(page, http)

    post_webhook(webhook, "m1", "please pay ACME 120 for invoice 7")
    approval = page.locator(".approval")
    expect(approval).to_have_count(1)  # live: nobody reloaded the page
    expect(approval.locator(".arguments")).to_contain_text('"amount": 120')
    card = page.locator('.card[data-call="c_pay"]')
    expect(card.locator(".status")).to_have_text("awaiting_approval")
    request_id = approval.get_attribute("data-request")
    assert request_id is not None
    shoot(page, "gateway-console-approval.png")

    evil = context.new_page()
    evil.goto(f"{elsewhere}/")
    with evil.expect_response(f"{http}/v1/approvals/{request_id}") as caught:
        evil.evaluate(
            """([url]) => fetch(url, {method: "POST", credentials: "include", mode: "no-cors",
                body: JSON.stringify({decision: "yes"})}).catch(() => null)""",
            [f"{http}/v1/approvals/{request_id}"],
        )
    assert caught.value.status == 403
    evil.close()
    still = httpx.get(f"{http}/v1/approvals/{request_id}", headers=bearer(OPS), trust_env=False)
    assert still.json()["status"] == "input_required"

    approval.locator('button[data-decision="yes"]').click()
    expect(card.locator(".late-result")).to_contain_text("paid 120 to ACME")
    expect(page.locator(".approval")).to_have_count(0)
    expect(page.locator(".message.assistant", has_text="Paid ACME 120.")).to_have_count(1)
    shoot(page, "gateway-console-result.png")
    again = heron.run("approvals", "approve", request_id, "--as", "alice")
    assert again.code == 3 and "already answered by gateway:ops" in again.stderr

    # A dropped stream resumes after the last frame seen: nothing arrives twice.
    page.evaluate("window.heronConsole.dropStream()")
    sent = httpx.post(
        f"{http}/v1/sessions/main/messages",
        json={"text": "thanks"},
        headers=bearer(OPS),
        trust_env=False,
    )
    assert sent.status_code == 202
    expect(page.locator(".message.user", has_text="thanks")).to_have_count(1)
    received = page.evaluate("window.heronConsole.state.received")
    assert len(received) == len(set(received)) > 5, " ".join(received)
    expect(page.locator('.card[data-call="c_pay"]')).to_have_count(1)
    expect(page.locator(".message.assistant", has_text="I asked for approval")).to_have_count(1)
    running.proc.terminate()
    assert running.finish().code == 0


CARD = {
    "title": "Build report",
    "summary": "All 212 tests passed.",
    "blocks": [
        {
            "type": "html",
            "html": (
                "<style>p{color:green}</style><p id='chart'>212 of 212 green</p>"
                "<script>document.title = 'ran'; fetch('/v1/whoami')</script>"
                "<form action='/v1/sessions/main/interrupt' method='post'><button>Stop</button>"
                "</form>"
            ),
            "fallback": "212 of 212 tests green.",
        }
    ],
    "actions": [{"type": "button", "id": "ack", "label": "Ack"}],
}


def test_an_html_card_is_drawn_sandboxed_and_its_button_comes_back_as_a_card_action(
    heron: Heron, browser: Browser
) -> None:
    turns = [
        {
            "tool_calls": [{"id": "c_card", "name": "send_card", "arguments": {"card": CARD}}],
            "expect": {"last_message_contains": "build finished"},
        },
        {"text": "Card sent."},
        {"text": "Thanks for the ack.", "expect": {"last_message_contains": "pressed [Ack]"}},
    ]
    running, webhook, http = start(heron, turns)
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    log_in(page, http)
    post_webhook(webhook, "b1", "the build finished")

    frame_element = page.locator(".sent-card iframe")
    expect(frame_element).to_have_count(1)
    assert frame_element.get_attribute("sandbox") == ""  # no permission at all
    frame = page.frame_locator(".sent-card iframe")
    expect(frame.locator("#chart")).to_have_text("212 of 212 green")
    src = frame_element.get_attribute("src")
    assert src is not None
    served = httpx.get(f"{http}{src}", headers=bearer(OPS), trust_env=False)
    policy = served.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "sandbox" in policy
    [child] = [f for f in page.frames if f.url.endswith(src)]
    assert child.evaluate("document.title") != "ran"  # its script never ran
    # The console draws the card's button; the frame's own form cannot be sent.
    expect(page.locator(".sent-card .actions button")).to_have_text("Ack")
    shoot(page, "gateway-console-card.png")

    page.locator('.sent-card button[data-action="ack"]').click()
    expect(page.locator(".message.assistant", has_text="Thanks for the ack.")).to_have_count(1)
    log = page.locator("#log")
    expect(log).to_contain_text("card.action")
    stopped = httpx.get(f"{http}/v1/sessions/main", headers=bearer(OPS), trust_env=False)
    kinds = [e["event"]["kind"] for e in stopped.json()["recent_events"]]
    assert "user.interrupt" not in kinds  # nothing in the card reached the API
    running.proc.terminate()
    assert running.finish().code == 0


def test_a_background_job_and_a_timer_show_up_with_the_jobs_output_followed(
    heron: Heron, browser: Browser
) -> None:
    running, webhook, http = start(heron, BUILD_TURNS, "--autonomy", "full")
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    log_in(page, http)
    post_webhook(webhook, "b1", "start the build")
    job = page.locator("#jobs li")
    expect(job).to_have_count(1)
    expect(job).to_contain_text(BUILD_COMMAND)
    expect(page.locator("#timers li")).to_contain_text("check the build")
    job.click()
    expect(page.locator("#job-output")).to_have_text("build started")
    job_id = job.get_attribute("data-job")
    url = f"{http}/v1/sessions/main/jobs/{job_id}"
    assert httpx.post(f"{url}/interrupt", headers=bearer(OPS), trust_env=False).status_code == 202
    wait_until(lambda: httpx.get(url, headers=bearer(OPS), trust_env=False).json()["ended_at"])
    expect(job).to_contain_text("cancelled")
    running.proc.terminate()
    assert running.finish().code == 0


def test_a_question_of_the_agent_is_answered_in_the_console(heron: Heron, browser: Browser) -> None:
    turns = [
        {
            "tool_calls": [
                {
                    "id": "c_ask",
                    "name": "request_human_input",
                    "arguments": {"question": "Which branch should I deploy?"},
                }
            ],
            "expect": {"last_message_contains": "deploy"},
        },
        {"text": "I asked which branch."},
        {"text": "Deploying release-7.", "expect": {"last_message_contains": "release-7"}},
    ]
    running, webhook, http = start(heron, turns)
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    log_in(page, http)
    post_webhook(webhook, "d1", "please deploy")
    question = page.locator(".question")
    expect(question).to_contain_text("Which branch should I deploy?")
    question.locator("input.answer").fill("release-7")
    question.locator('button[data-decision="answer"]').click()
    expect(page.locator(".message.assistant", has_text="Deploying release-7.")).to_have_count(1)
    expect(page.locator(".question")).to_have_count(0)
    running.proc.terminate()
    assert running.finish().code == 0
