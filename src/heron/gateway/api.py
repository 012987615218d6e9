"""The gateway's HTTP API (`/v1/…`, `/metrics`, `/healthz`) over a running `HeronServer`.

Every answer is JSON (`{"error": …}` for a refusal, with its status) except the event stream
(`heron.gateway.stream`) and `/metrics` (Prometheus text). Every body is scrubbed
(`heron.safety.redact.scrub_value`) before it leaves: a known secret is never answered.
Bodies are parsed with the one JSON check (`heron._support.limits.parse_json`: 413 too
large, 422 nested too deep or not JSON text heron takes, 400 not JSON).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from heron._support.clock import timestamp
from heron._support.limits import InputRejected, parse_json
from heron._support.vocabulary import ACTIVE_STATUSES, STATUSES, HumanDecision
from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.channels.answers import card_action_event
from heron.always_on.jobs.output import tail_lines
from heron.always_on.jobs.tools import job_summary
from heron.always_on.triggers.tools import timer_view
from heron.gateway.auth import COOKIE, ApiError, Principal, address_of, too_many
from heron.gateway.config import Role
from heron.humans.desk import RuleChoice
from heron.humans.refusals import AlreadyAnswered, InvalidAnswer, NotAnApprover, UnknownRequest
from heron.safety.redact import scrub_value

if TYPE_CHECKING:
    from heron.gateway.app import Gateway

__all__ = ["Api"]

Handler = Callable[[Request, Principal], Awaitable[Response]]
_MAX_LIST = 1000
CARD_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; "
    "frame-ancestors 'self'; sandbox"
)
"""An HTML card's frame: its own styles and inline images, nothing else, sandboxed."""


def answer(data: Any, status: int = 200, **headers: str) -> JSONResponse:
    return JSONResponse(scrub_value(data), status_code=status, headers=headers or None)


