"""One child's run on the bus: its agent, its session, its inputs and its result event.

`ChildRunner.run` builds the child's `Agent` (the definition's model or the parent's, the
granted tools — its own activated set, catalogue and search tool within the grant — plus the
sub-agent tools bound to the child, the child's system prompt, an
approval manager whose requests name the child's session) and runs it as an
`EventDrivenAgent` on `<root>/agent/<id>`: the task is the first `agent.input` event, and the
run goes on while the child has its own children working (their results are events on its
session). With an `output_schema` the last answer is validated; a failure gets one corrective
message, then the spawn fails with the error. When the child has ended, however it ended, and
its own children with it, `close_session` consumes what is still pending on its session into
its history, never leaving it for a loop that will not run again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import uuid
from typing import Any

import jsonschema

from heron._support.vocabulary import ACTIVE_STATUSES
from heron.agent import Agent
from heron.always_on.bus.framing import frame_batch
from heron.always_on.bus.loop import EventDrivenAgent
from heron.always_on.bus.model import BusEvent, EventContent, EventContext
from heron.always_on.bus.store import BusStore
from heron.always_on.subagents import prompts
from heron.always_on.subagents.live import Live, Parent
from heron.always_on.subagents.runtime import SubagentError, SubagentRuntime
from heron.always_on.subagents.store import SubagentRecord
from heron.humans.gate import DurableApprover
from heron.messages import UserMessage
from heron.models.base import ModelRequest, TextDelta, Usage
from heron.turn.approval import ApprovalManager
from heron.turn.context import TurnState
from heron.turn.outcome import TurnOutcome

__all__ = ["ChildRunner", "distill"]


def _publish_kwargs(session: str, text: str, **extra: Any) -> dict[str, Any]:
    return {
        "source": "agent",
        "channel": "agent",
        "session": session,
        "content": EventContent(text=text, **extra.pop("content", {})),
        **extra,
    }


async def distill(live: Live) -> str:
    """The distilled hand-off: one call to the parent's model summarising its trajectory."""
    exec_, state = live.handle.execution, live.handle.state
    request = ModelRequest(
        system="You write short, factual hand-off notes for helper agents.",
        messages=[UserMessage(content=prompts.distill_request(state.history, live.spawn.task))],
        tools=[],
    )
    parts: list[str] = []
    usage: Usage | None = None
    async for part in exec_.model.stream(request):
        if isinstance(part, TextDelta):
            parts.append(part.text)
        elif isinstance(part, Usage):
            usage = part
    if state.run_budget is not None:
        state.run_budget.record_model_call(exec_.model.name, usage)
    return "".join(parts)


def _last_user_request(live: Live) -> str | None:
    for message in reversed(live.handle.state.history):
        if isinstance(message, UserMessage) and message.source == "user":
            return message.content
    return None


