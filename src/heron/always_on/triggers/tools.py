"""Event-trigger tools: timers, shell monitors and subscriptions.

- `set_timer` / `cancel_timer` / `list_timers` (`TimerScheduler`);
- `monitor_shell` (`ShellMonitors`): a background job's new output as `job.output` events;
- `subscribe` / `unsubscribe` / `list_subscriptions` (`Subscriptions`): which inbound
  events wake the agent.

Each returns at once; what it sets up arrives later as events on the agent's timeline.
"""

from __future__ import annotations

from typing import Any

from heron._support.clock import Clock
from heron.always_on.triggers.monitor import ShellMonitors
from heron.always_on.triggers.subscriptions import (
    Subscription,
    SubscriptionFilter,
    Subscriptions,
    SubscriptionSource,
)
from heron.always_on.triggers.timers import (
    Misfire,
    TimerError,
    TimerRecord,
    TimerScheduler,
    rfc3339,
)
from heron.tools.definition import Tool, ToolContext, ToolResult
from heron.tools.function_tool import tool


def timer_view(timer: TimerRecord) -> dict[str, Any]:
    """What the tools report about a timer."""
    return {
        "timer_id": timer.id,
        "message": timer.message,
        "schedule": timer.describe(),
        "next_fire": None if timer.next_fire is None else rfc3339(timer.next_fire, timer.tz),
        "misfire": timer.misfire,
        "fires": timer.fires,
        "missed": timer.missed,
        "state": timer.state,
    }


# The decorators are made once: each session's closures reuse their definitions.
_SET_TIMER = tool(
    name="set_timer",
    idempotent=False,
    owner="builtin",
    examples=[
        {"message": "check whether the deploy finished", "after_s": 600},
        {"message": "daily report", "cron": "0 9 * * 1-5", "tz": "Europe/Berlin"},
        {"message": "call Alice back", "at": "2025-06-02T15:30:00+02:00"},
    ],
)
_CANCEL_TIMER = tool(name="cancel_timer", destructive=True, idempotent=True, owner="builtin")
_LIST_TIMERS = tool(name="list_timers", read_only=True, owner="builtin")


def timer_tools(scheduler: TimerScheduler) -> list[Tool]:
    """`set_timer`, `cancel_timer` and `list_timers` for one scheduler."""

    @_SET_TIMER
    async def set_timer(
        message: str,
        ctx: ToolContext,
        at: str | None = None,
        after_s: float | None = None,
        every_s: float | None = None,
        cron: str | None = None,
        tz: str | None = None,
        misfire: Misfire = "fire_once",
    ) -> ToolResult:
        """Set a timer; when it fires, a timer event carrying `message` wakes you.

        Give exactly one schedule: `at` or `after_s` (once), `every_s` (repeating; `at` or
        `after_s` may set its first fire), or `cron` (with `tz`). Timers survive restarts.

        Args:
            message: What to do or remember when the timer fires; it is all you will see.
            at: An RFC 3339 time, e.g. `2025-06-01T09:00:00Z`; without an offset it is read
                in `tz`.
            after_s: Seconds from now.
            every_s: Repeat interval in seconds.
            cron: Five-field cron expression (minute hour day month weekday).
            tz: IANA time zone for `cron` and offset-less `at`, e.g. `Europe/Berlin`.
            misfire: If heron was down when the timer was due: `fire_once` (one late fire
                for all missed runs), `skip` (wait for the next run) or `catch_up` (one fire
                per missed run, capped).
        """
        try:
            timer = scheduler.add(
                message=message,
                at=at,
                after_s=after_s,
                every_s=every_s,
                cron=cron,
                tz=tz,
                misfire=misfire,
                call_id=ctx.call_id,
            )
        except TimerError as exc:
            return ToolResult.fail(f"{exc}; no timer was set")
        view = timer_view(timer)
        return ToolResult.ok(
            f"timer {timer.id} set: {timer.describe()}, next fire {view['next_fire']}", data=view
        )

    @_CANCEL_TIMER
    async def cancel_timer(timer_id: str) -> ToolResult:
        """Cancel a timer so it never fires again.

        Args:
            timer_id: The id `set_timer` returned, e.g. `tmr-1a2b3c4d`.
        """
        timer = scheduler.cancel(timer_id)
        if timer is None:
            return ToolResult.fail(f"no timer {timer_id!r}; list_timers shows the active ones")
        return ToolResult.ok(f"timer {timer.id} is {timer.state}", data=timer_view(timer))

    @_LIST_TIMERS
    async def list_timers() -> ToolResult:
        """List the active timers, soonest first."""
        timers = scheduler.timers()
        if not timers:
            return ToolResult.ok("no active timers", data={"timers": []})
        lines = [f"{t.id} {timer_view(t)['next_fire']} {t.describe()}: {t.message}" for t in timers]
        return ToolResult.ok("\n".join(lines), data={"timers": [timer_view(t) for t in timers]})

    return [set_timer, cancel_timer, list_timers]


