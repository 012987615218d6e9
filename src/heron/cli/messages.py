"""`heron messages`: the console channel — every message the agent sent a person.

- `list`  the messages, newest last, with their read state (`--unread`, `--session`, `--json`)
- `show`  one message as the console shows it; opening it marks it read
- `act`   press a card's button from the console: a `card.action` event for its session

Listings are a rendering surface: known secrets and credential shapes are masked
(`heron.safety.redact`). Exit status 1 for an unknown message or button.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from heron.cli import common
from heron.cli.common import EXIT_ERROR, EXIT_OK
from heron.cli.flag_values import row_limit
from heron.safety.redact import scrub_text, scrub_value

if TYPE_CHECKING:
    from heron.collaboration.postgres_store import PostgresMessageStore
    from heron.collaboration.store import StoredMessage


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `messages` to the `heron` parser."""
    parser = sub.add_parser("messages", help="the messages the agent sent: list, show, act")
    msub = parser.add_subparsers(dest="messages_command", required=True, metavar="ACTION")
    listing = msub.add_parser("list", help="list messages, newest last")
    listing.add_argument("--unread", action="store_true", help="only unread messages")
    listing.add_argument("--session", help="only this session's messages")
    listing.add_argument("--limit", type=row_limit, default=50, metavar="N", help="the last N")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    show = msub.add_parser("show", help="show one message (and mark it read)")
    show.add_argument("id", metavar="ID")
    show.add_argument("--json", action="store_true", help="the message as JSON")
    act = msub.add_parser("act", help="press a card's button (by its id or label)")
    act.add_argument("id", metavar="ID")
    act.add_argument("action", metavar="ACTION")
    for p in (listing, show, act):
        common.add_config_flags(p)
        common.add_store_flag(p)
    parser.set_defaults(handler=cmd_messages)


def _data(message: StoredMessage) -> dict[str, Any]:
    data: dict[str, Any] = scrub_value(
        {
            "id": message.id,
            "thread": message.thread,
            "session": message.session,
            "kind": message.kind,
            "to": message.to,
            "from": message.sender,
            "urgency": message.urgency,
            "text": message.text,
            "card": message.card,
            "attachments": [{"path": a.path, "bytes": a.bytes} for a in message.attachments],
            "created": message.created,
            "delivered": message.delivered(),
            "read_at": message.read_at,
            "read_via": message.read_via,
            "answered_at": message.answered_at,
            "answered_via": message.answered_via,
            "pending": list(message.pending),
            "due_at": message.due_at,
        }
    )
    return data


def _state(message: StoredMessage) -> str:
    if message.answered_at is not None:
        return f"answered ({message.answered_via})"
    return f"read ({message.read_via})" if message.read else "unread"


def cmd_messages(args: argparse.Namespace) -> int:
    from heron._support.timefmt import utc_rfc3339
    from heron.collaboration.channels import render_console
    from heron.collaboration.sqlite_store import SqliteMessageStore

    config = common.load_config(args)
    url = common.store_url(args)
    store: SqliteMessageStore | PostgresMessageStore
    if url is not None:
        from heron.collaboration.postgres_store import PostgresMessageStore

        store = PostgresMessageStore.open(url)
    else:
        store = SqliteMessageStore.open(common.state_dir(args))
    try:
        if args.messages_command == "list":
            for message in store.list(
                unread_only=args.unread, session=args.session, limit=args.limit
            ):
                if args.json:
                    common.out(json.dumps(_data(message), ensure_ascii=False))
                    continue
                first = " ".join(message.text.split())[:60]
                common.out(
                    f"{message.id}  {utc_rfc3339(message.created)}  {message.kind:<12} "
                    f"{message.urgency:<7} {_state(message):<18} {message.to:<8} "
                    f"{scrub_text(first)}"
                )
            return EXIT_OK
        found = store.get(args.id)
        if found is None:
            common.err(f"no message {args.id!r}")
            return EXIT_ERROR
        if args.messages_command == "show":
            store.mark_read(found.id, via="console", at=_now())  # opened: read
            found = store.get(found.id) or found
            if args.json:
                common.out(json.dumps(_data(found), ensure_ascii=False, indent=2))
            else:
                common.out(scrub_text(render_console(found, config.identity.identity())))
            return EXIT_OK
        return _act(args, config, store, found)
    finally:
        store.close()


def _act(args: argparse.Namespace, config: Any, store: Any, message: StoredMessage) -> int:
    import asyncio

    from heron._support.clock import RealClock, timestamp
    from heron.always_on.channels.answers import card_action_event
    from heron.collaboration.outbox import Outbox

    outbox = Outbox(store, user=config.user.name)
    try:
        claim = outbox.action(message.id, args.action)
    except LookupError as exc:
        common.err(str(exc).strip("'\""))
        return EXIT_ERROR
    event = card_action_event(
        claim, via="cli", by=None, user=config.user.name, when=timestamp(RealClock())
    )
    bus = common.open_bus(args)  # the session's store: the shared one with --store
    try:
        stored = asyncio.run(bus.publish(event))
    finally:
        bus.sessions.close()
    outbox.answered(message.id, via="console")
    what = "pressed" if stored else "already pressed"
    common.out(
        f"{what} [{claim.action.label}] on {message.id}: event {event.id} for session "
        f"{event.session}"
    )
    return EXIT_OK


def _now() -> float:
    import time

    return time.time()
