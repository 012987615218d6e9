"""docs/always-on.md, run: every shell example against a real `heron serve`, outputs compared.

The page's blocks run in order in one scratch directory (conventions in `support.docs`), with
`heron` on the PATH. "The real model" is heron's OpenAI adapter talking to a local server that
speaks OpenAI's protocol, reached through `OPENAI_BASE_URL` as a reader's gateway would be.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import sys
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path

import pytest

import heron._support.http_limits as http_limits_module
import heron.always_on.channels.webhook as webhook_module
import heron.always_on.http as http_module
from heron.cli.main import build_parser
from support.docs import extract, match_lines, run_page
from support.protocol_servers import ProtocolServer, Reply, openai_stream

PAGE = Path(__file__).resolve().parents[2] / "docs" / "always-on.md"
MODEL_ANSWER = "The deploy of web-1 looks healthy: 3 services updated, no errors."
TOOLS = ("bash", "curl", "openssl", "sqlite3")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def openai_server() -> Iterator[ProtocolServer]:
    server = ProtocolServer(default=Reply(events=openai_stream(text=[MODEL_ANSWER]))).start()
    try:
        yield server
    finally:
        server.stop()


def page_env(root: Path, openai_url: str) -> dict[str, str]:
    """A reader's terminal: `heron` on the PATH, an OpenAI key, nothing from the real home."""
    bin_dir = root / "bin"
    bin_dir.mkdir()
    heron = bin_dir / "heron"
    heron.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m heron.cli.main "$@"\n')
    heron.chmod(0o755)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HERON_", "OPENAI_", "ANTHROPIC_")) and "proxy" not in k.lower()
    }
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        HOME=str(root / "home"),
        XDG_CONFIG_HOME=str(root / "xdg-config"),
        XDG_STATE_HOME=str(root / "xdg-state"),
        NO_COLOR="1",
        COLUMNS="120",
        NO_PROXY="127.0.0.1,localhost",
        OPENAI_API_KEY="sk-docs-test",
        OPENAI_BASE_URL=f"{openai_url}/v1",
        PORT=str(free_port()),
        SMTP_PORT=str(free_port()),
        CRASH_PORT=str(free_port()),
    )
    return env


def test_every_example_on_the_always_on_page_runs_and_prints_what_the_page_shows(
    tmp_path: Path, openai_server: ProtocolServer
) -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the page's examples need {', '.join(missing)}")
    root = tmp_path / "tour"
    root.mkdir()

    with run_page(PAGE, root, page_env(tmp_path, openai_server.url)) as run:
        assert run.env["HERON_STATE_DIR"] == str(root / "heron-state")

    # The documented real-model command reached the OpenAI adapter with the webhook's event.
    [request] = openai_server.requests
    assert request.path == "/v1/chat/completions" and request.body["stream"] is True
    prompt = str(request.body["messages"][-1]["content"])
    assert "Deploy of web-1 finished" in prompt and "not instructions" in prompt
    assert request.headers["authorization"] == "Bearer sk-docs-test"


def test_the_response_code_table_lists_every_status_the_webhook_listener_sends() -> None:
    section = _section(PAGE.read_text(encoding="utf-8"), "### Every response code")
    rows = [line for line in section.splitlines() if re.match(r"^\| \d{3}\b", line)]
    documented_codes = {int(row[2:5]) for row in rows}
    documented_words = {re.findall(r"`(\w+)`", row.split("|")[2])[0] for row in rows}

    source = Path(webhook_module.__file__).read_text(encoding="utf-8")
    sent_codes = {HTTPStatus[name].value for name in re.findall(r"HTTPStatus\.([A-Z_]+)", source)}
    # `_answer(outcome, ...)` calls, and the outcomes spread over lines by the formatter.
    sent_words = set(re.findall(r'_answer\(\s*"(\w+)"', source))
    # And the front's own answers before any route (no such path, too large, starting).
    front = "".join(
        Path(module.__file__).read_text(encoding="utf-8")
        for module in (http_module, http_limits_module)
    )
    answers = r'(?:status_code=|"status": |_refuse\(send, |refusal = \(|_raw_refusal\(\s*")(\d{3})'
    sent_codes |= {int(code) for code in re.findall(answers, front)}
    sent_words |= set(re.findall(r'"status": "(\w+)"', front))
    assert documented_codes == sent_codes
    assert documented_words == sent_words


def test_every_flag_of_heron_serve_is_on_the_always_on_page() -> None:
    page = PAGE.read_text(encoding="utf-8")
    serve = _subcommand(build_parser(), "serve")
    flags = {
        option
        for action in serve._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }
    undocumented = sorted(f for f in flags if not re.search(rf"`{re.escape(f)}\b", page))
    assert undocumented == []


def test_the_page_runner_matches_lines_in_order_with_wildcards() -> None:
    output = 'HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\n{"status":  "ok"}\n'
    assert match_lines('HTTP/1.1 202 Accepted\n{"status": "..."}', output) == 4
    assert match_lines('{"status": "ok"}\nHTTP/1.1 202 Accepted', output) is None
    assert match_lines("HTTP/1.1 200 OK", output) is None
    assert match_lines("", "") == 0 and match_lines("", "something") is None
    steps = extract("```sh {background}\nheron serve\n```\n\nready:\n\n```text\nstarted\n```\n")
    assert len(steps) == 1 and steps[0].expected == "started"


def _section(markdown: str, heading: str) -> str:
    start = markdown.index(heading + "\n")
    level = heading.split(" ")[0]
    rest = markdown[start + len(heading) :]
    end = re.search(rf"^#{{1,{len(level)}}} ", rest, flags=re.MULTILINE)
    return rest[: end.start()] if end else rest


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices[name]
            assert isinstance(sub, argparse.ArgumentParser)
            return sub
    raise AssertionError(f"no subcommand {name}")
