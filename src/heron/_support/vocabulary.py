"""The two vocabularies every waiting thing shares: how far it got, and what a person decided.

**Status** — of anything that runs or waits: a background job, an MCP task, a sub-agent, a
request to a human. `queued → working → (input_required | auth_required) → …` and one of the
terminal states `completed, failed, cancelled, timed_out, lost`. A terminal state is final:
`advance_status` applies a transition and refuses to move a finished thing anywhere else, so a
late "working" report can never resurrect a cancelled job, and a second answer can never
overwrite the first. `lost` means its fate cannot be known (a supervisor gone without a trace,
a call interrupted mid-run).

**Outcome** — how a finished thing ended, beside its status: an approval is `completed` with
the outcome `approved`, `denied`, `replaced` or `edited`, or `timed_out` with `no_answer`
(silence never approves); a question is `completed`/`answered`, or `timed_out`/`defaulted`
when its default was used; a sub-agent may end `completed`/`budget_exhausted` or `empty`.

**HumanDecision** — what an approver can say, the same on every channel (terminal, another
terminal through `heron approvals`, mail, HTTP, ACP): `yes`, `no`, `always` (yes, and a stored
rule for the same kind of call), `replace(text)` (the tool does not run; the text becomes its
result) and `edit(arguments)` (run with changed arguments, validated against the tool's schema).

**Urgency** — how soon a person should see a request or a message: `low`, `normal`, `high`,
`urgent`; urgency chooses channels and escalation.

This module is layer 0: jobs, the MCP client, sub-agents and the human-request store all
import their words from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from heron.errors import HeronError

__all__ = [
    "ACTIVE_STATUSES",
    "DECISION_KINDS",
    "OUTCOMES",
    "STATUSES",
    "TERMINAL_STATUSES",
    "URGENCIES",
    "DecisionKind",
    "HumanDecision",
    "Outcome",
    "Status",
    "StatusError",
    "Urgency",
    "advance_status",
    "is_terminal",
]

Status = Literal[
    "queued",
    "working",
    "input_required",
    "auth_required",
    "completed",
    "failed",
    "cancelled",
    "timed_out",
    "lost",
]
"""How far something that runs or waits has got; the last five are terminal."""

STATUSES: Final[tuple[Status, ...]] = get_args(Status)
TERMINAL_STATUSES: Final[frozenset[Status]] = frozenset(
    {"completed", "failed", "cancelled", "timed_out", "lost"}
)
ACTIVE_STATUSES: Final[frozenset[Status]] = frozenset(STATUSES) - TERMINAL_STATUSES

Outcome = Literal[
    "approved",
    "denied",
    "replaced",
    "edited",
    "answered",
    "defaulted",
    "no_answer",
    "budget_exhausted",
    "empty",
]
"""How a finished thing ended, beside its terminal status (see the module docstring)."""

OUTCOMES: Final[tuple[Outcome, ...]] = get_args(Outcome)

DecisionKind = Literal["yes", "no", "always", "replace", "edit"]
"""What an approver can say (see `HumanDecision`)."""
DECISION_KINDS: Final[tuple[DecisionKind, ...]] = get_args(DecisionKind)

Urgency = Literal["low", "normal", "high", "urgent"]
"""How soon a person should see a request or message; `high` and `urgent` go to every channel."""
URGENCIES: Final[tuple[Urgency, ...]] = get_args(Urgency)


class StatusError(HeronError, ValueError):
    """A status word outside the vocabulary, or a transition out of a terminal status."""


def is_terminal(status: str) -> bool:
    """True for `completed`, `failed`, `cancelled`, `timed_out` and `lost`."""
    return status in TERMINAL_STATUSES


def advance_status(current: Status, new: Status) -> Status:
    """The status after moving from `current` to `new`.

    Any move out of an active status is allowed; a terminal status stays what it is — moving
    to it again is a no-op, moving anywhere else raises `StatusError` (a finished thing is
    never downgraded or re-decided). Unknown words raise `StatusError` too.
    """
    for word in (current, new):
        if word not in STATUSES:
            raise StatusError(f"unknown status {word!r} (known: {', '.join(STATUSES)})")
    if current in TERMINAL_STATUSES and new != current:
        raise StatusError(f"a {current} item is finished; it cannot become {new}")
    return new


@dataclass(frozen=True, kw_only=True, slots=True)
class HumanDecision:
    """One approver's decision about one tool call. Build it with the class methods
    (`HumanDecision.yes()`, `.replace("text")`, `.edit({...})`) or `from_data`."""

    kind: DecisionKind
    text: str | None = None
    """With `replace`: the result the model reads instead of the tool's."""
    arguments: Mapping[str, Any] | None = field(default=None, hash=False)
    """With `edit`: the arguments the tool runs with instead of the requested ones."""

    def __post_init__(self) -> None:
        if self.kind not in DECISION_KINDS:
            known = ", ".join(DECISION_KINDS)
            raise ValueError(f"unknown decision {self.kind!r} (known: {known})")
        if (self.kind == "replace") != (self.text is not None):
            raise ValueError("a replace decision, and only one, carries the replacement text")
        if (self.kind == "edit") != (self.arguments is not None):
            raise ValueError("an edit decision, and only one, carries the edited arguments")
        if self.arguments is not None and not isinstance(self.arguments, Mapping):
            raise ValueError("edited arguments must be a JSON object")

    @classmethod
    def yes(cls) -> HumanDecision:
        return cls(kind="yes")

    @classmethod
    def no(cls) -> HumanDecision:
        return cls(kind="no")

    @classmethod
    def always(cls) -> HumanDecision:
        return cls(kind="always")

    @classmethod
    def replace(cls, text: str) -> HumanDecision:
        return cls(kind="replace", text=text)

    @classmethod
    def edit(cls, arguments: Mapping[str, Any]) -> HumanDecision:
        return cls(kind="edit", arguments=dict(arguments))

    @property
    def runs(self) -> bool:
        """True when the tool runs after this decision (`yes`, `always`, `edit`)."""
        return self.kind in ("yes", "always", "edit")

    @property
    def outcome(self) -> Outcome:
        """The outcome of an approval ended by this decision."""
        return _OUTCOME[self.kind]

    def to_data(self) -> dict[str, Any]:
        """A JSON object: `{"kind": …}` plus `text` or `arguments` when they apply."""
        data: dict[str, Any] = {"kind": self.kind}
        if self.text is not None:
            data["text"] = self.text
        if self.arguments is not None:
            data["arguments"] = dict(self.arguments)
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> HumanDecision:
        """The inverse of `to_data`; `ValueError` for anything else."""
        extra = set(data) - {"kind", "text", "arguments"}
        if extra:
            raise ValueError(f"unknown decision fields: {sorted(extra)}")
        text, arguments = data.get("text"), data.get("arguments")
        if text is not None and not isinstance(text, str):
            raise ValueError("a replacement text must be a string")
        return cls(kind=data.get("kind"), text=text, arguments=arguments)  # type: ignore[arg-type]


_OUTCOME: Final[dict[DecisionKind, Outcome]] = {
    "yes": "approved",
    "always": "approved",
    "edit": "edited",
    "replace": "replaced",
    "no": "denied",
}
