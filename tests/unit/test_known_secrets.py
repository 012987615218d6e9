"""Known secrets: a value heron knows is secret becomes `«secret:NAME»` wherever it would enter
the data path, is passed to no tool, and never reaches a surface; shapes that only look like
credentials stay raw on the data path and are masked on surfaces."""

from __future__ import annotations

import json
import logging
import secrets as random
from pathlib import Path

import pytest

import heron.safety.secrets as secrets_module
from heron import Agent, ScriptedModel, tool
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.jobs.supervisor import mask_output
from heron.config.build import register_secrets
from heron.config.schema import HeronConfig
from heron.messages import ToolResultMessage
from heron.safety.command_policy import CommandPolicy
from heron.safety.redact import scrub_text, scrub_value, summarize_args
from heron.safety.secrets import (
    KnownSecrets,
    Secret,
    install_log_masking,
    known_secrets,
    placeholder,
    placeholders_in,
    secret_env_names,
)
from heron.safety.workspace import Workspace
from heron.sandbox import ProcessSandbox, ResourceLimits
from heron.toolsets.files import file_tools
from heron.toolsets.shell import agent_environment, shell_tool
from heron.toolsets.sqlite_shell_history import SqliteShellHistory
from heron.turn.observer import ToolCallRecord, ToolCallStartRecord
from heron.turn.receipts import ReceiptScope
from support.engine import Events, call, calls_turn

KEY = "«secret:OPENAI_API_KEY»"


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch) -> str:
    """A provider key in heron's environment, and a registry built afresh from it."""
    value = "canary-" + random.token_hex(10)  # no credential shape: only knowing it masks it
    monkeypatch.setenv("OPENAI_API_KEY", value)
    monkeypatch.setattr(secrets_module, "_registry", None)
    return value


# --- the registry ----------------------------------------------------------------------------


def test_known_values_become_placeholders_and_short_values_are_not_registered() -> None:
    known = KnownSecrets({"GITHUB_TOKEN": "tok-1234567890", "PIN": "1234"})
    assert known.names == ("GITHUB_TOKEN",)
    text = known.mask("token tok-1234567890 and pin 1234")
    assert text == "token «secret:GITHUB_TOKEN» and pin 1234"
    assert known.mask(text) == text
    assert known.mask_bytes(b"x tok-1234567890 y") == "x «secret:GITHUB_TOKEN» y".encode()
    assert known.mask_value({"a": ["tok-1234567890"], "tok-1234567890": 1}) == {
        "a": ["«secret:GITHUB_TOKEN»"],
        "«secret:GITHUB_TOKEN»": 1,
    }
    assert known.names_in({"cmd": "echo tok-1234567890"}) == ["GITHUB_TOKEN"]
    assert "tok-1234567890" not in repr(known)


def test_a_longer_secret_containing_a_shorter_one_is_replaced_whole() -> None:
    known = KnownSecrets({"SHORT_TOKEN": "abcdefgh12", "LONG_TOKEN": "xxabcdefgh12yy"})
    assert known.mask("xxabcdefgh12yy abcdefgh12") == "«secret:LONG_TOKEN» «secret:SHORT_TOKEN»"


def test_the_process_registry_knows_every_provider_key_variable(
    canary: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "anthropic-key-for-a-provider-not-used")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-is-named-like-a-secret")
    monkeypatch.setenv("EDITOR", "a-long-but-ordinary-value")
    known = known_secrets()
    assert {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "SLACK_BOT_TOKEN"} <= set(known.names)
    assert known.name_of("a-long-but-ordinary-value") is None
    assert known_secrets() is known  # built once per process


def test_placeholders_are_found_in_nested_arguments() -> None:
    args = {"path": "a", "edits": [{"new": f"KEY={KEY}"}], placeholder("X"): 1}
    assert set(placeholders_in(args)) == {"X", "OPENAI_API_KEY"}


