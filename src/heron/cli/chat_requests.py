"""The durable requests to a human, inside `heron chat`: what `heron serve` (or anything else on
the same state directory) waits on is shown inline at the prompt, and answered from there.

At each prompt the chat names the requests that began waiting since it last looked (`[apr-…
waits: pay(amount: 9, to: ACME) — /approve apr-… or /deny apr-… REASON]`); `/approvals` lists
every pending one. `/approve ID [REASON]` and `/deny ID [REASON]` answer as the local operator
on the console channel, exactly as `heron approvals approve|deny` would from another terminal:
the same approvers, the same signed compare-and-set, the same "already answered by X at T".
The chat's own approval questions (its own turns) stay a prompt of their own.
"""

from __future__ import annotations

import getpass
from pathlib import Path

from heron._support.timefmt import utc_rfc3339
from heron._support.vocabulary import ACTIVE_STATUSES, HumanDecision
from heron.humans.config import ApprovalsConfig
from heron.humans.desk import RequestDesk
from heron.humans.refusals import RequestError
from heron.humans.signing import DecisionKeyStore, DecisionSigner
from heron.humans.sqlite_store import SqliteRequestStore
from heron.humans.store import HumanRequest
from heron.safety.redact import summarize_args

__all__ = ["HELP", "PendingRequests"]

HELP = """\
  /approvals        the requests waiting for a person (from heron serve, here too)
  /approve ID [WHY] approve one, as the local operator (like heron approvals approve)
  /deny ID [WHY]    deny one"""


class PendingRequests:
    """The requests of one state directory, as the chat shows and answers them."""

    def __init__(self, store: SqliteRequestStore, desk: RequestDesk, *, operator: str) -> None:
        self.store = store
        self.desk = desk
        self.operator = operator
        self._shown: set[str] = set()

    @classmethod
    def open(
        cls, state_dir: Path, config: ApprovalsConfig, *, approval_timeout_s: float
    ) -> PendingRequests:
        store = SqliteRequestStore.open_dir(state_dir)
        desk = RequestDesk(
            store,
            signer=DecisionSigner(DecisionKeyStore(state_dir)),
            config=config,
            approval_timeout_s=approval_timeout_s,
        )
        try:
            operator = getpass.getuser()
        except (KeyError, OSError):
            operator = "operator"
        return cls(store, desk, operator=operator)

    def close(self) -> None:
        self.store.close()

    def notices(self) -> list[str]:
        """One line for each request that began waiting since the last call."""
        lines = []
        for request in self._pending():
            if request.id not in self._shown:
                self._shown.add(request.id)
                lines.append(
                    f"[{request.id} waits: {_what(request)} — /approve {request.id} or "
                    f"/deny {request.id} REASON]"
                )
        return lines

    def listing(self) -> list[str]:
        pending = self._pending()
        if not pending:
            return ["no request waits for a person"]
        lines = []
        for request in pending:
            self._shown.add(request.id)
            until = "" if request.deadline is None else f", until {utc_rfc3339(request.deadline)}"
            lines.append(
                f"  {request.id}  {_what(request)}  (session {request.session}, "
                f"{request.urgency}{until})"
            )
        return lines

    def answer(self, verb: str, rest: str) -> str:
        """`/approve` or `/deny` with `ID [REASON]`: what happened, in one line."""
        request_id, _, reason = rest.partition(" ")
        if not request_id:
            return f"usage: /{verb} ID [REASON]"
        decision = HumanDecision.yes() if verb == "approve" else HumanDecision.no()
        try:
            settled = self.desk.decide(
                request_id,
                decision,
                channel="console",
                name=self.operator,
                reason=reason.strip() or None,
            )
        except RequestError as exc:
            return f"not answered: {exc}"
        return f"{settled.id}: {settled.outcome} by {settled.answered_by}"

    def _pending(self) -> list[HumanRequest]:
        self.desk.expire()
        return self.desk.store.list(statuses=ACTIVE_STATUSES, limit=1000)


def _what(request: HumanRequest) -> str:
    if request.kind == "question":
        return f"question: {request.question}"
    return f"{request.tool}({summarize_args(request.display_arguments)})"