class ChildRunner:
    """Runs children for `runtime` over `bus` (whose session store keeps their histories)."""

    def __init__(self, bus: BusStore) -> None:
        self.bus = bus
        self.runtime: SubagentRuntime | None = None

    # -- the run ----------------------------------------------------------------------------

    def _agent(self, live: Live) -> Agent:
        from heron.models.resolve import resolve_model

        assert self.runtime is not None and self.runtime.tool_factory is not None
        record, definition, exec_ = live.record, live.definition, live.handle.execution
        model = resolve_model(definition.model) if definition.model else exec_.model
        me = Parent(session=record.root_session, child=record.id, depth=record.depth)
        bound = self.runtime.tool_factory(me, record.mode)
        grant = live.grant
        approver = exec_.approval.approver
        if isinstance(approver, DurableApprover):
            # A person asked about a child's call sees which child asks, and the answer comes
            # back to the child's own session.
            approver = DurableApprover(
                approver.desk,
                session=record.session,
                urgency=approver.urgency,
                asker=f"sub-agent {record.agent} {record.id} (spawned by {record.parent_session})",
            )
        approval = ApprovalManager(
            policy=exec_.approval.policy,
            approver=approver,
            audit=exec_.approval.audit,
            session_allowlist=set(exec_.approval.session_allowlist),
        )
        knobs = exec_.knobs
        if definition.max_iterations is not None:
            knobs = dataclasses.replace(knobs, max_iterations=definition.max_iterations)
        names = {t.spec.name for t in bound}
        system_prompt = prompts.child_system_prompt(
            agent=definition.name,
            role=definition.prompt,
            depth=record.depth,
            can_spawn="spawn_subagent" in names,
            can_ask="ask_parent" in names,
            write=live.spawn.write,
            output_schema=live.spawn.output_schema,
        )
        if grant.prompt_section:
            system_prompt = f"{system_prompt}\n\n{grant.prompt_section}"
        return Agent(
            model=model,
            tools=[*grant.tools, *bound],
            system_prompt=system_prompt,
            activated=grant.activated,
            catalogue=grant.catalogue,
            autonomy=exec_.registry.autonomy,
            approval=approval,
            knobs=knobs,
            observer=exec_.observer,
            workspace=exec_.workspace,
            # Without write access the workspace is read-only at the tools' own boundary (file
            # tools refuse, bwrap mounts it read-only), not only by leaving write tools out.
            workspace_read_only=exec_.workspace_read_only or not live.spawn.write,
            name=f"{definition.name}#{record.id}",
        )

    async def run(self, live: Live) -> TurnOutcome:
        """Run one child to its end (the runtime's `run_child`)."""
        record = live.record
        note = await distill(live) if live.spawn.context == "distilled" else None
        user = _last_user_request(live) if live.spawn.context == "distilled" else None

        def prepare(state: TurnState) -> None:
            state.run_budget = live.budget
            state.cancel = live.scope.child()
            # The child's identity on every approval it needs (the request's channel).
            state.channel = f"subagent {record.agent} {record.id}"

        live.agent = self._agent(live)
        loop = EventDrivenAgent(
            live.agent, self.bus, self.bus.sessions, session=record.session, prepare=prepare
        )

        def arrived(event: BusEvent) -> None:
            if event.session == record.session:
                live.wakeup.set()  # e.g. the ending of a request it waits on

        unwatch = self.bus.watch(arrived)
        try:
            await loop.publish(
                BusEvent(
                    kind="agent.input",
                    idempotency_key=f"subagent.task:{record.id}",
                    **_publish_kwargs(
                        record.session,
                        prompts.task_message(live.spawn.task, note=note, user_request=user),
                    ),
                )
            )
            outcome = await self._until_done(loop, live)
            if live.spawn.output_schema is None or outcome.status != "final":
                return outcome
            problem = _schema_problem(outcome.text, live.spawn.output_schema)
            if problem is None:
                return outcome
            await loop.publish(
                BusEvent(
                    kind="agent.input",
                    idempotency_key=f"subagent.correction:{record.id}",
                    **_publish_kwargs(record.session, prompts.schema_correction(problem)),
                )
            )
            outcome = await self._until_done(loop, live)
            if outcome.status == "final":
                problem = _schema_problem(outcome.text, live.spawn.output_schema)
                if problem is not None:
                    raise SubagentError(f"the answer does not match the output schema: {problem}")
            return outcome
        finally:
            unwatch()
            await loop.aclose()

    async def close_session(self, record: SubagentRecord) -> None:
        """Consume what is still pending on an ended child's session (the results of its
        children that ended after its last turn, a message that came too late) into its
        history: nothing is left pending where no loop will ever read it (the runtime's
        `close`, called once the child's own children have ended). A request to a person it
        left open (it was cancelled while waiting) is withdrawn: nobody is asked about a call
        that can no longer run."""
        assert self.runtime is not None
        live = self.runtime.live.get(record.id)
        approver = live.agent.approval.approver if live and live.agent else None
        if isinstance(approver, DurableApprover):
            approver.desk.withdraw(record.session, f"sub-agent {record.id} ended")
        events = await self.bus.pending(record.session)
        if events:
            await self.bus.consume(record.session, [e.id for e in events], [frame_batch(events)])

    async def _until_done(self, loop: EventDrivenAgent, live: Live) -> TurnOutcome:
        """Run until the child is idle, none of its own children is still working and no
        request to a person it made is unanswered (its ending arrives as an event)."""
        assert self.runtime is not None
        flagged = False  # its record says `input_required` while a person's answer is awaited
        while True:
            live.wakeup.clear()
            await loop.run_until_idle()
            mine = [c for c in self.runtime.live.values() if c.record.parent == live.record.id]
            if not mine:
                # A child that has just ended may still be publishing its result here.
                await self.runtime.flush(live.record.session)
            asking = _waits_on_people(live)
            if asking != flagged:
                self.runtime.store.advance(
                    live.record.id, "input_required" if asking else "working"
                )
                flagged = asking
            if not mine and not asking and not await self.bus.pending(live.record.session, limit=1):
                break
            if not mine and not asking:
                continue  # something arrived meanwhile: take it in
            # Idle until a child ends or an answer arrives: the slot is for those who work
            # (a cancel while it waits ends it without taking one again).
            self.runtime.give_slot(live)
            if asking:
                # Another process may publish the ending: look again now and then.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.runtime.config.cancel_poll_s):
                        await live.wakeup.wait()
            else:
                await live.wakeup.wait()
            await self.runtime.take_slot(live)
        if not loop.outcomes:
            return TurnOutcome(
                status="error",
                text="",
                reason="error",
                iterations=0,
                error="the child never answered",
            )
        return loop.outcomes[-1]

    # -- messages between parent and child --------------------------------------------------

    async def send_input(self, record: SubagentRecord, text: str, *, interrupt: bool) -> None:
        """A message from the parent to the child's session (`agent.input` or, urgent,
        `agent.interrupt`)."""
        await self.bus.publish(
            BusEvent(
                kind="agent.interrupt" if interrupt else "agent.input",
                urgency="urgent" if interrupt else "normal",
                idempotency_key=f"subagent.input:{record.id}:{uuid.uuid4().hex[:8]}",
                **_publish_kwargs(record.session, prompts.parent_message(text)),
            )
        )

    async def to_parent(
        self, record: SubagentRecord, text: str, *, key: str, needs_reply: bool = False
    ) -> None:
        """A report or question from the child to its parent's session, as agent data."""
        await self.bus.publish(
            BusEvent(
                kind="agent.input",
                idempotency_key=key,
                context=EventContext(related_task=record.id),
                **_publish_kwargs(
                    record.parent_session, text, content={"needs_reply": needs_reply}
                ),
            )
        )

    async def publish_result(self, record: SubagentRecord) -> None:
        """A finished async child's result on its parent's session, bound to the spawn call;
        the bus keeps one copy per idempotency key."""
        assert self.runtime is not None
        text = prompts.frame_report(
            record.id,
            record.agent,
            status=record.status,
            outcome=record.outcome,
            text=record.result or record.error,
        )
        await self.bus.publish(
            BusEvent(
                kind="tool.result",
                source="agent",
                channel="agent",
                session=record.parent_session,
                idempotency_key=f"subagent.result:{record.id}",
                context=EventContext(call_id=record.call_id, related_task=record.id),
                content=EventContent(
                    text=text,
                    data={
                        "tool": "spawn_subagent",
                        "success": record.status == "completed",
                        "subagent": record.id,
                        "status": record.status,
                        "outcome": record.outcome,
                        "usage": record.usage.to_data(),
                    },
                ),
            )
        )
        self.runtime.store.claim_delivery(record.id)


def _waits_on_people(live: Live) -> bool:
    """Whether a request the child opened (an approval of one of its calls) has not ended, or
    ended but its ending has not reached the child's session yet."""
    approver = live.agent.approval.approver if live.agent is not None else None
    if not isinstance(approver, DurableApprover):
        return False  # the approval is answered in line, during the call
    store, session = approver.desk.store, live.record.session
    return bool(store.list(statuses=ACTIVE_STATUSES, session=session, limit=1)) or bool(
        store.unreported(session=session)
    )


def _schema_problem(text: str, schema: Any) -> str | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"not JSON ({exc.msg} at position {exc.pos})"
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "the value"
        return f"{where}: {exc.message}"
    except jsonschema.SchemaError as exc:
        return f"the output schema itself is invalid: {exc.message}"
    return None