_MONITOR_SHELL = tool(
    name="monitor_shell",
    owner="builtin",
    examples=[
        {"job_id": "job-1a2b3c4d", "pattern": "(?i)error|failed"},
        {"job_id": "job-1a2b3c4d", "coalesce_s": 10, "max_events_per_min": 2},
    ],
)


def monitor_tools(monitors: ShellMonitors) -> list[Tool]:
    """`monitor_shell` for one set of shell monitors."""

    @_MONITOR_SHELL
    async def monitor_shell(
        job_id: str,
        ctx: ToolContext,
        pattern: str | None = None,
        coalesce_s: float = 2.0,
        max_events_per_min: int = 6,
    ) -> ToolResult:
        """Watch a background job's new output; it arrives as job output events.

        Lines arriving within `coalesce_s` of each other come as one event; beyond
        `max_events_per_min` updates are dropped and the next update says how many lines were
        dropped. The rest of the output is flushed when the job ends, before its exit event.

        Args:
            job_id: The id `start_job` returned.
            pattern: Regular expression; only matching lines are reported. Omit for all.
            coalesce_s: Seconds lines are gathered into one event, 0 to 3600.
            max_events_per_min: Most events per minute, 1 to 600.
        """
        try:
            monitor = await monitors.add(
                job_id,
                pattern=pattern,
                coalesce_s=coalesce_s,
                max_events_per_min=max_events_per_min,
                call_id=ctx.call_id,
            )
        except KeyError:
            return ToolResult.fail(f"no job {job_id!r} in this session; list_jobs shows them")
        except ValueError as exc:
            return ToolResult.fail(str(exc))
        what = f"lines matching /{pattern}/" if pattern else "all new output"
        return ToolResult.ok(
            f"monitor {monitor.id} watches {what} of {job_id}",
            data={"monitor_id": monitor.id, "job_id": job_id, "from_offset": monitor.offset},
        )

    return [monitor_shell]


def _subscription_view(sub: Subscription) -> dict[str, Any]:
    return {
        "subscription_id": sub.id,
        "source": sub.source,
        "filter": sub.filter.model_dump(exclude_none=True),
        "note": sub.note,
    }


_SUBSCRIBE = tool(
    name="subscribe",
    owner="builtin",
    examples=[
        {"source": "mail", "filter": {"sender": "*@acme.example"}},
        {"source": "webhook", "filter": {"text_regex": "(?i)deploy (failed|succeeded)"}},
    ],
)
_UNSUBSCRIBE = tool(name="unsubscribe", destructive=True, idempotent=True, owner="builtin")
_LIST_SUBSCRIPTIONS = tool(name="list_subscriptions", read_only=True, owner="builtin")


def subscription_tools(store: Subscriptions, clock: Clock) -> list[Tool]:
    """`subscribe`, `unsubscribe` and `list_subscriptions` for one session."""

    @_SUBSCRIBE
    async def subscribe(
        source: SubscriptionSource, filter: SubscriptionFilter, note: str = ""
    ) -> ToolResult:
        """Be woken by inbound events (mail, webhooks, messages) that match a filter.

        Inbound traffic from outside wakes you only through a matching subscription; anything
        else is stored silently. Subscriptions persist until unsubscribed.

        Args:
            source: The channel to watch, or `any`.
            filter: Conditions an event must meet; all given ones must hold. `{}` matches
                everything from the source.
            note: Why you subscribed, shown by list_subscriptions.
        """
        try:
            sub = store.add(source, filter, note=note, now=clock.time())
        except ValueError as exc:
            return ToolResult.fail(f"{exc}; nothing was subscribed")
        return ToolResult.ok(f"subscribed {sub.id} to {source}", data=_subscription_view(sub))

    @_UNSUBSCRIBE
    async def unsubscribe(subscription_id: str) -> ToolResult:
        """Stop being woken by a subscription.

        Args:
            subscription_id: The id `subscribe` returned, e.g. `sub-1a2b3c4d`.
        """
        if not store.remove(subscription_id):
            return ToolResult.fail(f"no subscription {subscription_id!r}")
        return ToolResult.ok(f"unsubscribed {subscription_id}")

    @_LIST_SUBSCRIPTIONS
    async def list_subscriptions() -> ToolResult:
        """List the subscriptions that decide which inbound events wake you."""
        subs = store.list()
        if not subs:
            return ToolResult.ok("no subscriptions", data={"subscriptions": []})
        views = [_subscription_view(s) for s in subs]
        lines = [f"{v['subscription_id']} {v['source']} {v['filter']} {v['note']}" for v in views]
        return ToolResult.ok("\n".join(lines), data={"subscriptions": views})

    return [subscribe, unsubscribe, list_subscriptions]
