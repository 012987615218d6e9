"""The console channel: a request is delivered by being in the store, where `heron approvals`
(in any terminal, any process, on the same state directory) lists and answers it.

`ConsoleChannel` optionally writes one line to a stream (standard error of `heron serve`, a
chat front end) saying what waits and the command that answers it.
"""

from __future__ import annotations

from typing import TextIO

from heron.humans.store import HumanRequest
from heron.safety.redact import summarize_args

__all__ = ["ConsoleChannel"]


class ConsoleChannel:
    """Approvers `console:<name>` (and `console:*`, the local operator) answer with
    `heron approvals`."""

    name = "console"

    def __init__(self, announce: TextIO | None = None) -> None:
        self._announce = announce

    async def deliver(self, request: HumanRequest) -> str:
        if self._announce is not None:
            verb = "approve" if request.kind == "approval" else "answer"
            what = (
                f"{request.tool}({summarize_args(request.display_arguments)})"
                if request.kind == "approval"
                else request.question
            )
            self._announce.write(
                f"[heron] {request.kind} {request.id} waits ({request.urgency}): {what}\n"
                f"        answer with: heron approvals {verb} {request.id}\n"
            )
            self._announce.flush()
        return "ok"