class Api:
    """The handlers; each names the least role it needs (`Gateway.route`)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def server(self) -> Any:
        return self.gw.server

    def running(self) -> Any:
        server = self.server
        if server is None or server.bus is None or server.host is None:
            raise ApiError(503, "heron serve is not running")
        return server

    async def body(self, request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw:
            return {}
        try:
            value = parse_json(raw)
        except InputRejected as exc:
            status = {"size": 413, "depth": 422, "syntax": 400}.get(exc.kind, 422)
            raise ApiError(status, exc.problem_at("body")) from None
        if not isinstance(value, dict):
            raise ApiError(400, "the body must be a JSON object")
        return value

    def session_name(self, request: HTTPConnection) -> str:
        """The path's session, its `%2F` decoded (`heron.gateway.app.SessionRoute`)."""
        session = re.sub("%2[fF]", "/", str(request.path_params["session"]))
        problem = self.running().host.admit(session)
        if problem is not None:
            raise ApiError(404, problem)
        return session

    # -- who --------------------------------------------------------------------------------

    async def login(self, request: Request) -> Response:
        """`POST /v1/login {"token"}`: the console's cookie and CSRF token."""
        guard = self.gw.guard
        guard.origin_check(request)
        retry = guard.limiter.take(f"login:{address_of(request)}")
        if retry is not None:
            raise too_many("too many logins; slow down", retry)
        token = (await self.body(request)).get("token")
        principal = guard.token(request, token if isinstance(token, str) else "")
        sid, csrf = guard.logins.open(principal)
        response = answer({"principal": principal.name, "role": principal.role, "csrf": csrf})
        secure = (self.gw.config.public_url or str(request.url)).startswith("https://")
        response.set_cookie(
            COOKIE,
            sid,
            max_age=int(self.gw.config.session_ttl_s),
            httponly=True,
            samesite="strict",
            secure=secure,
            path="/",
        )
        return response

    async def logout(self, request: Request, who: Principal) -> Response:
        sid = request.cookies.get(COOKIE)
        if sid:
            self.gw.guard.logins.close(sid)
        response = answer({"status": "logged out"})
        response.delete_cookie(COOKIE, path="/")
        return response

    async def whoami(self, request: Request, who: Principal) -> Response:
        """Who is calling; a console login also gets its CSRF token back (a page of another
        origin cannot read this answer: no CORS)."""
        data: dict[str, Any] = {"principal": who.name, "role": who.role, "via": who.via}
        login = self.gw.guard.logins.get(request.cookies.get(COOKIE, ""))
        if who.via == "cookie" and login is not None:
            data["csrf"] = login[1]
        return answer(data)

    # -- health and metrics -----------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        try:
            self.running()
        except ApiError:
            return answer({"status": "starting"}, 503)
        return answer({"status": "ok"})

    async def metrics(self, request: Request, who: Principal) -> Response:
        return PlainTextResponse(
            self.gw.render_metrics(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    # -- sessions ---------------------------------------------------------------------------

    async def sessions(self, request: Request, who: Principal) -> Response:
        server = self.running()
        infos = {i.session: i for i in server.bus.sessions.list_sessions()}
        known = [*server.host.awake, *server.host.parked, *infos]
        names = [n for n in dict.fromkeys(known) if server.host.admit(n) is None]
        pending = set(await server.bus.pending_sessions())
        return answer(
            {
                "sessions": [
                    {
                        "name": name,
                        "awake": name in server.host.awake,
                        "default": name == server.config.session,
                        "entries": infos[name].entries if name in infos else 0,
                        "pending": name in pending,
                    }
                    for name in names
                ]
            }
        )

    async def session(self, request: Request, who: Principal) -> Response:
        name = self.session_name(request)
        server = self.running()
        events = await server.bus.events(session=name, limit=50)
        return answer(
            {
                "name": name,
                "awake": name in server.host.awake,
                "head": server.bus.sessions.head(name),
                "recent_events": [
                    {"seq": e.seq, "consumed": e.consumed, "event": e.event.model_dump(mode="json")}
                    for e in events
                ],
            }
        )

    async def message(self, request: Request, who: Principal) -> Response:
        """`POST /v1/sessions/{session}/messages {"text", "interrupt"?}` → 202 `{"event"}`."""
        session = self.session_name(request)
        body = await self.body(request)
        text = body.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ApiError(400, '"text" must be a non-empty string')
        interrupt = body.get("interrupt", False)
        if not isinstance(interrupt, bool):
            raise ApiError(400, '"interrupt" must be true or false')
        kind = "user.interrupt" if interrupt else "user.input"
        return await self._publish(session, kind, text, who, {})

    async def interrupt(self, request: Request, who: Principal) -> Response:
        """`POST /v1/sessions/{session}/interrupt {"reason"?}`: stop the running turn (and
        its session's background jobs), as typing the interrupt word in `heron chat`."""
        session = self.session_name(request)
        reason = (await self.body(request)).get("reason") or "stop"
        if not isinstance(reason, str):
            raise ApiError(400, '"reason" must be a string')
        return await self._publish(session, "user.interrupt", reason, who, {"stop": True})

    async def _publish(
        self, session: str, kind: Any, text: str, who: Principal, data: dict[str, Any]
    ) -> Response:
        server = self.running()
        try:
            event = BusEvent(
                kind=kind,
                source="user",
                channel="web",
                session=session,
                timestamp=timestamp(server.clock),
                content=EventContent(text=text, data={**data, "principal": who.name}),
            )
        except ValueError as exc:
            raise ApiError(422, f"the message was refused: {exc}") from None
        server.host.claim(session)
        await server.bus.publish(event)
        return answer({"status": "accepted", "event": event.id, "session": session}, 202)

    async def card_action(self, request: Request, who: Principal) -> Response:
        """`POST /v1/sessions/{session}/cards/{message}/actions {"action"}`: a card's button
        pressed in the console, as the `card.action` event of its session (once per button:
        its idempotency key)."""
        session = self.session_name(request)
        action = (await self.body(request)).get("action")
        if not isinstance(action, str) or not action:
            raise ApiError(400, '"action" must be a button id')
        server = self.running()
        outbox = server.messaging.outbox
        try:
            claim = outbox.action(str(request.path_params["message"]), action)
        except LookupError as exc:
            raise ApiError(404, str(exc)) from None
        if (claim.message.session or session) != session:
            raise ApiError(404, "no such card in this session")
        outbox.answered(claim.message.id, via="web")
        event = card_action_event(
            claim, via="web", by=who.name, user=outbox.user, when=timestamp(server.clock)
        )
        stored = await server.bus.publish(event)
        status = "accepted" if stored else "duplicate"
        return answer({"status": status, "event": event.id}, 202 if stored else 200)

    async def card_html(self, request: Request, who: Principal) -> Response:
        """`GET /v1/sessions/{session}/cards/{message}/html/{index}`: one `html` block of a
        card, for the console's sandboxed frame. Its own policy allows no script, no request
        and no form, and sandboxes it (an opaque origin: no cookie, no API)."""
        session = self.session_name(request)
        message = self.running().messaging.outbox.store.get(str(request.path_params["message"]))
        blocks = (message.card or {}).get("blocks", []) if message is not None else []
        html = [b["html"] for b in blocks if isinstance(b, dict) and b.get("type") == "html"]
        index = int(request.path_params["index"])
        if message is None or message.session not in (None, session) or index >= len(html):
            raise ApiError(404, "no such HTML block")
        return HTMLResponse(
            html[index],
            headers={"Content-Security-Policy": CARD_CSP, "X-Content-Type-Options": "nosniff"},
        )

    # -- jobs, timers, subscriptions --------------------------------------------------------

    def _stores(self) -> Any:
        stores = self.running().trigger_stores
        if stores is None:
            raise ApiError(503, "heron serve is not running")
        return stores

    async def jobs(self, request: Request, who: Principal) -> Response:
        session = self.session_name(request)
        found = self._stores().jobs.list(session, limit=_MAX_LIST)
        return answer({"jobs": [job_summary(j) for j in found]})

    async def job(self, request: Request, who: Principal) -> Response:
        job = self._job(request)
        lines = min(max(int(request.query_params.get("lines", "50") or 50), 1), 1000)
        return answer({**job_summary(job), "output_tail": tail_lines(job, lines)})

    def _job(self, request: Request) -> Any:
        session = self.session_name(request)
        job = self._stores().jobs.get(str(request.path_params["job"]))
        if job is None or job.session != session:
            raise ApiError(404, "no such job in this session")
        return job

    async def interrupt_job(self, request: Request, who: Principal) -> Response:
        job = self._job(request)
        runtime = self.server.session(job.session)
        if runtime is None:
            raise ApiError(409, "the job's session is parked: it has no running job")
        await runtime.jobs.cancel(job.id)
        return answer({"status": "cancelling", "job": job.id}, 202)

    async def timers(self, request: Request, who: Principal) -> Response:
        session = self.session_name(request)
        found = self._stores().timers.timers(session, active_only=False)
        return answer({"timers": [timer_view(t) for t in found]})

    async def timer(self, request: Request, who: Principal) -> Response:
        session = self.session_name(request)
        found = self._stores().timers.get(session, str(request.path_params["timer"]))
        if found is None:
            raise ApiError(404, "no such timer in this session")
        return answer(timer_view(found))

    async def subscriptions(self, request: Request, who: Principal) -> Response:
        session = self.session_name(request)
        found = self._stores().subscriptions.list(session)
        return answer({"subscriptions": [s.model_dump(mode="json") for s in found]})

    async def subscription(self, request: Request, who: Principal) -> Response:
        session = self.session_name(request)
        wanted = str(request.path_params["subscription"])
        for found in self._stores().subscriptions.list(session):
            if found.id == wanted:
                return answer(found.model_dump(mode="json"))
        raise ApiError(404, "no such subscription in this session")

    # -- requests to a human ----------------------------------------------------------------

    def _desk(self) -> Any:
        desk = self.running().desk
        if desk is None:
            raise ApiError(404, "durable requests are off ([approvals] durable = false)")
        return desk

    async def requests(self, request: Request, who: Principal) -> Response:
        """`GET /v1/approvals?status=pending|all|<status>&session=` (and `/v1/requests`, with
        questions too)."""
        desk = self._desk()
        desk.expire()
        status = request.query_params.get("status", "pending")
        if status != "pending" and status != "all" and status not in STATUSES:
            raise ApiError(400, f"unknown status {status!r}")
        statuses = ACTIVE_STATUSES if status == "pending" else None if status == "all" else {status}
        session = request.query_params.get("session") or None
        found = desk.store.list(statuses=statuses, session=session, limit=_MAX_LIST)
        if request.url.path.startswith("/v1/approvals"):
            found = [r for r in found if r.kind == "approval"]
        return answer({"requests": [r.to_data() for r in found]})

    async def show_request(self, request: Request, who: Principal) -> Response:
        try:
            found = self._desk().get(str(request.path_params["id"]))
        except UnknownRequest as exc:
            raise ApiError(404, str(exc)) from None
        return answer(found.to_data())

    async def decide(self, request: Request, who: Principal) -> Response:
        """`POST /v1/approvals/{id}` with a decision of `heron._support.vocabulary`:
        `{"decision": "yes" | "no" | "always" (+ "scope", "prefix", "ttl_s") | "replace" (+
        "text") | "edit" (+ "arguments"), "reason"?}`."""
        body = await self.body(request)
        kind = body.get("decision")
        try:
            decision = HumanDecision.from_data(
                {
                    k: v
                    for k, v in (
                        ("kind", kind),
                        ("text", body.get("text")),
                        ("arguments", body.get("arguments")),
                    )
                    if v is not None
                }
            )
        except (TypeError, ValueError) as exc:
            raise ApiError(400, f"not a decision: {exc}") from None
        rule = None
        if decision.kind == "always":
            scope = body.get("scope", "session")
            if scope not in ("session", "tool", "command"):
                raise ApiError(400, '"scope" is session, tool or command')
            ttl = body.get("ttl_s")
            if ttl is not None and not isinstance(ttl, int | float):
                raise ApiError(400, '"ttl_s" must be a number of seconds')
            rule = RuleChoice(scope=scope, prefix=body.get("prefix"), ttl_s=ttl)
        reason = body.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise ApiError(400, '"reason" must be a string')
        return self._settle(
            lambda desk: desk.decide(
                str(request.path_params["id"]),
                decision,
                channel="gateway",
                name=who.name,
                reason=reason,
                rule=rule,
            )
        )

    async def answer_question(self, request: Request, who: Principal) -> Response:
        """`POST /v1/requests/{id}/answer {"value", "reason"?}`: answer a question."""
        body = await self.body(request)
        if "value" not in body:
            raise ApiError(400, '"value" is required')
        reason = body.get("reason")
        return self._settle(
            lambda desk: desk.answer(
                str(request.path_params["id"]),
                body["value"],
                channel="gateway",
                name=who.name,
                reason=reason if isinstance(reason, str) else None,
            )
        )

    def _settle(self, settle: Callable[[Any], Any]) -> Response:
        try:
            settled = settle(self._desk())
        except UnknownRequest as exc:
            raise ApiError(404, str(exc)) from None
        except AlreadyAnswered as exc:
            raise ApiError(409, str(exc)) from None
        except NotAnApprover as exc:
            raise ApiError(403, str(exc)) from None
        except InvalidAnswer as exc:
            raise ApiError(422, str(exc)) from None
        return answer(settled.to_data())

    # -- routing ----------------------------------------------------------------------------

    def table(self) -> list[tuple[str, str, Role, Handler]]:
        """`(method, path, least role, handler)` of every authenticated route."""
        s = "/v1/sessions/{session:path}"
        return [
            ("POST", "/v1/logout", "viewer", self.logout),
            ("GET", "/v1/whoami", "viewer", self.whoami),
            ("GET", "/metrics", "viewer", self.metrics),
            ("GET", "/v1/sessions", "viewer", self.sessions),
            ("POST", s + "/messages", "operator", self.message),
            ("POST", s + "/interrupt", "operator", self.interrupt),
            ("POST", s + "/cards/{message}/actions", "operator", self.card_action),
            ("GET", s + "/cards/{message}/html/{index:int}", "viewer", self.card_html),
            ("GET", s + "/jobs", "viewer", self.jobs),
            ("GET", s + "/jobs/{job}", "viewer", self.job),
            ("POST", s + "/jobs/{job}/interrupt", "operator", self.interrupt_job),
            ("GET", s + "/timers", "viewer", self.timers),
            ("GET", s + "/timers/{timer}", "viewer", self.timer),
            ("GET", s + "/subscriptions", "viewer", self.subscriptions),
            ("GET", s + "/subscriptions/{subscription}", "viewer", self.subscription),
            ("GET", s, "viewer", self.session),
            ("GET", "/v1/approvals", "viewer", self.requests),
            ("GET", "/v1/approvals/{id}", "viewer", self.show_request),
            ("POST", "/v1/approvals/{id}", "operator", self.decide),
            ("GET", "/v1/requests", "viewer", self.requests),
            ("GET", "/v1/requests/{id}", "viewer", self.show_request),
            ("POST", "/v1/requests/{id}/answer", "operator", self.answer_question),
        ]
