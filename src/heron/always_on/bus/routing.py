"""Routing: which session an arriving event is for, and which of the three strategies
handles it there.

**Which session** (`route_session`, one pure function for every way in): the session the
sender names (a webhook's `X-Heron-Session` header; the gateway's and a spawned child's
explicit session), else the session in the path (`/webhook/<session>`, `/im/<session>`,
`/github/<session>`), else the session of the thread the event answers (a mail's
`In-Reply-To` / `References`, looked up by the caller), else the default session (`heron serve
--session`). `check_hosted_name` says which names can be hosted: a valid session name
(`heron.sessions.names.check_session_name`) that is not one of a session's own stores
(`<session>/quiet`, `<session>/side/<event id>`).

**Which strategy:**

- **cancel** — interrupt the running step now (stop the model stream; cancel running tools, or
  detach them so they finish in the background), drain the queue, append everything, call the
  model at once.
- **queue** — wait for the next safe point, then append the whole batch as one message.
- **parallel** — answer in a side session concurrently; both are appended to the main history,
  marked as run in parallel.

`Router.route` decides in this order, first answer wins:

1. the caller's `rules`, in order;
2. what the producer said explicitly: a stop request (`content.data["stop"] is True`, or the
   text starts with "stop", "cancel", "abort", "halt" or "停") on an interrupting kind, not
   from a third party, cancels and also stops background tools; `side_question=True` runs in
   parallel; `urgency="urgent"` cancels;
3. the optional classifier (a light model or a heuristic), only for free-text kinds;
4. the spec's urgency table: `user.interrupt`, `supervisor.instruction`, `agent.interrupt`
   cancel; everything else (`user.input`, `agent.input`, `tool.result`, `timer.trigger`,
   ordinary triggers) queues.

An interrupting route detaches running tools by default (they keep running and report later as
`tool.result` events); a stop request cancels them.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from heron.always_on.bus.model import URGENT_KINDS, BusEvent
from heron.sessions.names import check_session_name
from heron.turn.cancel import CancelMode

Strategy = Literal["cancel", "queue", "parallel"]

FREE_TEXT_KINDS: frozenset[str] = frozenset({"user.input", "agent.input", "im.message"})
"""Kinds whose meaning is in their text: the ones a classifier is asked about."""

_STOP_TEXT = re.compile(r"^\W*(stop|cancel|abort|halt|停)", re.IGNORECASE)


SESSION_HEADER = "X-Heron-Session"
"""The header a webhook sender names its session in."""

QUIET_SUFFIX = "/quiet"
SIDE_SEGMENT = "/side/"
AGENT_SEGMENT = "/agent/"
"""Sub-agents' sessions: `<session>/agent/<id>` (`heron.always_on.subagents`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionAddress:
    """What an arriving event says about its session, before any session is chosen."""

    named: str | None = None
    """Named by the sender: the `X-Heron-Session` header, the gateway's `/v1/sessions/{session}`,
    the parent of a spawned child."""
    path: str | None = None
    """The rest of a webhook path after its route (`/webhook/<session>`)."""
    thread: str | None = None
    """The session of the thread the event answers (mail: the message it replies to)."""


def route_session(address: SessionAddress, default: str) -> str:
    """The session an event is for: named, else path, else thread, else `default`. Empty
    strings count as absent. Pure: the caller validates the result (`check_hosted_name`) and
    decides what an unknown session means."""
    return address.named or address.path or address.thread or default


def check_hosted_name(name: str) -> str:
    """`name` if a server can host it, else `ValueError`: a valid session name that is not a
    session's quiet store, one of its side sessions or one of its sub-agents."""
    check_session_name(name)
    if name.endswith(QUIET_SUFFIX) or SIDE_SEGMENT in name or AGENT_SEGMENT in name:
        raise ValueError(
            f"session {name!r} is where another session keeps its quiet events, side "
            "questions or sub-agents; it cannot be addressed"
        )
    return name


def hosting_refusal(name: str, *, default: str, allowed: frozenset[str] | None) -> str | None:
    """Why a server whose own session is `default` and that takes `allowed` (`None`: any)
    besides cannot host `name`, or `None` when it can."""
    try:
        check_hosted_name(name)
    except ValueError as exc:
        return str(exc)
    if allowed is not None and name != default and name not in allowed:
        return f"session {name!r} is not served here"
    return None


