"""`heron events tail`, `heron jobs list`, `heron timers list`: what `heron serve` keeps.

The listing commands print a table or, with `--json`, JSON lines. Listings are a rendering
surface: known secrets and credential shapes in them are masked (`heron.safety.redact`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from heron._support.timefmt import utc_rfc3339
from heron.cli import common
from heron.cli.flag_values import row_limit
from heron.safety.redact import scrub_text, scrub_value

if TYPE_CHECKING:
    from heron.always_on.bus.store import DeadLetter, StoredEvent
    from heron.always_on.triggers.runtime import TriggerStores


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `events`, `jobs` and `timers` to the `heron` parser."""
    events = sub.add_parser("events", help="inspect the event bus")
    esub = events.add_subparsers(dest="events_command", required=True, metavar="ACTION")
    tail = esub.add_parser("tail", help="print bus events from the state database")
    tail.add_argument("--session", help="only this session (default: all)")
    tail.add_argument("--limit", type=row_limit, default=20, metavar="N", help="the last N events")
    tail.add_argument("--pending", action="store_true", help="only events not yet consumed")
    tail.add_argument(
        "--dead",
        action="store_true",
        help="the dead letters: events quarantined because they could not be consumed",
    )
    tail.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    tail.add_argument("--json", action="store_true", help="one JSON object per line")
    common.add_config_flags(tail)
    common.add_store_flag(tail)
    events.set_defaults(handler=cmd_events)

    for name, what, handler in (
        ("jobs", "background jobs", cmd_jobs),
        ("timers", "timers", cmd_timers),
    ):
        parser = sub.add_parser(name, help=f"inspect {what}")
        psub = parser.add_subparsers(dest=f"{name}_command", required=True, metavar="ACTION")
        listing = psub.add_parser("list", help=f"list {what}")
        listing.add_argument("--session", default="default")
        listing.add_argument("--json", action="store_true", help="one JSON object per line")
        common.add_config_flags(listing)
        common.add_store_flag(listing)
        parser.set_defaults(handler=handler)


# -- listings -------------------------------------------------------------------------------


def _print_event(stored: StoredEvent, as_json: bool) -> None:
    event = scrub_value(stored.event.model_dump(mode="json"))
    if as_json:
        common.out(json.dumps({"seq": stored.seq, "consumed": stored.consumed, "event": event}))
        return
    text = " ".join(str(event.get("content", {}).get("text", "")).split())
    state = "consumed" if stored.consumed else "pending"
    common.out(
        f"{stored.seq:>6} {event['timestamp']} {event['session']:<12} {event['kind']:<22} "
        f"{event['source']}/{event['channel']:<12} {state:<8} {text[:70]}"
    )
    sys.stdout.flush()


def _print_dead(letter: DeadLetter, as_json: bool) -> None:
    if as_json:
        common.out(
            json.dumps(
                {
                    "seq": letter.seq,
                    "event_id": letter.event_id,
                    "session": letter.session,
                    "kind": letter.kind,
                    "attempts": letter.attempts,
                    "error": scrub_text(letter.error),
                    "dead_at": utc_rfc3339(letter.dead_at, precision="milliseconds"),
                    "event": None
                    if letter.event is None
                    else scrub_value(letter.event.model_dump(mode="json")),  # as `_print_event`
                }
            )
        )
        return
    common.out(
        f"{letter.seq:>6} {utc_rfc3339(letter.dead_at, precision='seconds')} "
        f"{letter.session:<12} {letter.kind:<22} {letter.event_id} "
        f"attempts={letter.attempts} {scrub_text(letter.error)[:120]}"
    )
    sys.stdout.flush()


async def _tail(
    fetch: Callable[[int | None, int | None], Awaitable[Sequence[Any]]],
    show: Callable[[Any], None],
    args: argparse.Namespace,
) -> None:
    """Without --follow: the last --limit records; then every record after the last seen.
    A CLI follower of another process's database: polling is the way."""
    import asyncio

    last: int | None = None
    while True:
        for record in await fetch(last, args.limit if last is None else None):
            show(record)
            last = record.seq
        if not args.follow:
            return
        last = last or 0
        await asyncio.sleep(0.5)


def cmd_events(args: argparse.Namespace) -> int:
    import asyncio

    bus = common.open_bus(args)

    async def tail() -> None:
        if args.dead:  # the quarantined events, with why
            return await _tail(
                lambda after, limit: bus.dead_letters(
                    session=args.session, after=after, limit=limit
                ),
                lambda letter: _print_dead(letter, args.json),
                args,
            )
        await _tail(
            lambda after, limit: bus.events(
                session=args.session, pending_only=args.pending, after=after, limit=limit
            ),
            lambda item: _print_event(item, args.json),
            args,
        )

    try:
        asyncio.run(tail())
    except KeyboardInterrupt:
        pass
    finally:
        bus.sessions.close()
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    from heron.always_on.jobs.tools import job_summary

    stores = _trigger_stores(args)
    try:
        jobs = stores.jobs.list(args.session, limit=1000)
        for job in reversed(jobs):
            if args.json:
                common.out(json.dumps(scrub_value(job_summary(job))))
            else:
                code = "" if job.exit_code is None else f"exit {job.exit_code}"
                command = scrub_text(job.command)
                common.out(f"{job.id}  {job.state:<14} {code:<8} {command[:70]}")
    finally:
        stores.close()
    return 0


def _trigger_stores(args: argparse.Namespace) -> TriggerStores:
    """The jobs' and timers' stores `--store` names (or the state directory's)."""
    url = common.store_url(args)
    if url is not None:
        from heron.always_on.triggers.postgres_store import open_pg_trigger_stores

        return open_pg_trigger_stores(url)
    from heron.always_on.triggers.sqlite_store import open_trigger_stores

    return open_trigger_stores(common.state_dir(args))


def cmd_timers(args: argparse.Namespace) -> int:
    from heron.always_on.triggers.tools import timer_view

    stores = _trigger_stores(args)
    try:
        for timer in stores.timers.timers(args.session, active_only=False):
            if args.json:
                common.out(json.dumps(scrub_value(timer_view(timer))))
            else:
                view = timer_view(timer)
                common.out(
                    f"{timer.id}  {timer.state:<9} {view['next_fire'] or '-':<25} "
                    f"{timer.describe()}: {scrub_text(timer.message)[:60]}"
                )
    finally:
        stores.close()
    return 0
