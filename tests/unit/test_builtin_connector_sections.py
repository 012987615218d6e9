"""`[tools.builtin]` calendar, GitHub and webhook sections, and the perception catalogue the
built-in sets add to the agent's system prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from heron.config import HeronConfig, build_agent
from heron.config.builtin import Builtin, BuiltinConfig, BuiltinError, build_builtin
from heron.turn.approval import NoApprover


async def _build(tmp_path: Path, **fields: object) -> Builtin:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    cfg = BuiltinConfig.model_validate({"workspace": str(ws), **fields})
    return await build_builtin(cfg, state_dir=tmp_path / "state")


async def _connector_names(tmp_path: Path, **fields: object) -> set[str]:
    built = await _build(tmp_path, sets=["connectors"], **fields)
    try:
        return {t.spec.name for t in built.tools["connectors"]}
    finally:
        await built.aclose()


async def test_each_connector_section_adds_its_tools_to_connectors(tmp_path: Path) -> None:
    plain = await _connector_names(tmp_path)
    calendar = await _connector_names(
        tmp_path,
        calendar={"work": {"path": "work.ics"}, "team": {"url": "https://dav.example.com/t/"}},
    )
    github = await _connector_names(tmp_path, github={"repos": ["acme/site"]})
    hooks = await _connector_names(
        tmp_path,
        webhooks={"secret_env": "HOOK_SECRET", "allowed_urls": ["https://hooks.example.com/"]},
    )

    assert "calendar_send_invitation" in calendar - plain
    assert any(name.startswith("github_") for name in github - plain)
    assert hooks - plain == {"call_webhook"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"calendar": {"work": {}}}, "exactly one of path"),
        ({"calendar": {"w": {"path": "a.ics", "url": "https://x/"}}}, "exactly one of path"),
        ({"github": {"repos": ["just-a-name"]}}, "is not owner/name"),
        ({"webhooks": {"secret_env": "S", "allowed_urls": ["https://h.example"]}}, "webhooks:"),
        (
            {"network": False, "calendar": {"team": {"url": "https://dav.example.com/"}}},
            "needs network",
        ),
    ],
)
async def test_a_bad_connector_section_is_a_clear_builtin_error(
    tmp_path: Path, fields: dict[str, object], message: str
) -> None:
    with pytest.raises(BuiltinError, match=message):
        await _build(tmp_path, sets=["connectors"], **fields)


async def test_the_agent_prompt_lists_perception_tools_by_kind(tmp_path: Path) -> None:
    built = await _build(tmp_path, sets=["perception"], network=False)
    config = HeronConfig.model_validate(
        {
            "agent": {"model": "scripted:demo", "system_prompt": "You help."},
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    try:
        agent = build_agent(config, approver=NoApprover(), tools=[], builtin=built)
    finally:
        await built.aclose()

    prompt = agent.system_prompt
    assert prompt.startswith("You help.\n\n## Perception tools")
    assert "### Read" in prompt and "- read_document:" in prompt


async def test_without_perception_or_connectors_there_is_no_catalogue(tmp_path: Path) -> None:
    built = await _build(tmp_path, sets=["execution"])
    try:
        assert built.catalogue_section() == ""
    finally:
        await built.aclose()
