"""Notion-like pages tools against a loopback server speaking the Notion API's documented shapes:
search pagination, page + block children with nested blocks, the agent's own allow-list, 401,
429 with Retry-After, garbage JSON, an unreachable server, and a token that never shows."""

from __future__ import annotations

import json
from typing import Any

import pytest

from heron import ToolResult
from heron.connectors.pages import PagesConfig, pages_tools
from heron.tools.definition import Tool
from support.clock import FakeTime
from support.connectors import LOCAL, ApiServer, Reply, Seen, closed_port, run

TOKEN = "secret_ntn_0123456789abcdefTOKEN"
ALLOWED = "11111111-1111-1111-1111-111111111111"
TEAM = "22222222-2222-2222-2222-222222222222"
CHILD = "33333333-3333-3333-3333-333333333333"
OTHER = "44444444-4444-4444-4444-444444444444"


def rich(text: str, href: str | None = None) -> list[dict[str, Any]]:
    return [{"type": "text", "plain_text": text, "href": href}]


def page(page_id: str, title: str, parent: dict[str, Any], **props: Any) -> dict[str, Any]:
    return {
        "object": "page",
        "id": page_id,
        "url": f"https://www.notion.so/{title.replace(' ', '-')}-{page_id.replace('-', '')}",
        "last_edited_time": "2024-05-01T10:00:00.000Z",
        "parent": parent,
        "properties": {"Name": {"id": "title", "type": "title", "title": rich(title)}, **props},
    }


def block(kind: str, text: str = "", *, bid: str = "", children: bool = False, **more: Any) -> Any:
    body: dict[str, Any] = {"rich_text": rich(text), **more}
    return {
        "object": "block",
        "id": bid or OTHER,
        "type": kind,
        "has_children": children,
        kind: body,
    }


def listing(results: list[Any], next_cursor: str | None = None) -> dict[str, Any]:
    return {
        "object": "list",
        "results": results,
        "next_cursor": next_cursor,
        "has_more": next_cursor is not None,
    }


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_NOTION_TOKEN", TOKEN)


def build(base: str, fake_time: FakeTime, **options: Any) -> dict[str, Tool]:
    options = {"allowed_parents": (TEAM,), "allowed_pages": (ALLOWED,)} | options
    config = PagesConfig(base_url=base, token_env="TEST_NOTION_TOKEN", **options)
    tools = pages_tools(config, policy=LOCAL, **fake_time.seams)
    return {t.spec.name: t for t in tools}


def leaked(result: ToolResult) -> bool:
    return TOKEN in f"{result!r}{result.output}{result.error}{json.dumps(result.data, default=str)}"


