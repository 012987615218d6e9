"""What the desk refuses, and why: the `RequestError` family, the text of an ended request, and
the checks an answer must pass (a question's value against its options, binding and schema; an
approval's edit against the tool's schema)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from heron._support.timefmt import utc_rfc3339
from heron.errors import HeronError
from heron.humans.binding import bound_refusal
from heron.humans.store import HumanRequest
from heron.tools.definition import ToolArgumentsError
from heron.tools.validation import SchemaValidator

__all__ = [
    "AlreadyAnswered",
    "InvalidAnswer",
    "NotAnApprover",
    "RequestError",
    "UnknownRequest",
    "check_value",
    "checked_edit",
    "ended_text",
]


class RequestError(HeronError):
    """An answer or a request the desk refused; the message says why, for the person."""


class UnknownRequest(RequestError, LookupError):
    """No request has this id."""


class NotAnApprover(RequestError, PermissionError):
    """The one answering is not among the request's approvers."""


class InvalidAnswer(RequestError, ValueError):
    """The answer does not fit the request (an edit outside the schema, a question's answer
    outside its options, an "always" for a high-risk call, …)."""


class AlreadyAnswered(RequestError):
    """The request had already ended; `request` says by whom and when."""

    def __init__(self, request: HumanRequest) -> None:
        self.request = request
        super().__init__(ended_text(request))


def ended_text(request: HumanRequest) -> str:
    """`already answered by console:alice at 2026-…Z (approved)`, `already ended: …`."""
    at = "" if request.answered_at is None else f" at {utc_rfc3339(request.answered_at)}"
    if request.answered_by in (None, "policy"):
        why = f": {request.reason}" if request.reason else ""
        return f"{request.id} already ended{at}: {request.status}, {request.outcome}{why}"
    return f"{request.id} was already answered by {request.answered_by}{at} ({request.outcome})"


def check_value(
    value: Any, *, schema: Mapping[str, Any] | None, options: Sequence[str], what: str
) -> None:
    """Refuse a question's answer (or default, `what`) that does not fit its options, its
    binding (`heron.humans.binding`) or its schema."""
    if options and value not in options:
        raise InvalidAnswer(f"{what} must be one of {', '.join(map(repr, options))}")
    unbound = bound_refusal(value, schema) if isinstance(value, str) else None
    if unbound is not None:
        raise InvalidAnswer(unbound)
    if schema is not None:
        wrapped = {"type": "object", "properties": {"answer": dict(schema)}}
        try:
            SchemaValidator("the question", wrapped).validate({"answer": value})
        except ToolArgumentsError as exc:
            problems = "; ".join(exc.problems)
            raise InvalidAnswer(f"{what} does not fit the question: {problems}") from exc


def checked_edit(request: HumanRequest, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """An approval's edited arguments, checked against the tool's schema."""
    edited = dict(arguments)
    if request.schema is not None:
        try:
            SchemaValidator(request.tool, request.schema).validate(edited)
        except ToolArgumentsError as exc:
            raise InvalidAnswer(
                f"the edited arguments do not fit {request.tool}: " + "; ".join(exc.problems)
            ) from exc
    return edited
