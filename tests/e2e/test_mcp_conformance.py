"""heron's MCP client against the official MCP conformance suite (client scenarios).

`scripts/run-mcp-conformance.sh` installs Node 22 and `@modelcontextprotocol/conformance` into
`.cache/` when they are missing (`scripts/bootstrap-system.sh` does it ahead of time), lets the
suite drive `python -m heron.mcp.conformance_client` through every client scenario, and prints
one table row per scenario. This test holds its own list of what must pass and what heron
deliberately does not support, so neither the script's lists nor the suite can drift silently.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from heron.mcp.conformance_client import main, run_scenario

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "run-mcp-conformance.sh"

MUST_PASS = frozenset(
    {
        "initialize",
        "tools_call",
        "sse-retry",
        # Passes only because heron never starts an OAuth flow (see NO_OAUTH).
        "auth/resource-mismatch",
    }
)

NO_OAUTH = "heron has no MCP OAuth: HTTP servers get operator-provisioned header credentials"
UNSUPPORTED = {
    "elicitation-sep1034-client-defaults": (
        "heron declares no elicitation capability: unattended agents reach the operator only "
        "through heron's approval flow"
    ),
    **{
        f"auth/{name}": NO_OAUTH
        for name in (
            "metadata-default",
            "metadata-var1",
            "metadata-var2",
            "metadata-var3",
            "basic-cimd",
            "scope-from-www-authenticate",
            "scope-from-scopes-supported",
            "scope-omitted-when-undefined",
            "scope-step-up",
            "scope-retry-limit",
            "token-endpoint-auth-basic",
            "token-endpoint-auth-post",
            "token-endpoint-auth-none",
            "pre-registration",
            "2025-03-26-oauth-metadata-backcompat",
            "2025-03-26-oauth-endpoint-fallback",
            "offline-access-scope",
            "offline-access-not-supported",
            "client-credentials-jwt",
            "client-credentials-basic",
            "cross-app-access-complete-flow",
        )
    },
}

_ROW = re.compile(r"^(\S+)\s+(pass|unsupported)\s+(pass|fail)\s+(\d+)/(\d+)$")


# Timing-sensitive (sse-retry allows ~200 ms of lateness): `make test` runs it on its own after
# the parallel suite, when the machine is quiet.
@pytest.mark.conformance
def test_every_client_scenario_passes_or_is_a_listed_unsupported_one(tmp_path: Path) -> None:
    results = tmp_path / "results"
    run = subprocess.run(
        ["bash", str(SCRIPT), "--results", str(results)],
        cwd=ROOT,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    report = f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.returncode == 0, report
    rows = {m[1]: (m[2], m[3]) for m in map(_ROW.match, run.stdout.splitlines()) if m}
    assert set(rows) == MUST_PASS | set(UNSUPPORTED), report
    for scenario in MUST_PASS:
        assert rows[scenario] == ("pass", "pass"), f"{scenario}\n{report}"
    for scenario, reason in UNSUPPORTED.items():
        assert rows[scenario] == ("unsupported", "fail"), f"{scenario} ({reason})\n{report}"
    # heron really ran the tool call the tools_call scenario checks, through its own McpTool.
    client_log = next(results.glob("tools_call-*/stderr.txt")).read_text(encoding="utf-8")
    assert "conformance__add_numbers ok: The sum of 5 and 3 is 8" in client_log, client_log


def test_the_entry_point_wants_exactly_one_server_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: python -m heron.mcp.conformance_client <server-url>" in capsys.readouterr().err


async def test_an_unreachable_server_exits_1_with_heron_s_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Port 1 on loopback refuses connections at once.
    assert await run_scenario("http://127.0.0.1:1/mcp", "initialize") == 1
    err = capsys.readouterr().err
    assert "initialize: cannot list tools:" in err, err
