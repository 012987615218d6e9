"""`open_outbox`: the outbox of a process, from the configuration — the message store in
`<state_dir>/heron.db`, the agent's identity, the people, and the channels it can deliver on
(the console always; mail with `[channels.mail]`; webhook and IM posts when someone has such
an address). `heron serve`, the `collaboration` tool set and `heron messages` open it here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from heron._support.clock import Clock, RealClock
from heron.collaboration.channels import (
    ConsoleChannel,
    ImChannel,
    MailChannel,
    OutboundChannel,
    WebhookChannel,
)
from heron.collaboration.config import ChannelsConfig, MessagesConfig, PersonConfig
from heron.collaboration.identity import AgentIdentity
from heron.collaboration.outbox import Outbox
from heron.collaboration.sqlite_store import SqliteMessageStore
from heron.collaboration.store import StoredMessage
from heron.collaboration.tokens import TokenSigner
from heron.turn.signing_keys import key_store

if TYPE_CHECKING:
    from heron.collaboration.postgres_store import PostgresMessageStore

__all__ = ["MessagingConfig", "open_outbox"]


@dataclass(frozen=True, kw_only=True, slots=True)
class MessagingConfig:
    """Who the agent is, whom it writes to and how (`[identity]`, `[user]`, `[people.*]`,
    `[channels]`, `[messages]`)."""

    identity: AgentIdentity = field(default_factory=AgentIdentity)
    user: str = "user"
    people: Mapping[str, PersonConfig] = field(default_factory=dict)
    """Everyone, the user under `user`."""
    channels: ChannelsConfig = field(default_factory=ChannelsConfig)
    messages: MessagesConfig = field(default_factory=MessagesConfig)


def open_outbox(
    config: MessagingConfig,
    *,
    state_dir: Path,
    console: TextIO | None = None,
    on_mail_sent: Callable[[str, StoredMessage], None] | None = None,
    clock: Clock | None = None,
    store_url: str | None = None,
) -> tuple[Outbox, SqliteMessageStore | PostgresMessageStore]:
    """The outbox and its store (close the store with `close()`): the shared PostgreSQL
    store at `store_url`, else `state_dir`'s database. `console`: where the console channel
    also writes each message (`None`: only the store)."""
    clock = clock or RealClock()
    store: SqliteMessageStore | PostgresMessageStore
    if store_url is not None:
        from heron.collaboration.postgres_store import PostgresMessageStore

        store = PostgresMessageStore.open(store_url)
    else:
        store = SqliteMessageStore.open(state_dir)
    people = dict(config.people)
    people.setdefault(config.user, PersonConfig())
    channels: list[OutboundChannel] = [ConsoleChannel(console, clock=clock)]
    mail = config.channels.mail
    if mail is not None:
        channels.append(
            MailChannel(
                host=mail.host,
                port=mail.port,
                identity=config.identity,
                username_env=mail.username_env,
                password_env=mail.password_env,
                starttls=mail.starttls,
                timeout_s=mail.timeout_s,
                on_sent=on_mail_sent,
                clock=clock,
            )
        )
    posts = config.channels
    if any(p.webhook for p in people.values()):
        channels.append(
            WebhookChannel(
                secret_env=posts.webhook.secret_env, timeout_s=posts.webhook.timeout_s, clock=clock
            )
        )
    if any(p.im for p in people.values()):
        channels.append(
            ImChannel(secret_env=posts.im.secret_env, timeout_s=posts.im.timeout_s, clock=clock)
        )
    outbox = Outbox(
        store,
        identity=config.identity,
        people=people,
        user=config.user,
        channels=channels,
        signer=TokenSigner(
            key_store("message", state_dir=state_dir, store_url=store_url), clock=clock
        ),
        action_ttl_s=config.messages.action_ttl_s,
        clock=clock,
    )
    return outbox, store
