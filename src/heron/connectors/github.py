"""GitHub tools over the REST API: list issues and pull requests, comment, open a pull request.

`github_tools(config, confirmations)` talks to `config.base_url` (`https://api.github.com`, or a
GitHub Enterprise `https://host/api/v3`) through `HttpApi`, with the token read from the
environment variable `config.token_env` at request time (sent as `Authorization: Bearer …`,
never shown). `config.repos`, when not empty, is the allow-list of repositories.

- `github_list_issues`: one page of issues and/or pull requests. Pages follow GitHub's `Link`
  header: the `rel="next"` URL is returned as an opaque cursor (checked to stay on the API's
  origin when it comes back).
- `github_comment`: one comment on an issue or pull request; an `idempotency_key` makes a retry
  return the first result instead of commenting twice (`IdempotencyStore`).
- `github_create_pull_request`: irreversible, so preflight → confirm. The preflight looks for an
  open pull request from the same head into the same base first (query before mutate).

Rate limits: a 403 with `x-ratelimit-remaining: 0` and `x-ratelimit-reset`, and a 403/429 with
`Retry-After`, are waited out when short and reported with the retry time otherwise. A change
that fails in a way that proves nothing was created (refused connection, 4xx) is reported as not
done; a timeout after sending is "outcome unknown" and never retried blindly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

from heron.connectors.http_api import ApiError, ApiSource, Credential, HttpApi, Sleep, parse_links
from heron.safety.idempotency import (
    OUTCOME_UNKNOWN,
    Confirmations,
    InvalidAction,
    NotPerformed,
    Plan,
    PreflightConfirm,
)
from heron.safety.url_policy import UrlPolicy
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

__all__ = ["GitHubConfig", "github_tools"]

Repo = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")]
Branch = Annotated[
    str, Field(min_length=1, max_length=255, pattern=r"^[^\s~^:?*\[\\]+(:[^\s~^:?*\[\\]+)?$")
]
IdempotencyKey = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")]
# Failures after which GitHub certainly created nothing: the request was refused or never sent.
_NOT_DONE = frozenset({"refused", "credentials", "unreachable", "rate_limited", "auth"})
_NOT_DONE |= {"not_found", "rejected", "http"}


@dataclass(frozen=True, kw_only=True, slots=True)
class GitHubConfig:
    """Where the API is, whose token to use, and which repositories the agent may touch."""

    base_url: str = "https://api.github.com"
    token_env: str = "GITHUB_TOKEN"
    repos: tuple[str, ...] = ()
    """Allowed `owner/name` repositories; empty allows every repository the token reaches."""
    policy: UrlPolicy = field(default_factory=UrlPolicy)
    timeout_s: float = 20.0
    max_wait_s: float = 10.0
    """Longest rate-limit wait absorbed by waiting."""
    user_agent: str = "heron-agent/1.0"


def _problem(error: ApiError) -> str:
    """GitHub's validation details (`errors: [{resource, field, code, message}]`) as text."""
    detail = error.detail if isinstance(error.detail, dict) else {}
    found = []
    for item in detail.get("errors") or []:
        if isinstance(item, dict):
            text = item.get("message") or " ".join(
                str(item[k]) for k in ("resource", "field", "code") if item.get(k)
            )
            found.append(str(text))
        elif isinstance(item, str):
            found.append(item)
    return f"{error} ({'; '.join(found)})" if found else str(error)


def _item_line(item: dict[str, Any]) -> str:
    kind = "PR" if "pull_request" in item or "head" in item else "issue"
    labels = [
        str(label.get("name")) for label in item.get("labels") or [] if isinstance(label, dict)
    ]
    facts = [f"by {(item.get('user') or {}).get('login', '?')}"]
    if isinstance(item.get("comments"), int):
        facts.append(f"{item['comments']} comments")
    if labels:
        facts.append("labels: " + ", ".join(labels))
    if item.get("draft"):
        facts.append("draft")
    return (
        f"#{item.get('number')} [{item.get('state')}] {item.get('title')} ({kind}; "
        f"{', '.join(facts)})\n   {item.get('html_url', '')}"
    )


