"""The sections of `[tools.builtin]` for the connectors and the shell (`heron.config.builtin`
holds the section itself and builds the sets)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class WebSection(_Section):
    """`[tools.builtin.web]`: where `fetch_url`, `download_file` and the connectors may go."""

    allow_hosts: list[str] = Field(default_factory=list)
    """Private hosts, addresses or networks opened although they are private."""
    allow_private: bool = False
    """Open every private and loopback address (cloud metadata services stay closed)."""


class SearchSection(_Section):
    """`[tools.builtin.search]`: the `web_search` back end."""

    searxng_url: str | None = None
    """A SearXNG instance with the JSON format enabled; without it `web_search` says so."""


class KnowledgeSection(_Section):
    """`[tools.builtin.knowledge]`: the folder `knowledge_search` indexes."""

    folder: str | None = None
    """Without a folder there is no `knowledge_search` tool."""


class MailSection(_Section):
    """`[tools.builtin.mail]`: SMTP for `send_mail`; credentials come from the environment."""

    host: str
    port: int = 587
    from_addr: str
    username_env: str | None = None
    password_env: str | None = None
    starttls: bool = True
    timeout_s: float = Field(default=30.0, gt=0)


class PagesSection(_Section):
    """`[tools.builtin.pages]`: the Notion pages `pages_search` / `page_read` may read; the
    token comes from the environment variable `token_env`."""

    base_url: str = "https://api.notion.com/v1"
    token_env: str = "NOTION_TOKEN"
    notion_version: str = "2022-06-28"
    allowed_pages: list[str] = Field(default_factory=list)
    allowed_parents: list[str] = Field(default_factory=list)


class CalendarEntry(_Section):
    """One calendar of `[tools.builtin.calendar.<name>]`: an iCalendar file (`path`, relative
    to the workspace) or a CalDAV collection (`url`, credentials named by environment variable)."""

    path: str | None = None
    url: str | None = None
    username_env: str | None = None
    password_env: str | None = None
    access: Literal["read", "read_write"] = "read_write"
    organizer: str | None = None
    timeout_s: int = Field(default=20, gt=0)


class GitHubSection(_Section):
    """`[tools.builtin.github]`: the API root, the token's environment variable and the
    repositories (`owner/name`) the agent may touch; empty `repos` allows all the token reaches."""

    base_url: str = "https://api.github.com"
    token_env: str = "GITHUB_TOKEN"
    repos: list[str] = Field(default_factory=list)


class WebhookSection(_Section):
    """`[tools.builtin.webhooks]`: the HMAC secret's environment variable and the URL prefixes
    `call_webhook` may post to."""

    secret_env: str
    allowed_urls: list[str] = Field(default_factory=list)


class ShellSection(_Section):
    """`[tools.shell]`: what the `shell` tool may run when no operator can be asked."""

    unattended_risk: Literal["low", "medium"] = "low"
    """The highest risk tier that runs with no operator (`heron run --non-interactive`, `heron
    serve`): `low` (inspection, workspace writes; only where the sandbox contains heron's
    environment and the files outside the workspace, else low counts as medium) or `medium`
    (also deletions in the workspace, network clients, unknown programs). High risk never runs
    unattended."""
