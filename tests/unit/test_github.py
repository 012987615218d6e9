"""GitHub tools against a loopback server speaking the REST API's documented shapes: Link
pagination, 401, 404, 422 validation errors, primary and secondary rate limits."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from heron import ToolResult
from heron.connectors.github import GitHubConfig, github_tools
from heron.safety.idempotency import Confirmations, IdempotencyStore
from heron.safety.sqlite_idempotency import SqliteIdempotencyLedger
from heron.tools.definition import Tool
from support.clock import FakeTime
from support.connectors import LOCAL, ApiServer, Reply, Seen, closed_port, run

TOKEN = "ghp_test0123456789abcdefTOKEN"
PR_ARGS: dict[str, Any] = {
    "repo": "octo/app",
    "title": "Fix login timeout",
    "head": "fix-login",
    "base": "main",
    "body": "Raises the timeout to 30 s.",
}


def issue(number: int, *, pr: bool = False, **more: Any) -> dict[str, Any]:
    item = {
        "number": number,
        "title": f"Item {number}",
        "state": "open",
        "html_url": f"https://github.com/octo/app/issues/{number}",
        "user": {"login": "ana"},
        "comments": 2,
        "labels": [{"name": "bug"}],
    } | more
    if pr:
        item["pull_request"] = {"url": f"https://api.github.com/repos/octo/app/pulls/{number}"}
    return item


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_GH_TOKEN", TOKEN)


def build(base: str, fake_time: FakeTime, tmp_path: Path, **options: Any) -> dict[str, Tool]:
    config = GitHubConfig(base_url=base, token_env="TEST_GH_TOKEN", policy=LOCAL, **options)
    confirmations = Confirmations(IdempotencyStore(SqliteIdempotencyLedger(tmp_path / "state")))
    tools = github_tools(config, confirmations, **fake_time.seams)
    return {t.spec.name: t for t in tools}


def leaked(result: ToolResult) -> bool:
    return TOKEN in f"{result.output}{result.error}{json.dumps(result.data, default=str)}"


async def test_listing_follows_link_pagination_with_an_opaque_cursor(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    next_url = f"{api_server.base}/repositories/7/issues?state=open&per_page=2&page=2"
    link = f'<{next_url}>; rel="next", <{api_server.base}/repositories/7/issues?page=2>; rel="last"'
    api_server.on(
        "GET",
        "/repos/octo/app/issues",
        Reply(body=[issue(3), issue(2, pr=True)], headers={"Link": link}),
    )
    api_server.on("GET", "/repositories/7/issues", Reply(body=[issue(1)]))
    tools = build(api_server.base, fake_time, tmp_path)
    first = await run(tools, "github_list_issues", repo="octo/app", per_page=2)
    assert first.success, first.error
    assert "#3 [open] Item 3 (issue; by ana, 2 comments, labels: bug)" in first.output
    assert "#2 [open] Item 2 (PR;" in first.output
    assert first.data["next_cursor"] == next_url
    sent = api_server.seen[0]
    assert sent.query == {"state": "open", "per_page": "2"}
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert sent.headers["accept"] == "application/vnd.github+json"
    second = await run(tools, "github_list_issues", repo="octo/app", cursor=next_url)
    assert second.success and [i["number"] for i in second.data["items"]] == [1]
    assert second.data["next_cursor"] is None and "More:" not in second.output
    assert not leaked(first) and not leaked(second)


async def test_kind_issues_leaves_pull_requests_out_and_says_so(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    api_server.on("GET", "/repos/octo/app/issues", Reply(body=[issue(3), issue(2, pr=True)]))
    result = await run(
        build(api_server.base, fake_time, tmp_path),
        "github_list_issues",
        repo="octo/app",
        kind="issues",
        labels=["bug", "ui"],
    )
    assert [i["number"] for i in result.data["items"]] == [3]
    assert "(1 pull requests on this page were left out)" in result.output
    assert api_server.seen[0].query["labels"] == "bug,ui"


async def test_a_cursor_for_another_origin_is_refused(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    tools = build(api_server.base, fake_time, tmp_path)
    result = await run(
        tools, "github_list_issues", repo="octo/app", cursor="https://evil.example/steal?page=2"
    )
    assert not result.success and "not issued by this tool" in (result.error or "")
    assert api_server.seen == []


async def test_unauthorised_and_missing_repositories_are_clear(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    def bad_credentials(seen: Seen) -> Reply:
        return Reply(
            status=401, body={"message": f"Bad credentials: {seen.headers['authorization']}"}
        )

    api_server.on("GET", "/repos/octo/app/issues", fn=bad_credentials)
    tools = build(api_server.base, fake_time, tmp_path)
    unauthorised = await run(tools, "github_list_issues", repo="octo/app")
    assert unauthorised.data["error"] == "auth" and "Bad credentials" in (unauthorised.error or "")
    assert not leaked(unauthorised)
    missing = await run(tools, "github_list_issues", repo="octo/gone")
    assert missing.data == {"error": "not_found", "source": "github", "status": 404}


async def test_primary_rate_limit_reports_the_reset_time(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(fake_time.time()) + 900)}
    api_server.on(
        "GET",
        "/repos/octo/app/issues",
        Reply(status=403, body={"message": "API rate limit exceeded"}, headers=headers),
    )
    result = await run(
        build(api_server.base, fake_time, tmp_path), "github_list_issues", repo="octo/app"
    )
    assert result.data["error"] == "rate_limited" and result.data["retry_after_s"] == 900
    assert "try again in 900 s" in (result.error or "") and fake_time.sleeps == []


async def test_short_secondary_rate_limit_is_waited_out(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    api_server.on(
        "GET",
        "/repos/octo/app/issues",
        Reply(status=429, body={"message": "secondary rate limit"}, headers={"Retry-After": "4"}),
        Reply(body=[issue(1)]),
    )
    result = await run(
        build(api_server.base, fake_time, tmp_path), "github_list_issues", repo="octo/app"
    )
    assert result.success and fake_time.sleeps == [4.0] and len(api_server.seen) == 2


async def test_garbage_and_unreachable_are_structured(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    api_server.on("GET", "/repos/octo/app/issues", Reply(body=b"{not json"))
    garbage = await run(
        build(api_server.base, fake_time, tmp_path), "github_list_issues", repo="octo/app"
    )
    assert garbage.data["error"] == "bad_response"
    down = build(f"http://127.0.0.1:{closed_port()}", fake_time, tmp_path)
    unreachable = await run(down, "github_list_issues", repo="octo/app")
    assert unreachable.data == {"error": "unreachable", "source": "github"}


async def test_repositories_outside_the_allow_list_are_refused(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    tools = build(api_server.base, fake_time, tmp_path, repos=("octo/app",))
    result = await run(tools, "github_comment", repo="octo/secret", number=1, body="hi")
    assert not result.success and "not one this agent may use" in (result.error or "")
    assert api_server.seen == []


async def test_comment_with_an_idempotency_key_posts_once(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    comment = {"id": 99, "html_url": "https://github.com/octo/app/issues/5#issuecomment-99"}
    api_server.on("POST", "/repos/octo/app/issues/5/comments", Reply(status=201, body=comment))
    tools = build(api_server.base, fake_time, tmp_path)
    args = {"repo": "octo/app", "number": 5, "body": "Fixed in #57.", "idempotency_key": "fix-5"}
    first = await run(tools, "github_comment", **args)
    again = await run(tools, "github_comment", **args)
    assert first.success and "issuecomment-99" in first.output
    assert again.success and again.data["replayed"] is True
    assert len(api_server.hits("/repos/octo/app/issues/5/comments")) == 1
    assert json.loads(api_server.seen[0].body) == {"body": "Fixed in #57."}


async def test_comment_on_a_missing_issue_is_not_done_and_frees_the_key(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    api_server.on(
        "POST",
        "/repos/octo/app/issues/404/comments",
        Reply(status=404, body={"message": "Not Found"}),
        Reply(status=201, body={"id": 1, "html_url": "u"}),
    )
    tools = build(api_server.base, fake_time, tmp_path)
    args = {"repo": "octo/app", "number": 404, "body": "x", "idempotency_key": "k"}
    first = await run(tools, "github_comment", **args)
    assert not first.success and first.data["error"] == "not_performed"
    assert "no comment was posted" in (first.error or "")
    retry = await run(tools, "github_comment", **args)
    assert retry.success  # nothing happened the first time, so the key was free again


async def test_pull_request_is_preflighted_then_created_once(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    api_server.on("GET", "/repos/octo/app/pulls", Reply(body=[]))
    created = {"number": 58, "html_url": "https://github.com/octo/app/pull/58"}
    api_server.on("POST", "/repos/octo/app/pulls", Reply(status=201, body=created))
    tools = build(api_server.base, fake_time, tmp_path)
    preflight = await run(tools, "github_create_pull_request", **PR_ARGS)
    assert preflight.success, preflight.error
    assert "PREFLIGHT" in preflight.output and "octo:fix-login → main" in preflight.output
    assert api_server.seen[0].query == {"state": "open", "head": "octo:fix-login", "base": "main"}
    assert api_server.hits("/repos/octo/app/pulls")[-1].method == "GET"
    token = preflight.data["confirmation_token"]
    done = await run(tools, "github_create_pull_request", **PR_ARGS, confirmation_token=token)
    assert done.success and done.data["number"] == 58
    posts = [s for s in api_server.seen if s.method == "POST"]
    assert len(posts) == 1
    assert json.loads(posts[0].body) == PR_ARGS | {"draft": False}
    reused = await run(tools, "github_create_pull_request", **PR_ARGS, confirmation_token=token)
    assert not reused.success and len([s for s in api_server.seen if s.method == "POST"]) == 1


async def test_an_open_pull_request_for_the_same_branches_stops_the_preflight(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    open_pr = issue(41, html_url="https://github.com/octo/app/pull/41") | {
        "head": {"ref": "fix-login"}
    }
    api_server.on("GET", "/repos/octo/app/pulls", Reply(body=[open_pr]))
    result = await run(
        build(api_server.base, fake_time, tmp_path), "github_create_pull_request", **PR_ARGS
    )
    assert (
        not result.success
        and "#41" in (result.error or "")
        and "already open" in (result.error or "")
    )


async def test_validation_failure_at_confirm_is_not_done_with_githubs_reasons(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    api_server.on("GET", "/repos/octo/app/pulls", Reply(body=[]))
    invalid = {
        "message": "Validation Failed",
        "errors": [{"resource": "PullRequest", "field": "head", "code": "invalid"}],
        "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
    }
    api_server.on("POST", "/repos/octo/app/pulls", Reply(status=422, body=invalid))
    tools = build(api_server.base, fake_time, tmp_path)
    token = (await run(tools, "github_create_pull_request", **PR_ARGS)).data["confirmation_token"]
    result = await run(tools, "github_create_pull_request", **PR_ARGS, confirmation_token=token)
    assert not result.success and result.data["error"] == "not_performed"
    assert "Validation Failed (PullRequest head invalid)" in (result.error or "")


async def test_a_timeout_after_sending_is_outcome_unknown(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path
) -> None:
    release = threading.Event()
    api_server.on("GET", "/repos/octo/app/pulls", Reply(body=[]))
    api_server.on(
        "POST", "/repos/octo/app/pulls", Reply(status=201, body={"number": 1}, wait=release)
    )
    tools = build(api_server.base, fake_time, tmp_path, timeout_s=0.2)
    token = (await run(tools, "github_create_pull_request", **PR_ARGS)).data["confirmation_token"]
    try:
        result = await run(tools, "github_create_pull_request", **PR_ARGS, confirmation_token=token)
    finally:
        release.set()
    assert not result.success and result.data["error"] == "outcome_unknown"
    assert "list the open pull requests of octo/app from octo:fix-login" in (result.error or "")


async def test_missing_token_sends_nothing(
    api_server: ApiServer, fake_time: FakeTime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_GH_TOKEN")
    result = await run(
        build(api_server.base, fake_time, tmp_path), "github_list_issues", repo="octo/app"
    )
    assert result.data["error"] == "credentials" and "$TEST_GH_TOKEN" in (result.error or "")
    assert api_server.seen == []