def github_tools(
    config: GitHubConfig,
    confirmations: Confirmations,
    *,
    sleep: Sleep = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> list[Tool]:
    """The GitHub tools over `config`; pull requests are two-phase through `confirmations`."""
    source = ApiSource(
        name="github",
        base_url=config.base_url,
        timeout_s=config.timeout_s,
        max_wait_s=config.max_wait_s,
        credential=Credential(env=config.token_env),
        user_agent=config.user_agent,
        headers={"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"},
    )
    api = HttpApi(source, policy=config.policy, sleep=sleep, clock=clock, wall_clock=wall_clock)
    store = confirmations.store
    gate = PreflightConfirm(
        "github_create_pull_request", confirmations, timeout_s=config.timeout_s * 3
    )

    def allowed(repo: str) -> None:
        if config.repos and repo.lower() not in {r.lower() for r in config.repos}:
            raise InvalidAction(
                f"repository {repo} is not one this agent may use: {', '.join(config.repos)}"
            )

    async def change(method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """A mutating request: `NotPerformed` when certainly nothing happened, `ApiError` for an
        unknown outcome."""
        try:
            response = await api.send(method, path, json_body=body)
        except ApiError as exc:
            if exc.kind in _NOT_DONE:
                raise NotPerformed(_problem(exc)) from None
            raise
        document = response.json()
        if not isinstance(document, dict):
            raise response.bad("not a JSON object")
        return document

    @tool(
        read_only=True,
        open_world=True,
        owner="builtin",
        examples=[
            {"repo": "octo-org/app"},
            {"repo": "octo-org/app", "kind": "pulls", "state": "closed"},
        ],
    )
    async def github_list_issues(
        repo: Repo,
        state: Literal["open", "closed", "all"] = "open",
        kind: Literal["all", "issues", "pulls"] = "all",
        labels: list[Annotated[str, Field(min_length=1, max_length=50)]] | None = None,
        cursor: Annotated[str, Field(max_length=2000)] | None = None,
        per_page: Annotated[int, Field(ge=1, le=100)] = 30,
    ) -> ToolResult:
        """List a GitHub repository's issues and/or pull requests, newest first, one page per
        call. `kind="issues"` leaves pull requests out (the result says how many); labels
        filter issues only. Cannot search text (no full-text search) or show comments.

        Returns: per item `#number [state] title (issue or PR; author, comments, labels)` and
        its URL, and a cursor for the next page when there is one.

        Args:
            repo: `owner/name`, e.g. `octo-org/app`.
            state: open, closed or all.
            kind: all, issues (no pull requests) or pulls (pull requests only).
            labels: Only issues with all these labels, e.g. `["bug"]`.
            cursor: The cursor from the previous page's result; other arguments are then ignored.
            per_page: Items per page (1-100).
        """
        try:
            allowed(repo)
            if cursor is not None:
                if not api.same_origin(cursor):
                    raise InvalidAction("cursor was not issued by this tool; omit it for page 1")
                response = await api.get(cursor, cache=False)
            else:
                params = {"state": state, "per_page": str(per_page)}
                if labels and kind != "pulls":
                    params["labels"] = ",".join(labels)
                path = f"repos/{repo}/pulls" if kind == "pulls" else f"repos/{repo}/issues"
                response = await api.get(path, params=params, cache=False)
            items = response.json()
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise response.bad("not a JSON list of objects")
        except InvalidAction as exc:
            return ToolResult.fail(str(exc))
        except ApiError as exc:
            return exc.to_result()
        skipped = 0
        if kind == "issues":
            skipped = sum("pull_request" in i for i in items)
            items = [i for i in items if "pull_request" not in i]
        next_cursor = parse_links(response.headers.get("Link", "")).get("next")
        lines = [f"{len(items)} items from {repo} ({state}, {kind}):", *map(_item_line, items)]
        if skipped:
            lines.append(f"({skipped} pull requests on this page were left out)")
        if next_cursor:
            lines.append(f'More: pass cursor="{next_cursor}".')
        data = {
            "items": [
                {k: i.get(k) for k in ("number", "title", "state", "html_url", "draft")}
                | {"pull_request": "pull_request" in i or "head" in i}
                for i in items
            ],
            "next_cursor": next_cursor,
        }
        return ToolResult.ok("\n".join(lines), data=data)

    @tool(
        open_world=True,
        owner="builtin",
        examples=[
            {
                "repo": "octo-org/app",
                "number": 42,
                "body": "Fixed in #57.",
                "idempotency_key": "close-42",
            }
        ],
    )
    async def github_comment(
        repo: Repo,
        number: Annotated[int, Field(ge=1)],
        body: Annotated[str, Field(min_length=1, max_length=65_536)],
        idempotency_key: IdempotencyKey | None = None,
    ) -> ToolResult:
        """Post a comment on an issue or pull request (GitHub Markdown; visible to everyone who
        can see the repository). Pass an idempotency_key so that a retry after an error returns
        the first result instead of commenting twice.

        Returns: the comment's URL.

        Args:
            repo: `owner/name`, e.g. `octo-org/app`.
            number: The issue or pull request number, e.g. `42`.
            body: The comment text (Markdown).
            idempotency_key: A unique name for this comment, e.g. `release-notes-42`.
        """
        try:
            allowed(repo)
        except InvalidAction as exc:
            return ToolResult.fail(str(exc))

        async def post() -> ToolResult:
            try:
                made = await change(
                    "POST", f"repos/{repo}/issues/{number}/comments", {"body": body}
                )
            except NotPerformed as exc:
                raise NotPerformed(f"no comment was posted: {exc}") from None
            except ApiError as exc:
                check = f"look at the comments of {repo}#{number}"
                text = OUTCOME_UNKNOWN.format(detail=str(exc), check=f" ({check})")
                return ToolResult.fail(text, data={"error": "outcome_unknown"})
            url = str(made.get("html_url", ""))
            return ToolResult.ok(
                f"commented on {repo}#{number}: {url}", data={"url": url, "id": made.get("id")}
            )

        if idempotency_key is None:
            return await _not_performed_as_failure(post)
        arguments = {"repo": repo, "number": number, "body": body}
        return await store.run_once("github_comment", idempotency_key, arguments, post)

    @tool(
        irreversible=True,
        open_world=True,
        owner="builtin",
        examples=[
            {
                "repo": "octo-org/app",
                "title": "Fix login timeout",
                "head": "fix-login",
                "base": "main",
            },
        ],
    )
    async def github_create_pull_request(
        repo: Repo,
        title: Annotated[str, Field(min_length=1, max_length=256)],
        head: Branch,
        base: Branch,
        body: Annotated[str, Field(max_length=65_536)] = "",
        draft: bool = False,
        confirmation_token: str | None = None,
        idempotency_key: IdempotencyKey | None = None,
    ) -> ToolResult:
        """Open a pull request from branch `head` into branch `base`. Opening one notifies
        watchers and cannot be taken back, so it takes two calls: the first (without
        confirmation_token) checks that no open pull request already goes from head into
        base, creates nothing, and shows exactly what would be opened plus a token; call again
        with the same arguments plus that token to open it once.

        Returns: the pull request's number and URL. If the result is "outcome unknown", list
        the open pull requests before trying again.

        Args:
            repo: `owner/name`, e.g. `octo-org/app`.
            title: The title, e.g. `Fix login timeout`.
            head: The branch with the changes, e.g. `fix-login` (or `fork-owner:fix-login`).
            base: The branch to merge into, e.g. `main`.
            body: The description (Markdown).
            draft: Open it as a draft.
            confirmation_token: The token from this tool's preflight result; omit to preflight.
            idempotency_key: A unique name for this pull request, so a retry never opens two.
        """
        arguments = {
            "repo": repo,
            "title": title,
            "head": head,
            "base": base,
            "body": body,
            "draft": draft,
        }
        owner = repo.split("/", 1)[0]
        qualified = head if ":" in head else f"{owner}:{head}"
        existing: list[dict[str, Any]] = []
        try:
            allowed(repo)
            if head == base:
                raise InvalidAction("head and base are the same branch")
            if confirmation_token is None:
                params = {"state": "open", "head": qualified, "base": base}
                found = (await api.get(f"repos/{repo}/pulls", params=params, cache=False)).json()
                existing = (
                    [p for p in found if isinstance(p, dict)] if isinstance(found, list) else []
                )
        except InvalidAction as exc:
            return ToolResult.fail(
                f"github_create_pull_request refused: {exc}", data={"error": "invalid_arguments"}
            )
        except ApiError as exc:
            return exc.to_result()

        def plan(_: str) -> Plan:
            if existing:
                first = existing[0]
                raise InvalidAction(
                    f"pull request #{first.get('number')} from {qualified} into {base} is already "
                    f"open: {first.get('html_url')}"
                )

            async def execute() -> ToolResult:
                made = await change("POST", f"repos/{repo}/pulls", dict(arguments))
                number, url = made.get("number"), made.get("html_url")
                return ToolResult.ok(
                    f"opened pull request #{number} in {repo}: {url}",
                    data={"phase": "created", "number": number, "url": url},
                )

            lines = [
                f"Open a {'draft ' if draft else ''}pull request in {repo}: {qualified} → {base}",
                f"Title: {title}",
                "Body:" if body else "Body: (empty)",
                *([body] if body else []),
            ]
            return Plan(
                summary="\n".join(lines),
                execute=execute,
                data={"repo": repo, "head": qualified, "base": base},
                if_unknown=f"list the open pull requests of {repo} from {qualified}",
            )

        return await gate.run(
            arguments,
            confirmation_token=confirmation_token,
            idempotency_key=idempotency_key,
            plan=plan,
        )

    return [github_list_issues, github_comment, github_create_pull_request]


async def _not_performed_as_failure(action: Callable[[], Awaitable[ToolResult]]) -> ToolResult:
    try:
        return await action()
    except NotPerformed as exc:
        return ToolResult.fail(str(exc), data={"error": "not_performed"})