async def test_search_asks_for_pages_and_follows_the_notion_cursor(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    def answer(seen: Seen) -> Reply:
        body = json.loads(seen.body)
        if body.get("start_cursor") == "cur-2":
            return Reply(
                body=listing([page(CHILD, "Runbook", {"type": "page_id", "page_id": TEAM})])
            )
        first = [
            page(ALLOWED, "Roadmap", {"type": "workspace", "workspace": True}),
            page(OTHER, "Salaries", {"type": "workspace", "workspace": True}),
        ]
        return Reply(body=listing(first, next_cursor="cur-2"))

    api_server.on("POST", "/v1/search", fn=answer)
    tools = build(api_server.base + "/v1", fake_time)
    first = await run(tools, "pages_search", query="road")
    assert first.success, first.error
    assert [r["title"] for r in first.data["results"]] == ["Roadmap"]
    assert first.data["results"][0] == {
        "id": ALLOWED,
        "title": "Roadmap",
        "url": f"https://www.notion.so/Roadmap-{ALLOWED.replace('-', '')}",
        "last_edited": "2024-05-01T10:00:00.000Z",
    }
    assert first.data["hidden"] == 1 and "Salaries" not in first.output
    assert first.data["next_cursor"] == "cur-2" and 'cursor="cur-2"' in first.output
    second = await run(tools, "pages_search", query="road", cursor="cur-2")
    assert [r["id"] for r in second.data["results"]] == [CHILD]
    assert second.data["next_cursor"] is None
    sent = [json.loads(s.body) for s in api_server.seen]
    assert sent[0] == {
        "query": "road",
        "page_size": 20,
        "filter": {"property": "object", "value": "page"},
    }
    assert sent[1]["start_cursor"] == "cur-2"
    headers = api_server.seen[0].headers
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert headers["notion-version"] == "2022-06-28"


async def test_page_read_renders_nested_blocks_as_readable_text(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    status = {"type": "status", "status": {"name": "In progress"}}
    tags = {"type": "multi_select", "multi_select": [{"name": "ops"}, {"name": "q3"}]}
    api_server.on(
        "GET",
        f"/pages/{CHILD}",
        Reply(
            body=page(
                CHILD, "Runbook", {"type": "page_id", "page_id": TEAM}, Status=status, Tags=tags
            )
        ),
    )
    nested_id = "55555555-5555-5555-5555-555555555555"
    top = [
        block("heading_1", "Deploy"),
        block("paragraph", "See the docs", bid=OTHER),
        block("bulleted_list_item", "Prepare", bid=nested_id, children=True),
        block("numbered_list_item", "Build"),
        block("numbered_list_item", "Ship"),
        block("to_do", "Tell the team", checked=True),
        block("to_do", "Write notes", checked=False),
        block("code", "make deploy\nmake verify", language="bash"),
        {
            "object": "block",
            "id": OTHER,
            "type": "child_page",
            "has_children": True,
            "child_page": {"title": "Archive"},
        },
    ]
    api_server.on("GET", f"/blocks/{CHILD}/children", Reply(body=listing(top, next_cursor="blk-2")))
    nested = [block("bulleted_list_item", "Check the backups"), block("quote", "Measure twice")]
    api_server.on("GET", f"/blocks/{nested_id}/children", Reply(body=listing(nested)))
    result = await run(build(api_server.base, fake_time), "page_read", page_id=CHILD)
    assert result.success, result.error
    body = result.output.split("\n\n", 1)[1]
    assert body.splitlines() == [
        "# Deploy",
        "See the docs",
        "- Prepare",
        "  - Check the backups",
        "  > Measure twice",
        "1. Build",
        "2. Ship",
        "[x] Tell the team",
        "[ ] Write notes",
        "```bash",
        "make deploy",
        "make verify",
        "```",
        f"[page: Archive — id {OTHER}]",
        'More blocks: pass cursor="blk-2".',
    ]
    assert result.output.startswith("# Runbook\n")
    assert "Status: In progress" in result.output and "Tags: ops, q3" in result.output
    assert result.data["next_cursor"] == "blk-2" and result.data["title"] == "Runbook"
    # The child page is listed, never read through its parent.
    assert not api_server.hits(f"/blocks/{OTHER}/children")
    assert api_server.hits(f"/blocks/{CHILD}/children")[0].query == {"page_size": "50"}


async def test_page_read_passes_the_cursor_for_the_next_blocks(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    api_server.on(
        "GET",
        f"/pages/{ALLOWED}",
        Reply(body=page(ALLOWED, "Roadmap", {"type": "workspace", "workspace": True})),
    )
    api_server.on(
        "GET", f"/blocks/{ALLOWED}/children", Reply(body=listing([block("paragraph", "Q4")]))
    )
    result = await run(
        build(api_server.base, fake_time), "page_read", page_id=ALLOWED, cursor="blk-2"
    )
    assert result.success and result.output.endswith("Q4")
    assert result.data["next_cursor"] is None
    assert api_server.hits(f"/blocks/{ALLOWED}/children")[0].query["start_cursor"] == "blk-2"


async def test_page_outside_the_allowed_pages_is_refused_before_its_content_is_read(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    # The token can read it (Notion answers 200), the agent still may not.
    api_server.on(
        "GET",
        f"/pages/{OTHER}",
        Reply(body=page(OTHER, "Salaries", {"type": "page_id", "page_id": CHILD})),
    )
    api_server.on(
        "GET", f"/blocks/{OTHER}/children", Reply(body=listing([block("paragraph", "$$$")]))
    )
    result = await run(build(api_server.base, fake_time), "page_read", page_id=OTHER)
    assert not result.success
    assert result.data["error"] == "not_allowed" and OTHER in (result.error or "")
    assert "Salaries" not in f"{result.error}{result.output}"
    assert not api_server.hits(f"/blocks/{OTHER}/children")


async def test_workspace_parent_allows_top_level_pages_and_ids_match_without_dashes(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    api_server.on(
        "GET",
        f"/pages/{OTHER}",
        Reply(body=page(OTHER, "Home", {"type": "workspace", "workspace": True})),
    )
    api_server.on("GET", f"/blocks/{OTHER}/children", Reply(body=listing([])))
    tools = build(api_server.base, fake_time, allowed_pages=(), allowed_parents=("workspace",))
    assert (await run(tools, "page_read", page_id=OTHER)).success
    by_id = build(api_server.base, fake_time, allowed_pages=(OTHER.replace("-", "").upper(),))
    assert (await run(by_id, "page_read", page_id=OTHER)).success
    elsewhere = build(api_server.base, fake_time, allowed_pages=(), allowed_parents=(TEAM,))
    assert (await run(elsewhere, "page_read", page_id=OTHER)).data["error"] == "not_allowed"


async def test_a_config_without_any_allowed_page_is_refused() -> None:
    with pytest.raises(ValueError, match="allowed_pages"):
        PagesConfig()


async def test_401_is_an_auth_error_that_never_shows_the_token(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    error = {
        "object": "error",
        "status": 401,
        "code": "unauthorized",
        "message": f"bad token {TOKEN}",
    }
    api_server.on("POST", "/search", Reply(status=401, body=error))
    result = await run(build(api_server.base, fake_time), "pages_search", query="x")
    assert not result.success
    assert result.data == {"error": "auth", "source": "notion", "status": 401}
    assert "bad token [redacted]" in (result.error or "")
    assert not leaked(result)


async def test_429_with_retry_after_is_waited_out_then_retried(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    limited = {"object": "error", "status": 429, "code": "rate_limited", "message": "slow down"}
    api_server.on(
        "POST",
        "/search",
        Reply(status=429, body=limited, headers={"Retry-After": "2"}),
        Reply(body=listing([page(ALLOWED, "Roadmap", {"type": "workspace", "workspace": True})])),
    )
    result = await run(build(api_server.base, fake_time), "pages_search", query="road")
    assert result.success, result.error
    assert fake_time.sleeps == [2.0] and len(api_server.seen) == 2


async def test_429_with_a_long_retry_after_says_when_to_try_again(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    api_server.on(
        "GET", f"/pages/{ALLOWED}", Reply(status=429, body={}, headers={"Retry-After": "120"})
    )
    result = await run(build(api_server.base, fake_time), "page_read", page_id=ALLOWED)
    assert not result.success and fake_time.sleeps == []
    assert result.data["error"] == "rate_limited" and result.data["retry_after_s"] == 120


async def test_garbage_json_is_a_bad_response(api_server: ApiServer, fake_time: FakeTime) -> None:
    api_server.on("POST", "/search", Reply(body="<html>maintenance</html>"))
    api_server.on("GET", f"/pages/{ALLOWED}", Reply(body={"object": "list", "results": []}))
    tools = build(api_server.base, fake_time)
    searched = await run(tools, "pages_search", query="x")
    assert searched.data["error"] == "bad_response" and "maintenance" in (searched.error or "")
    read = await run(tools, "page_read", page_id=ALLOWED)
    assert read.data["error"] == "bad_response" and "not a page object" in (read.error or "")


async def test_unreachable_server_is_reported_as_such(fake_time: FakeTime) -> None:
    tools = build(f"http://127.0.0.1:{closed_port()}/v1", fake_time)
    result = await run(tools, "page_read", page_id=ALLOWED)
    assert not result.success
    assert result.data["error"] == "unreachable" and "nothing was sent" in (result.error or "")


async def test_missing_token_names_the_variable_and_sends_nothing(
    api_server: ApiServer, fake_time: FakeTime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_NOTION_TOKEN")
    result = await run(build(api_server.base, fake_time), "pages_search", query="x")
    assert result.data["error"] == "credentials"
    assert "$TEST_NOTION_TOKEN" in (result.error or "")
    assert api_server.seen == []


async def test_token_appears_in_no_repr_result_or_error(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    api_server.on("GET", f"/pages/{ALLOWED}", Reply(status=404, body={"message": f"no {TOKEN}"}))
    tools = build(api_server.base, fake_time)
    result = await run(tools, "page_read", page_id=ALLOWED)
    assert result.data["error"] == "not_found" and "not shared" in (result.error or "")
    assert not leaked(result)
    config = PagesConfig(token_env="TEST_NOTION_TOKEN", allowed_pages=(ALLOWED,))
    assert TOKEN not in repr(config) + repr(tools) + json.dumps(
        [t.spec.to_wire() for t in tools.values()]
    )


async def test_malformed_block_ids_from_the_server_are_not_followed(
    api_server: ApiServer, fake_time: FakeTime
) -> None:
    api_server.on(
        "GET",
        f"/pages/{ALLOWED}",
        Reply(body=page(ALLOWED, "Roadmap", {"type": "workspace", "workspace": True})),
    )
    sneaky = block("toggle", "More", bid="../../pages/" + OTHER, children=True)
    api_server.on("GET", f"/blocks/{ALLOWED}/children", Reply(body=listing([sneaky])))
    result = await run(build(api_server.base, fake_time), "page_read", page_id=ALLOWED)
    assert result.success and result.output.endswith("▸ More")
    assert len(api_server.seen) == 2