def test_the_configuration_names_its_secret_variables(canary: str) -> None:
    config = HeronConfig.model_validate(
        {
            "tools": {
                "builtin": {
                    "github": {"token_env": "MY_GH"},
                    "mail": {
                        "host": "smtp",
                        "from_addr": "a@b",
                        "username_env": "MAIL_USER",
                        "password_env": "MAIL_PASS",
                    },
                    "webhooks": {"secret_env": "HOOK_KEY"},
                }
            },
            "telemetry": {"alerts_webhook_secret_env": "ALERTS_SIGNING"},
            "mcp": {
                "servers": {
                    "tickets": {
                        "command": "tickets-server",
                        "env": {"TICKETS_API_KEY": "inline-secret-value", "MODE": "fast-mode"},
                        "credentials": {"api": {"from_env": "TICKETS_TOKEN", "env": "T"}},
                    }
                }
            },
        }
    )
    names = set(secret_env_names(config))
    assert {"MY_GH", "MAIL_PASS", "HOOK_KEY", "ALERTS_SIGNING", "TICKETS_TOKEN"} <= names
    assert "HERON_TOKEN_KEY" in names and "MAIL_USER" not in names
    environ = {"MY_GH": "gh-value-123456", "MAIL_USER": "alice-the-user"}
    register_secrets(config, environ)
    known = known_secrets()
    assert known.name_of("gh-value-123456") == "MY_GH"
    assert known.name_of("inline-secret-value") == "mcp.tickets.TICKETS_API_KEY"
    assert known.name_of("alice-the-user") is None and known.name_of("fast-mode") is None


# --- surfaces: known secrets and shapes ------------------------------------------------------


def test_every_surface_scrubber_replaces_known_secrets_and_keeps_placeholders(
    canary: str,
) -> None:
    assert scrub_text(f"key {canary} here") == f"key {KEY} here"
    assert scrub_value({"x": canary}) == {"x": KEY}
    assert summarize_args({"command": f"echo {canary}"}) == f"command: echo {KEY}"
    for text in (KEY, f"OPENAI_API_KEY={KEY}", f'{{"api_key": "{KEY}"}}', f"secret: {KEY}"):
        assert scrub_text(text) == text
    assert scrub_text("api_key=abcdefghijkl") == "api_key=abcd*[REDACTED]"  # a shape: masked
    assert Secret("own-value-12345").scrub(f"own-value-12345 {canary}") == f"[REDACTED] {KEY}"


async def test_shapes_stay_raw_on_the_data_path_and_are_masked_on_surfaces(
    canary: str,
) -> None:
    @tool(read_only=True)
    def leak() -> str:
        """Print a configuration."""
        return f"OPENAI_API_KEY={canary}\ntoken=looks-like-a-secret-1234"

    starts: list[ToolCallStartRecord] = []
    ends: list[ToolCallRecord] = []

    class Recorder:
        def tool_call_start(self, record: ToolCallStartRecord) -> None:
            starts.append(record)

        def tool_call_end(self, record: ToolCallRecord) -> None:
            ends.append(record)

    events = Events()
    scope = ReceiptScope("run")
    model = ScriptedModel([calls_turn(call("leak")), {"text": "done"}])
    agent = Agent(model=model, tools=[leak], observer=Recorder(), receipts=scope)
    result = await agent.run("show it", sink=events)
    [message] = [m for m in result.history if isinstance(m, ToolResultMessage)]
    assert message.content.startswith(f"OPENAI_API_KEY={KEY}\ntoken=looks-like-a-secret-1234")
    assert canary not in json.dumps([m.model_dump(mode="json") for m in result.history])
    [shown] = events.of("tool_result")
    assert shown.output == f"OPENAI_API_KEY={KEY}\ntoken=look*[REDACTED]"
    assert canary not in ends[0].result and "looks-like-a-secret" not in ends[0].result
    assert result.receipts  # signed over what the model saw: the placeholder


# --- the data path's entry points ------------------------------------------------------------


def make_shell(workspace: Path, tmp_path: Path, **kw: object):  # type: ignore[no-untyped-def]
    return shell_tool(
        sandbox=ProcessSandbox(
            workspace=workspace, limits=ResourceLimits(kill_grace_s=0.3, max_processes=None)
        ),
        policy=CommandPolicy(workspace=workspace),
        workspace=workspace,
        history=SqliteShellHistory.open(tmp_path / "state"),
        **kw,  # type: ignore[arg-type]
    )


