"""`MessageStore`: every message heron sent a person, on every channel, with its read state.

One record per message, whatever the channels it went out on: one id (`msg-…`, also the mail
Message-ID's and the webhook's `id`) and one thread (`StoredMessage.thread`: the messages of one
session or conversation, threaded the same way in a mail client and in the store). Each
delivery is recorded with its outcome and the channel's own reference (a mail's Message-ID),
so an answer on that channel finds its message (`find_by_ref`).

Read state, without tracking pixels: a message is *read* when it is opened on the console
(`heron messages show`) or the web, and *answered* (which implies read) when a reply to it
arrives on any channel. An unread message may have deliveries still due (`due_at`: the end of
quiet hours, or the time an unread urgent message moves to its next channel); `take_due` hands
them out once, atomically, to whichever process asks first.

The implementations are `heron.collaboration.sqlite_store.SqliteMessageStore` (the state
directory's database) and `heron.collaboration.postgres_store.PostgresMessageStore` (a shared
store); every method is synchronous (a short transaction) and a back-end failure raises
`heron.errors.StoreError`.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from heron._support.vocabulary import Urgency

__all__ = ["Attachment", "Delivery", "MessageKind", "MessageStore", "StoredMessage"]

MessageKind = Literal["message", "card", "notification"]
"""Which tool wrote it: `send_message`, `send_card` or `send_notification` (and the runtime's
own notices)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Attachment:
    """A file of the agent's workspace, passed by reference: its path, never its content."""

    path: str
    """Relative to the workspace root."""
    bytes: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Delivery:
    """One attempt on one channel."""

    channel: str
    outcome: str
    """`ok` or `failed: <why>`."""
    at: float
    ref: str | None = None
    """The channel's own id of what it sent (a mail's Message-ID), for matching answers."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredMessage:
    """One message to one person."""

    id: str
    thread: str
    kind: MessageKind
    to: str
    """The person's name (`[user]` or `[people.NAME]`)."""
    text: str
    """The plain text every channel can show (a card's plain-text rendering)."""
    urgency: Urgency
    sender: str
    """The agent's identity as shown: `Heron <heron@example.com>`."""
    created: float
    session: str | None = None
    card: Mapping[str, Any] | None = field(default=None, hash=False)
    """A card's JSON (`Card.model_dump`), for channels that render it."""
    attachments: tuple[Attachment, ...] = ()
    deliveries: tuple[Delivery, ...] = ()
    read_at: float | None = None
    read_via: str | None = None
    answered_at: float | None = None
    answered_via: str | None = None
    due_at: float | None = None
    """When the channels in `pending` are next due (quiet hours' end, or the recall time)."""
    pending: tuple[str, ...] = ()
    """Channels still to deliver to: deferred by quiet hours, or the recall chain of an urgent
    message, in order."""

    @property
    def read(self) -> bool:
        return self.read_at is not None

    def delivered(self) -> dict[str, str]:
        """Channel → the outcome of its latest delivery."""
        return {d.channel: d.outcome for d in self.deliveries}


class MessageStore(Protocol):
    """Durable messages and their read state; see the module docstring."""

    def add(self, message: StoredMessage) -> None:
        """Store a new message (its id must be new)."""
        ...

    def get(self, message_id: str) -> StoredMessage | None: ...

    def list(
        self,
        *,
        unread_only: bool = False,
        session: str | None = None,
        thread: str | None = None,
        limit: int = 100,
    ) -> builtins.list[StoredMessage]:
        """Messages (optionally only unread ones, of one session or thread), the latest
        `limit`, oldest first."""
        ...

    def record_delivery(self, message_id: str, delivery: Delivery) -> None:
        """Add a delivery attempt to a message (`KeyError` for an unknown id)."""
        ...

    def find_by_ref(self, refs: builtins.list[str]) -> StoredMessage | None:
        """The message one of `refs` (channel references, most direct first) was delivered
        as, or `None`."""
        ...

    def mark_read(self, message_id: str, *, via: str, at: float) -> bool:
        """Mark a message read (nothing is due for it any more); `False` when it is unknown
        or already read."""
        ...

    def mark_answered(self, message_id: str, *, via: str, at: float) -> bool:
        """Mark a message answered (and read, if it was not); `False` when it is unknown or
        already answered. A read or answered message has nothing due any more."""
        ...

    def schedule(self, message_id: str, *, pending: tuple[str, ...], due_at: float | None) -> None:
        """Set the channels still to deliver to and when they are due (`None`: nothing)."""
        ...

    def take_due(self, now: float) -> builtins.list[StoredMessage]:
        """Atomically hand out every unread message whose `due_at` has come (clearing it, so a
        second caller gets nothing), oldest due first."""
        ...

    def next_due(self) -> float | None:
        """The earliest `due_at` of an unread message, if any."""
        ...


COLUMNS = (
    "id, thread, session, kind, recipient, text, card, attachments, urgency, sender, created,"
    " read_at, read_via, answered_at, answered_via, due_at, pending"
)
"""The `messages` table's columns, in the order of `message_row` (both back ends)."""


def list_filter(
    mark: str, *, unread_only: bool, session: str | None, thread: str | None, limit: int
) -> tuple[str, list[Any]]:
    """The `WHERE` clause of `MessageStore.list` and its parameters, `limit` last, with `mark`
    as the back end's placeholder."""
    if limit < 0:
        raise ValueError("limit must not be negative")
    where: list[str] = ["1 = 1"]
    params: list[Any] = []
    if unread_only:
        where.append("read_at IS NULL")
    if session is not None:
        where.append(f"session = {mark}")
        params.append(session)
    if thread is not None:
        where.append(f"thread = {mark}")
        params.append(thread)
    return " AND ".join(where), [*params, limit]


def message_row(message: StoredMessage) -> tuple[Any, ...]:
    """A message as a row of `COLUMNS` (JSON for the card, attachments and pending)."""
    card = None if message.card is None else json.dumps(message.card, ensure_ascii=False)
    attachments = json.dumps([{"path": a.path, "bytes": a.bytes} for a in message.attachments])
    return (
        message.id,
        message.thread,
        message.session,
        message.kind,
        message.to,
        message.text,
        card,
        attachments,
        message.urgency,
        message.sender,
        message.created,
        message.read_at,
        message.read_via,
        message.answered_at,
        message.answered_via,
        message.due_at,
        json.dumps(list(message.pending)),
    )


def message_of_row(row: Sequence[Any], deliveries: Iterable[Sequence[Any]]) -> StoredMessage:
    """The message of a row of `COLUMNS`, with its deliveries' `(channel, outcome, at, ref)`."""
    (mid, thread, session, kind, to, text, card, attachments, urgency, sender, created) = row[:11]
    read_at, read_via, answered_at, answered_via, due_at, pending = row[11:]
    return StoredMessage(
        id=mid,
        thread=thread,
        session=session,
        kind=kind,
        to=to,
        text=text,
        card=None if card is None else json.loads(card),
        attachments=tuple(Attachment(**a) for a in json.loads(attachments)),
        urgency=urgency,
        sender=sender,
        created=created,
        deliveries=tuple(Delivery(channel=c, outcome=o, at=a, ref=r) for c, o, a, r in deliveries),
        read_at=read_at,
        read_via=read_via,
        answered_at=answered_at,
        answered_via=answered_via,
        due_at=due_at,
        pending=tuple(json.loads(pending)),
    )
