"""Secrets at rest, at the boundaries a user touches: `heron run`, `heron serve`, a detached
job, `heron sessions show`, `heron events tail`, `heron jobs list`, `heron audit` — and every
file heron writes, grepped for the canaries.

The canaries are a provider key (`OPENAI_API_KEY`, not used by the scripted model) and the
webhook signing secret (`HERON_WEBHOOK_SECRET`). Neither has the shape of a credential, so only
heron's knowing them can keep them out.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.safety.signing import signed_headers
from support.cli import TIMEOUT_S, Finished, Heron

KEY = "«secret:OPENAI_API_KEY»"
HOOK = "«secret:HERON_WEBHOOK_SECRET»"

TOOLS = '''
import os

from heron import tool


@tool(read_only=True)
def reveal_key() -> str:
    """Print the provider key heron runs with."""
    return "the key is " + os.environ["OPENAI_API_KEY"]
'''


@pytest.fixture
def canaries(heron: Heron) -> Iterator[tuple[str, str]]:
    key = "canary-key-" + secrets.token_hex(10)
    hook = "canary-hook-" + secrets.token_hex(10)
    heron.env["OPENAI_API_KEY"] = key
    heron.env["HERON_WEBHOOK_SECRET"] = hook
    workspace = heron.root / "ws"
    workspace.mkdir()
    (workspace / ".env").write_text(f"OPENAI_API_KEY={key}\nMODE=fast\n")
    (workspace / "notes.txt").write_text("keep me\n")
    heron.write("secret_tools.py", TOOLS)
    yield key, hook


def snapshot(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def leaks(root: Path, before: dict[Path, bytes], *canaries: str) -> list[str]:
    """Files heron wrote or changed since `before` that hold a canary."""
    found = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        if before.get(path) == data:
            continue  # written by the test itself, untouched since
        found += [f"{path.relative_to(root)}: {c[:12]}…" for c in canaries if c.encode() in data]
    return found


def run_turn(
    heron: Heron, turns: list[dict[str, Any]], *flags: str, before: dict[Path, bytes] | None = None
) -> Finished:
    """`heron run` with the built-in execution and perception sets and no operator; the model
    script is added to `before` (the test wrote it, heron did not)."""
    model = heron.script("script.yaml", turns)
    if before is not None:
        script = heron.root / "script.yaml"
        before[script] = script.read_bytes()
    return heron.run(
        "run",
        "go",
        "--model",
        model,
        "--events",
        "jsonl",
        "--non-interactive",
        "--tools",
        "secret_tools.py",
        "--builtin",
        "execution",
        "--builtin",
        "perception",
        "--workspace",
        "ws",
        *flags,
    )


def calls(
    *pairs: tuple[str, dict[str, Any]], expect: str | None = None, at: int = 0
) -> dict[str, Any]:
    """One model response calling `pairs`; call ids are `t<at>_<index>_<tool>`."""
    turn: dict[str, Any] = {
        "tool_calls": [
            {"id": f"t{at}_{i}_{name}", "name": name, "arguments": args}
            for i, (name, args) in enumerate(pairs)
        ]
    }
    if expect is not None:
        turn["expect"] = {"last_message_contains": expect}
    return turn


def test_a_provider_key_echoed_by_tools_reaches_no_surface_and_no_file(
    heron: Heron, canaries: tuple[str, str]
) -> None:
    key, hook = canaries
    before = snapshot(heron.root)
    done = run_turn(
        heron,
        [
            calls(("reveal_key", {}), ("shell", {"command": "cat .env"})),
            calls(("read_file", {"path": ".env"}), expect=KEY, at=1),
            calls(
                ("write_file", {"path": "copy.env", "content": f"OPENAI_API_KEY={KEY}\n"}),
                ("shell", {"command": f"echo {key} > leak.txt"}),
                expect=KEY,
                at=2,
            ),
            {"text": "done", "expect": {"last_message_contains": "passes it to no tool"}},
        ],
        "--session",
        "s1",
        before=before,
    )
    assert done.code == 0, done.stderr
    events = done.events()
    results = {e["id"]: e for e in events if e["type"] == "tool_result"}
    assert results["t0_0_reveal_key"]["output"] == f"the key is {KEY}"
    cat = results["t0_1_shell"]
    assert cat["status"] == "ok" and f"OPENAI_API_KEY={KEY}\nMODE=fast" in cat["output"]
    assert KEY in results["t1_0_read_file"]["output"]
    assert results["t2_0_write_file"]["status"] == "error"
    assert "the placeholder heron shows" in results["t2_0_write_file"]["output"]
    assert results["t2_1_shell"]["status"] == "denied"
    assert "contain the value of OPENAI_API_KEY" in results["t2_1_shell"]["output"]
    assert not (heron.root / "ws" / "copy.env").exists()
    assert not (heron.root / "ws" / "leak.txt").exists()

    shown = heron.run("sessions", "show", "s1", "--json")
    audit = heron.run("audit", "--approvals", "--json")
    executions = heron.run("audit", "--json")
    for listing in (done, shown, audit, executions):
        assert key not in listing.stdout + listing.stderr
    assert KEY in shown.stdout
    assert leaks(heron.root, before, key, hook) == []


def post_im(url: str, secret: str, message_id: str, text: str) -> None:
    body = json.dumps(
        {"platform": "chat", "message_id": message_id, "sender": {"id": "U9"}, "text": text}
    ).encode()
    headers = signed_headers(secret.encode(), body, time.time())
    response = httpx.post(f"{url}/im", content=body, headers=headers, trust_env=False)
    assert response.status_code == 202, response.text


def test_serve_a_job_and_a_webhook_store_no_known_secret(
    heron: Heron, canaries: tuple[str, str]
) -> None:
    key, hook = canaries
    job = 'cat .env; echo "env=${OPENAI_API_KEY:-unset} ${HERON_WEBHOOK_SECRET:-unset}"'
    script = heron.script(
        "serve.yaml",
        [
            calls(("start_job", {"command": job}), expect="start the job"),
            *({"text": "Noted."} for _ in range(4)),
        ],
    )
    bus = SqliteBusStore.open(heron.state_dir)
    try:
        request = BusEvent(
            kind="user.input",
            source="user",
            channel="cli",
            session="main",
            content=EventContent(text="start the job"),
        )
        assert asyncio.run(bus.publish(request)) is True
    finally:
        bus.close()
    before = snapshot(heron.root)  # the script and the request are the test's
    server = heron.start(
        "serve",
        "--model",
        script,
        "--session",
        "main",
        "--workspace",
        "ws",
        "--webhook-port",
        "0",
        "--subscribe",
        "im",
        "--autonomy",
        "full",
        "--poll-interval",
        "0.1",
    )
    url = server.wait_for_event("serve_started")["webhook"]
    post_im(url, hook, "m1", f"my key is {key}, keep it safe")
    deadline = time.monotonic() + TIMEOUT_S
    kinds: set[str] = set()
    while not {"job.exit", "im.message"} <= kinds:
        assert time.monotonic() < deadline, kinds
        server.wait_for_event("final")
        kinds = {e.kind for e, done in _events(heron.state_dir) if done}
    server.proc.terminate()
    finished = server.finish()
    assert finished.code == 0, finished.stderr
    assert key not in finished.stdout + finished.stderr

    stored = [e for e, _ in _events(heron.state_dir)]
    [exit_event] = [e for e in stored if e.kind == "job.exit"]
    assert KEY in exit_event.content.text and "env=unset unset" in exit_event.content.text
    [im] = [e for e in stored if e.kind == "im.message"]
    assert im.content.text.startswith(f"my key is {KEY}")
    [job_dir] = (heron.state_dir / "jobs").iterdir()
    output = (job_dir / "output.log").read_text()
    assert output.startswith(f"OPENAI_API_KEY={KEY}\nMODE=fast\n")

    listings = [
        heron.run("events", "tail", "--limit", "99"),
        heron.run("events", "tail", "--limit", "99", "--json"),
        heron.run("jobs", "list"),
        heron.run("jobs", "list", "--json"),
        heron.run("sessions", "show", "main", "--json"),
    ]
    for listing in listings:
        assert listing.code == 0, listing.stderr
        assert key not in listing.stdout and hook not in listing.stdout
    tail = [json.loads(line) for line in listings[1].stdout.splitlines()]
    assert KEY in json.dumps(tail, ensure_ascii=False)
    assert leaks(heron.root, before, key, hook) == []


def _events(state_dir: Path) -> list[tuple[BusEvent, bool]]:
    bus = SqliteBusStore.open(state_dir)
    try:
        rows = bus.sessions.conn.execute(
            "SELECT body, consumed_at FROM bus_events ORDER BY seq"
        ).fetchall()
    finally:
        bus.close()
    return [(BusEvent.model_validate_json(body), done is not None) for body, done in rows]


# --- the shell with no operator --------------------------------------------------------------


def shell_turn(heron: Heron, *commands: str) -> dict[str, dict[str, Any]]:
    done = run_turn(heron, [calls(*(("shell", {"command": c}) for c in commands)), {"text": "ok"}])
    assert done.code == 0, done.stderr
    return {e["id"]: e for e in done.events() if e["type"] == "tool_result"}


def approval_risks(heron: Heron) -> list[tuple[str, str, str | None]]:
    audit = heron.run("audit", "--approvals", "--json")
    rows = [json.loads(line) for line in audit.stdout.splitlines()]
    # The summary as the operator would see it, without the runtime's own marker.
    return [
        (r["arguments"].removesuffix(", approved: false"), r["decided_by"], r["risk"]) for r in rows
    ]


def test_non_interactive_shell_runs_low_risk_and_never_more_unless_configured(
    heron: Heron, canaries: tuple[str, str]
) -> None:
    ws = heron.root / "ws"
    results = shell_turn(heron, "ls", "rm -f notes.txt", "rm -rf /", "cp notes.txt /etc/x-heron")
    assert (
        results["t0_0_shell"]["status"] == "ok" and "notes.txt" in results["t0_0_shell"]["output"]
    )
    for call_id, tier in (("t0_1_shell", "medium"), ("t0_2_shell", "high"), ("t0_3_shell", "high")):
        assert results[call_id]["status"] == "denied"
        assert results[call_id]["output"].startswith(f"Not run: this {tier}-risk call")
    assert (ws / "notes.txt").exists() and not Path("/etc/x-heron").exists()
    assert approval_risks(heron) == [
        ("command: ls", "unattended:low", "low"),
        ("command: rm -f notes.txt", "policy", "medium"),
        ("command: rm -rf /", "policy", "high"),
        ("command: cp notes.txt /etc/x-heron", "policy", "high"),
    ]

    heron.write("heron.toml", '[tools.shell]\nunattended_risk = "medium"\n')
    results = shell_turn(heron, "rm -f notes.txt", "rm -rf /")
    assert results["t0_0_shell"]["status"] == "ok" and not (ws / "notes.txt").exists()
    assert results["t0_1_shell"]["status"] == "denied"
    assert approval_risks(heron)[-2:] == [
        ("command: rm -f notes.txt", "unattended:medium", "medium"),
        ("command: rm -rf /", "policy", "high"),
    ]


def test_where_the_sandbox_does_not_contain_heron_low_risk_counts_as_medium(
    heron: Heron, canaries: tuple[str, str]
) -> None:
    heron.write("heron.toml", "[tools.builtin]\nconfine = false\n")
    results = shell_turn(heron, "ls")
    assert results["t0_0_shell"]["status"] == "denied"
    assert results["t0_0_shell"]["output"].startswith("Not run: this medium-risk call")
    assert approval_risks(heron) == [("command: ls", "policy", "medium")]

    heron.write(
        "heron.toml",
        '[tools.builtin]\nconfine = false\n[tools.shell]\nunattended_risk = "medium"\n',
    )
    results = shell_turn(heron, "ls")
    assert results["t0_0_shell"]["status"] == "ok"
