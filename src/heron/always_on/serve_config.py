"""`ServeConfig`: what `heron serve` listens to, which sessions it hosts and which tools it
gives them; `ServeError` when that cannot start."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from heron._support.http_limits import BODY_TIMEOUT_S, DEFAULT_MAX_BODY, HEAD_TIMEOUT_S
from heron.errors import HeronError

if TYPE_CHECKING:
    # Types of fields only: `heron serve` builds a `ServeConfig` before it listens, and these
    # modules are the agent side's, imported after (docs/performance.md, start-up).
    from heron.always_on.subagents.service import SubagentsSetup
    from heron.always_on.triggers.runtime import TriggerConfig
    from heron.always_on.triggers.subscriptions import SubscriptionSource
    from heron.collaboration.setup import MessagingConfig
    from heron.humans.config import ApprovalsConfig

Announce = Callable[[dict[str, Any]], None]
"""Receives the server's own lifecycle records (`serve_accepting`, `serve_started`,
`session_woken`, `session_parked`, `session_failed`, `session_lost`, `serve_stopped`)."""


class ServeError(HeronError, RuntimeError):
    """The server cannot start as configured; nothing was started."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeConfig:
    """What `heron serve` listens to, which sessions it hosts and which tools it gives them."""

    state_dir: Path
    session: str = "default"
    """The default session: where an event that names no session goes; never parked."""
    sessions: frozenset[str] | None = None
    """The other sessions events may address (`None`: any valid name, created on its first
    event)."""
    idle_timeout_s: float = 300.0
    """How long a session other than the default stays awake with nothing to do."""
    max_awake: int | None = 100
    """At most this many sessions awake; past it, the least recently active idle ones are parked
    first (`heron.always_on.sessions.HostConfig.max_awake`); `None`: no bound."""
    poll_interval_s: float = 1.0
    """How often to look for events written by other processes."""
    workspace: Path | None = None
    """Where background jobs run; default `<state_dir>/workspace`."""
    sandbox: Literal["process", "bwrap"] = "process"
    triggers: TriggerConfig | None = None
    """Jobs, timers, heartbeat and system-event settings; `None`: the defaults. The heartbeat
    and the system events are the default session's only."""
    subscribe: tuple[SubscriptionSource, ...] = ()
    """Channels whose every inbound event wakes the session it is for (a standing
    subscription of each session)."""
    webhook_port: int | None = None
    """Listen for webhooks on this port (0: any free one); `None`: no webhook listener."""
    webhook_host: str = "127.0.0.1"
    webhook_secret_env: str = "HERON_WEBHOOK_SECRET"
    """Environment variable with the shared signing secret; required for webhooks."""
    http_port: int | None = None
    """Serve the routes mounted on the server (the gateway) on this port too (0: any free
    one); the webhooks are there as well when their secret is set."""
    http_host: str = "127.0.0.1"
    http_max_body: int = DEFAULT_MAX_BODY
    """The one body limit of every HTTP route (webhooks and gateway): 413 above it."""
    http_max_connections: int | None = None
    """Open connections of the front at once; `None`: half the file-descriptor limit."""
    http_head_timeout_s: float = HEAD_TIMEOUT_S
    http_body_timeout_s: float = BODY_TIMEOUT_S
    contacts: frozenset[str] = frozenset()
    """Known third parties: mail addresses, GitHub logins, IM sender ids."""
    maildir: Path | None = None
    """The mailbox to triage; required for `smtp_port`."""
    smtp_port: int | None = None
    smtp_host: str = "127.0.0.1"
    mail_domains: frozenset[str] = frozenset()
    """Recipient domains the SMTP listener accepts (empty: any)."""
    mail_from: str = "heron@localhost"
    """The From address of drafted replies."""
    mail_scan_interval_s: float = 5.0
    calendars: tuple[Path, ...] = ()
    notify_webhook: str | None = None
    """The user's webhook (heron's signed JSON): added to `[user] channels`."""
    notify_secret_env: str | None = None
    shutdown_grace_s: float = 10.0
    max_attempts: int = 3
    """Failed attempts to consume an event before it is quarantined (a dead letter)."""
    messaging: MessagingConfig | None = None
    """The agent's identity, the people it writes to, the channels and notices (`None`: the
    defaults)."""
    store_url: str | None = None
    """A PostgreSQL store shared with other workers (`None`: SQLite in `state_dir`); see
    docs/deployment.md."""
    lease_s: float = 15.0
    """On a shared store: how long a worker's hold on a session lasts unless renewed (a dead
    worker's sessions are taken over after it)."""

    def messaging_config(self) -> MessagingConfig:
        """`messaging` with `notify_webhook` folded into the user's channels."""
        from heron.collaboration.config import PersonConfig, SignedPostConfig
        from heron.collaboration.setup import MessagingConfig

        m = self.messaging or MessagingConfig()
        if self.notify_webhook is None:
            return m

        user = m.people.get(m.user, PersonConfig())
        channels = [*user.channels, *(["webhook"] if "webhook" not in user.channels else [])]
        people = {
            **m.people,
            m.user: user.model_copy(update={"webhook": self.notify_webhook, "channels": channels}),
        }
        posts = m.channels.model_copy(
            update={"webhook": SignedPostConfig(secret_env=self.notify_secret_env)}
        )
        return dataclasses.replace(m, people=people, channels=posts)

    approvals: ApprovalsConfig | None = field(default_factory=lambda: _approvals())
    """`[approvals]`: who answers requests to a human (by default the local operator with
    `heron approvals`); `None`: no durable requests, calls that need approval are denied."""
    approval_timeout_s: float = 300.0
    """`[approval] timeout_s`: how long a request waits; then it ends as no answer."""
    approval_announce: bool = False
    """Write one line per new request to standard error (the console channel's announce)."""
    subagents: SubagentsSetup | None = None
    """`[subagents]` and the agent definitions: every session gets the sub-agent tools, and
    each child runs as a session on this server's bus; `None`: no sub-agents."""


def _approvals() -> ApprovalsConfig:
    from heron.humans.config import ApprovalsConfig

    return ApprovalsConfig()