def quiet_session_name(session: str) -> str:
    """Where the inbound events no subscription of `session` wants are kept."""
    return f"{session}{QUIET_SUFFIX}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Route:
    """A routing decision."""

    strategy: Strategy
    cancel_mode: CancelMode = "detach"
    """For `cancel`: `detach` leaves running tools working in the background; `cancel` stops
    them and any tools detached earlier."""
    reason: str = ""
    """Which rule decided, for traces and tests."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RoutingRule:
    """Matches events on every field given (an empty set or `None` matches anything)."""

    strategy: Strategy
    name: str = ""
    kinds: frozenset[str] = frozenset()
    urgency: frozenset[str] = frozenset()
    sources: frozenset[str] = frozenset()
    channels: frozenset[str] = frozenset()
    side_question: bool | None = None
    text_pattern: str | None = None
    """A regular expression searched in `content.text`."""
    when: Callable[[BusEvent], bool] | None = None
    """Any further condition."""
    cancel_mode: CancelMode = "detach"

    def matches(self, event: BusEvent) -> bool:
        if self.kinds and event.kind not in self.kinds:
            return False
        if self.urgency and event.urgency not in self.urgency:
            return False
        if self.sources and event.source not in self.sources:
            return False
        if self.channels and event.channel not in self.channels:
            return False
        if self.side_question is not None and event.side_question != self.side_question:
            return False
        if self.text_pattern is not None and not re.search(self.text_pattern, event.content.text):
            return False
        return self.when is None or self.when(event)

    def route(self) -> Route:
        return Route(
            strategy=self.strategy,
            cancel_mode=self.cancel_mode,
            reason=self.name or f"rule:{self.strategy}",
        )


def is_stop_request(event: BusEvent) -> bool:
    """An explicit request to stop everything (a stop button, or "stop …" typed) from the
    operator's side: third-party content can interrupt, never cancel the work."""
    if event.third_party:
        return False
    return event.content.data.get("stop") is True or bool(_STOP_TEXT.match(event.content.text))


EXPLICIT_RULES: tuple[RoutingRule, ...] = (
    RoutingRule(
        name="stop request",
        strategy="cancel",
        kinds=URGENT_KINDS,
        when=is_stop_request,
        cancel_mode="cancel",
    ),
    RoutingRule(name="side question", strategy="parallel", side_question=True),
    RoutingRule(name="marked urgent", strategy="cancel", urgency=frozenset({"urgent"})),
)

URGENCY_TABLE: tuple[RoutingRule, ...] = (
    RoutingRule(name="urgent kind", strategy="cancel", kinds=URGENT_KINDS),
)

Classifier = Callable[[BusEvent], "Awaitable[Strategy | Route | None] | Strategy | Route | None"]
"""Returns a strategy (or a full `Route`) for a free-text event, or `None` to defer to the
table. May be sync or async."""


class Router:
    """Rules, then explicit producer flags, then the classifier, then the urgency table."""

    def __init__(
        self,
        rules: Sequence[RoutingRule] = (),
        *,
        classifier: Classifier | None = None,
        classify_kinds: frozenset[str] = FREE_TEXT_KINDS,
    ) -> None:
        self.rules = tuple(rules)
        self.classifier = classifier
        self.classify_kinds = classify_kinds

    def route_now(self, event: BusEvent) -> Route | None:
        """The decision, if it needs no classifier; `None` when the classifier must be asked."""
        for rule in (*self.rules, *EXPLICIT_RULES):
            if rule.matches(event):
                return rule.route()
        if self.classifier is not None and event.kind in self.classify_kinds:
            return None
        return _table(event)

    async def route(self, event: BusEvent) -> Route:
        decided = self.route_now(event)
        if decided is not None:
            return decided
        assert self.classifier is not None  # route_now defers only when there is one
        try:
            answer = self.classifier(event)
            verdict: Strategy | Route | None = (
                await answer if inspect.isawaitable(answer) else answer
            )
        except Exception as exc:  # a failing light model must not stop the agent
            fallback = _table(event)
            return Route(
                strategy=fallback.strategy,
                cancel_mode=fallback.cancel_mode,
                reason=f"classifier failed ({type(exc).__name__}: {exc}); {fallback.reason}",
            )
        if verdict is None:
            return _table(event)
        if isinstance(verdict, Route):
            return verdict
        return Route(strategy=verdict, reason="classifier")


def _table(event: BusEvent) -> Route:
    for rule in URGENCY_TABLE:
        if rule.matches(event):
            return rule.route()
    return Route(strategy="queue", reason="default")