async def test_process_output_is_masked_before_it_is_shown_or_saved(
    canary: str, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".env").write_text(f"OPENAI_API_KEY={canary}\n" * 400)  # long: saved in full
    shell = make_shell(ws, tmp_path)
    model = ScriptedModel([calls_turn(call("shell", command="cat .env")), {"text": "done"}])
    result = await Agent(model=model, tools=[shell], workspace=ws).run("read it")
    [message] = [m for m in result.history if isinstance(m, ToolResultMessage)]
    assert KEY in message.content and canary not in message.content
    saved = list((ws / ".heron" / "outputs").iterdir())
    assert saved and all(canary not in p.read_text() for p in saved)
    assert all(KEY in p.read_text() for p in saved)


def test_a_known_secret_is_passed_to_no_command(canary: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        agent_environment(tmp_path, ["OPENAI_API_KEY"])
    ws = tmp_path / "ws"
    ws.mkdir()
    with pytest.raises(ValueError, match="passed to no command"):
        make_shell(ws, tmp_path, env_passthrough=["OPENAI_API_KEY"])


async def test_write_tools_refuse_placeholders_and_read_tools_see_them(
    canary: str, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".env").write_text(f"OPENAI_API_KEY={canary}\n")
    tools = file_tools(Workspace(ws))
    model = ScriptedModel(
        [
            calls_turn(call("read_file", path=".env")),
            calls_turn(call("write_file", path="copy.env", content=f"OPENAI_API_KEY={KEY}\n")),
            calls_turn(call("write_file", path="leak.txt", content=canary)),
            {"text": "done"},
        ]
    )
    events = Events()
    result = await Agent(model=model, tools=tools, workspace=ws).run("copy it", sink=events)
    read, placeholder_write, value_write = [
        m.content for m in result.history if isinstance(m, ToolResultMessage)
    ]
    assert KEY in read and canary not in read
    assert placeholder_write.startswith("Error: the arguments of 'write_file' contain " + KEY)
    assert "heron did not run it" in placeholder_write
    assert value_write.startswith("Not run: the arguments of 'write_file' contain the value of")
    assert not (ws / "copy.env").exists() and not (ws / "leak.txt").exists()
    statuses = [e.status for e in events.of("tool_result")]
    assert statuses == ["ok", "error", "denied"]
    assert all(canary not in json.dumps(e.model_dump(mode="json")) for e in events.all)


def test_a_bus_event_never_carries_a_known_secret(canary: str) -> None:
    event = BusEvent(
        kind="webhook.received",
        source="stranger",
        channel="webhook",
        content=EventContent(text=f"key {canary}", data={"body": {"k": canary}}),
    )
    assert event.content.text == f"key {KEY}"
    assert event.content.data == {"body": {"k": KEY}}
    assert canary not in event.model_dump_json()


def test_the_job_supervisor_masks_a_secret_split_across_two_reads() -> None:
    masks = [(b"supersecretvalue", "«secret:S»".encode())]
    ready, held = mask_output(b"line one\nsupersec", masks)
    assert ready == b"line one\n" and held == b"supersec"
    ready, held = mask_output(held + b"retvalue and more\n", masks)
    assert ready == "«secret:S» and more\n".encode() and held == b""
    assert mask_output(b"no secret here", masks) == (b"no secret here", b"")


def test_log_records_carry_placeholders_once_masking_is_installed(
    canary: str, caplog: pytest.LogCaptureFixture
) -> None:
    install_log_masking()
    logger = logging.getLogger("heron.test.secrets")
    with caplog.at_level(logging.WARNING, logger="heron.test.secrets"):
        logger.warning("the key %s failed", canary)
        try:
            raise RuntimeError(f"bad key {canary}")
        except RuntimeError:
            logger.exception("while calling")
    text = caplog.text
    assert canary not in text and f"the key {KEY} failed" in text and f"bad key {KEY}" in text
