"""The discovery usage prior's history, read from the execution audit trail.

A turn that calls the search tool (`tool_search` or `discover_tools`) with a need in plain
words and then calls tools has said which tools served that need: each later call of the same
turn is one `UsageRecord` (the need, the tool, whether the call succeeded), until the next
search of the turn starts a new need. `select:` queries name tools rather than needs and are
skipped, as are the search and skill tools themselves. The discovery engine adds a bounded
boost for tools that worked for similar needs (`heron.discovery.prior`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from heron.audit.executions import Execution, ExecutionStore
from heron.discovery import UsageRecord

__all__ = ["SEARCH_ARGUMENTS", "USAGE_ROWS", "usage_from_executions", "usage_records"]

SEARCH_ARGUMENTS = {"tool_search": "query", "discover_tools": "need"}
"""The search tools and the argument that holds the need."""
USAGE_ROWS = 5_000
"""How many of the latest executions the prior learns from (each distinct need is embedded
once, then cached)."""
_NOT_USES = frozenset({*SEARCH_ARGUMENTS, "load_skill", "read_skill_file"})
_MAX_NEED_CHARS = 1_000


def _need(execution: Execution) -> str | None:
    try:
        arguments = json.loads(execution.arguments)
    except (json.JSONDecodeError, TypeError):
        return None  # stored bounded: a long argument may no longer parse
    need = arguments.get(SEARCH_ARGUMENTS[execution.tool]) if isinstance(arguments, dict) else None
    if not isinstance(need, str) or not need.strip() or need.strip().startswith("select:"):
        return None
    return " ".join(need.split())[:_MAX_NEED_CHARS]


def usage_from_executions(executions: Iterable[Execution]) -> list[UsageRecord]:
    """The (need, tool, outcome) records of `executions` (oldest first), one per distinct pair
    with its success and failure counts."""
    counts: dict[tuple[str, str], list[int]] = {}
    current: dict[tuple[str | None, str], str | None] = {}
    for e in executions:
        turn = (e.session, e.turn_id)
        if e.tool in SEARCH_ARGUMENTS:
            current[turn] = _need(e)
            continue
        need = current.get(turn)
        if need is None or e.tool in _NOT_USES or e.success is None or e.status == "lost":
            continue  # no need yet this turn, or a call that never finished
        tally = counts.setdefault((need, e.tool), [0, 0])
        tally[0 if e.success else 1] += 1
    return [
        UsageRecord(request=need, tool=tool, successes=ok, failures=failed)
        for (need, tool), (ok, failed) in counts.items()
    ]


def usage_records(store: ExecutionStore, *, rows: int = USAGE_ROWS) -> Sequence[UsageRecord]:
    """The usage records of the latest `rows` executions of `store`."""
    return usage_from_executions(store.query(limit=rows))
