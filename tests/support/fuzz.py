"""The tool-call fuzz suite: random and adversarial calls through the real engine.

`run_fuzz(calls=10_000, seed=...)` drives `heron.Agent` with a `FunctionModel` that emits
batches of fuzzed tool calls — valid arguments generated from each tool's JSON Schema, then
mutated (wrong types, extra and missing keys, unicode confusables, NaN, Infinity, 1e400,
10^400, -0.0) or replaced by adversarial argument text (nesting up to 100,000 deep, strings up
to 1 MB, lone surrogate escapes, broken JSON, JSON that is not an object) — against a
catalogue of function tools, class tools with hand-written schemas and a tool of a real MCP
server. Every tool records what it receives and checks it against its schema with an oracle
that shares no code with heron's validators.

The counts (`FuzzReport`) must all be zero but `calls`: a crash is an exception out of
`Agent.run` or a turn ending in error; a hang a turn that did not end within `TURN_BOUND_S`; a
schema violation arguments reaching a tool that its schema refuses; an unanswered call one
without exactly one `tool_call` / `tool_result` pair and one result message in the history.
Each turn's history and events must also serialise strictly (`model_dump_json`, no fallback)
and be stored in a real session store.

Used by `tests/unit/test_fuzz_tool_calls.py` and `bench/fuzz_tool_calls.py`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel

from heron import Agent, FunctionModel, ModelTurn, tool
from heron.messages import AssistantMessage, ToolResultMessage, UserMessage
from heron.models.base import ModelRequest
from heron.models.scripted import ScriptedCall
from heron.sessions.sqlite_store import SqliteSessionStore
from heron.tools.definition import Tool, ToolAnnotations, ToolContext, ToolResult, ToolSpec
from heron.tools.validation import SchemaValidator
from heron.turn.context import LoopDetectionKnobs, RuntimeKnobs
from heron.turn.events import BaseEvent, ToolCallEvent, ToolResultEvent

TURN_BOUND_S = 120.0
"""A turn that has not ended after this long counts as a hang (they take milliseconds)."""
CALLS_PER_ROUND = 25
ROUNDS_PER_TURN = 8
ORACLE_DEPTH = 64
"""The nesting heron promises never to hand a tool (its default `[limits] max_depth`)."""

Violation = str


# -- the oracle: independent of heron's validators ----------------------------------------------


def sane(value: Any, depth: int = 1) -> list[Violation]:
    """What is wrong with a JSON-like value by heron's promises: finite numbers, Unicode text,
    string keys, at most `ORACLE_DEPTH` levels (it stops looking deeper, so never recurses
    past that)."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, float):
        return [] if math.isfinite(value) else [f"non-finite number {value!r}"]
    if isinstance(value, int):
        return [] if abs(value) <= sys.float_info.max else ["an integer no double holds"]
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return ["text that is not Unicode"]
        return []
    if isinstance(value, dict | list | tuple):
        if depth > ORACLE_DEPTH:
            return [f"nested deeper than {ORACLE_DEPTH}"]
        found: list[Violation] = []
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            if isinstance(value, dict) and not isinstance(key, str):
                found.append("a key that is not a string")
            elif isinstance(key, str):
                found += sane(key, depth)
            found += sane(child, depth + 1)
        return found
    if isinstance(value, dt.date | BaseModel):
        return []
    return [f"a {type(value).__name__}"]


def schema_violations(schema: Mapping[str, Any], arguments: Any) -> list[Violation]:
    """The stock jsonschema validator (laxer than heron's: 1.0 passes as an integer) plus
    `sane`."""
    found = sane(arguments)
    if found:
        return found  # the stock validator recurses: only sane values go in
    return [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(arguments)]


# -- the catalogue ------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Catalogue:
    tools: list[Tool]
    received: Counter[str] = field(default_factory=Counter)
    violations: list[tuple[str, Violation]] = field(default_factory=list)

    def note(self, tool_name: str, problems: list[Violation]) -> None:
        self.received[tool_name] += 1
        self.violations += [(tool_name, p) for p in problems]


class Point(BaseModel):
    x: float
    y: float
    label: str | None = None


def function_tools(catalogue: Catalogue) -> list[Tool]:
    @tool(read_only=True)
    def fz_scalars(
        text: str,
        count: int,
        ratio: float = 0.5,
        flag: bool = False,
        mode: Literal["fast", "safe"] = "fast",
    ) -> str:
        """Scalars of every kind."""
        problems = sane([text, count, ratio, flag, mode])
        if not isinstance(text, str) or type(count) is not int or type(flag) is not bool:
            problems.append("a scalar of the wrong type")
        if isinstance(ratio, bool) or not isinstance(ratio, int | float):
            problems.append("ratio is no number")
        if mode not in ("fast", "safe"):
            problems.append(f"mode {mode!r}")
        catalogue.note("fz_scalars", problems)
        return f"{len(text)} {count}"

    @tool
    def fz_nested(items: list[dict[str, int]], tags: list[str] | None = None) -> str:
        """Lists and mappings."""
        problems = sane([items, tags])
        if not all(isinstance(i, dict) and all(type(v) is int for v in i.values()) for i in items):
            problems.append("items of the wrong type")
        if tags is not None and not all(isinstance(t, str) for t in tags):
            problems.append("tags of the wrong type")
        catalogue.note("fz_nested", problems)
        return str(len(items))

    @tool(read_only=True)
    def fz_point(point: Point, when: dt.date | None = None) -> str:
        """A model and a date."""
        problems = sane([point.x, point.y, point.label])
        if not isinstance(point, Point) or (when is not None and type(when) is not dt.date):
            problems.append("a point or date of the wrong type")
        catalogue.note("fz_point", problems)
        return f"{point.x},{point.y}"

    return [fz_scalars, fz_nested, fz_point]


STRICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "count": {"type": "integer", "minimum": 0, "maximum": 1000},
        "ratio": {"type": "number"},
        "mode": {"enum": ["a", "b"]},
        "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "filter": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    },
    "required": ["path"],
    "additionalProperties": False,
}
ANY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"value": {}, "note": {"type": "string"}},
    "required": ["value"],
}


class SchemaTool:
    """A class tool with a hand-written schema, validated by heron's `SchemaValidator`."""

    def __init__(self, name: str, schema: dict[str, Any], catalogue: Catalogue) -> None:
        self.spec = ToolSpec(
            name=name,
            description=f"A class tool with a hand-written schema ({name}).",
            parameters=schema,
            annotations=ToolAnnotations(read_only=name.endswith("any")),
        )
        self._validator = SchemaValidator(name, schema)
        self._catalogue = catalogue

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self._validator.validate(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        self._catalogue.note(self.spec.name, schema_violations(self.spec.parameters, arguments))
        return ToolResult.ok(f"{len(arguments)} arguments", data={"keys": sorted(arguments)})


class RecordedMcpTool:
    """A real MCP tool, with what heron hands it checked against the server's schema, and the
    server's own echo of what arrived parsed strictly (a NaN would come back as `NaN`)."""

    def __init__(self, inner: Tool, catalogue: Catalogue) -> None:
        self._inner = inner
        self._catalogue = catalogue
        self.spec = inner.spec

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self._inner.validate(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        problems = schema_violations(self.spec.parameters, arguments)
        result = await self._inner.execute(arguments, ctx)
        if result.success:
            try:
                echoed = json.loads(result.output, parse_constant=_refuse_constant)
            except ValueError as exc:
                problems.append(f"the server received {exc}")
            else:
                problems += sane(echoed)
        self._catalogue.note(self.spec.name, problems)
        return result


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"a {name}")


# -- the generator -------------------------------------------------------------------------------

CONFUSABLES = {"a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "x": "х", "i": "і"}
ODD_NUMBERS: tuple[Any, ...] = (
    math.nan,
    math.inf,
    -math.inf,
    10**400,
    -(10**400),
    -0.0,
    5e-324,
    2**63,
    2**64 + 1,
    1.0,
    True,
)
ODD_NUMBER_TEXT = ("NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" + "0" * 400, "9" * 5000)
ODD_STRINGS = (
    "",
    "\ud800",
    "half \udcff name",
    "\ud83d\ude00",
    "\x00nul",
    "\u202eevil",
    "\ufeffbom",
    "ﬁ ligature",
    "𝒽𝑒𝓇𝑜𝓃",
    "a\u0301",
    "\n\r\t",
)


class Fuzzer:
    """Fuzzed arguments, as JSON text or as Python values, from a seeded RNG."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    # valid values from a schema ---------------------------------------------------------------

    def valid(self, schema: Mapping[str, Any], root: Mapping[str, Any], depth: int = 0) -> Any:
        r = self.rng
        if "$ref" in schema:
            name = str(schema["$ref"]).rsplit("/", 1)[-1]
            return self.valid(root["$defs"][name], root, depth)
        for union in ("anyOf", "oneOf"):
            if union in schema:
                return self.valid(r.choice(schema[union]), root, depth)
        if "enum" in schema:
            return r.choice(schema["enum"])
        kind = schema.get("type")
        if kind is None:
            return self.any_json(depth)
        if kind == "string":
            if schema.get("format") == "date":
                return dt.date(2020 + r.randrange(10), 1 + r.randrange(12), 1).isoformat()
            return self.text()
        if kind == "integer":
            low, high = schema.get("minimum", -1000), schema.get("maximum", 1000)
            return r.randint(low, high)
        if kind == "number":
            return r.choice([r.uniform(-1e6, 1e6), r.randint(-100, 100), 0.0])
        if kind == "boolean":
            return r.random() < 0.5
        if kind == "null":
            return None
        if kind == "array":
            items = schema.get("items", {})
            return [self.valid(items, root, depth + 1) for _ in range(r.randrange(4))]
        if kind == "object":
            props: Mapping[str, Any] = schema.get("properties", {})
            required = set(schema.get("required", ()))
            value = {
                k: self.valid(s, root, depth + 1)
                for k, s in props.items()
                if k in required or r.random() < 0.5
            }
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict) and not props:
                for _ in range(r.randrange(3)):
                    value[self.word()] = self.valid(extra, root, depth + 1)
            return value
        return None

    def any_json(self, depth: int = 0) -> Any:
        r = self.rng
        pick = r.randrange(7 if depth < 4 else 4)
        if pick == 0:
            return self.text()
        if pick == 1:
            return r.randint(-(10**6), 10**6)
        if pick == 2:
            return r.uniform(-1, 1)
        if pick == 3:
            return r.choice([True, False, None])
        if pick in (4, 5):
            return {self.word(): self.any_json(depth + 1) for _ in range(r.randrange(4))}
        return [self.any_json(depth + 1) for _ in range(r.randrange(4))]

    def word(self) -> str:
        r = self.rng
        return "".join(r.choices("abcdefghijklmnopqrstuvwxyz_", k=1 + r.randrange(8)))

    def text(self) -> str:
        r = self.rng
        roll = r.random()
        if roll < 0.7:
            return self.word() + (" " + self.word() if r.random() < 0.5 else "")
        if roll < 0.9:
            return "".join(chr(r.randrange(0x20, 0x3000)) for _ in range(r.randrange(12)))
        return r.choice(ODD_STRINGS) if roll < 0.99 else "x" * r.randrange(100_000, 1_000_000)

    # mutations and adversarial text ------------------------------------------------------------

    def mutate(self, value: dict[str, Any]) -> dict[str, Any]:
        r = self.rng
        value = dict(value)
        for _ in range(1 + r.randrange(3)):
            roll = r.randrange(8)
            keys = list(value)
            if roll == 0 and keys:  # a wrong type
                value[r.choice(keys)] = r.choice(["5", 5, 1.5, None, [], {}, True, "true"])
            elif roll == 1:  # an extra key
                value[self.word()] = self.any_json()
            elif roll == 2 and keys:  # a missing key
                del value[r.choice(keys)]
            elif roll == 3 and keys:  # a confusable key
                key = r.choice(keys)
                value["".join(CONFUSABLES.get(c, c) for c in key)] = value.pop(key)
            elif roll == 4 and keys:  # an odd number anywhere
                value[r.choice(keys)] = r.choice(ODD_NUMBERS)
            elif roll == 5 and keys:  # an odd string
                value[r.choice(keys)] = r.choice(ODD_STRINGS)
            elif roll == 6 and keys:  # deep, but from Python
                value[r.choice(keys)] = self.deep_value(r.choice([10, 63, 65, 500, 5000]))
            elif keys:  # an odd number inside a list
                value[r.choice(keys)] = [1, r.choice(ODD_NUMBERS), "x"]
        return value

    def deep_value(self, levels: int) -> Any:
        value: Any = self.rng.choice([1, "leaf", None, []])
        for _ in range(levels):
            value = [value] if self.rng.random() < 0.5 else {"k": value}
        return value

    def adversarial_text(self, valid: dict[str, Any]) -> str:
        r = self.rng
        key = r.choice(list(valid) or ["value"])
        roll = r.randrange(10)
        if roll == 0:
            levels = r.choice([65, 200, 999, 1000, 5000, 100_000])
            return f'{{"{key}": ' + "[" * levels + "]" * levels + "}"
        if roll == 1:
            levels = r.choice([65, 300, 2000])
            return f'{{"{key}": ' + '{"a":' * levels + "1" + "}" * levels + "}"
        if roll == 2:
            body = json.dumps(valid)
            return body[: r.randrange(max(1, len(body)))]  # cut short
        if roll == 3:
            return r.choice(["[1, 2]", '"text"', "42", "null", "true", "", " ", "{}"])
        if roll == 4:
            number = r.choice(ODD_NUMBER_TEXT)
            return json.dumps(valid)[:-1] + (", " if valid else "") + f'"{key}": {number}}}'
        if roll == 5:
            escape = r.choice(["\\ud800", "\\udfff", "\\ud83d", "\\ude00x", "\\u00", "\\x41"])
            return f'{{"{key}": "bad {escape} text"}}'
        if roll == 6:
            return f'{{"{key}": 1, "{key}": "duplicate"}}'
        if roll == 7:
            return "\ufeff" + json.dumps(valid)
        if roll == 8:
            return json.dumps({f"k{i}": i for i in range(r.randrange(100, 5000))})
        return json.dumps(valid, ensure_ascii=False).replace('"', '"\x00', 1)

    def call(self, tools: list[Tool]) -> tuple[str, str | dict[str, Any]]:
        """One fuzzed call: a tool name (usually real) and its arguments (text or value)."""
        r = self.rng
        spec = r.choice(tools).spec
        name = spec.name
        if r.random() < 0.03:
            name = r.choice(["".join(CONFUSABLES.get(c, c) for c in name), name.upper(), ""])
        valid = self.valid(spec.parameters, spec.parameters)
        assert isinstance(valid, dict)
        roll = r.random()
        if roll < 0.3:
            return name, valid if r.random() < 0.5 else json.dumps(valid, ensure_ascii=False)
        if roll < 0.65:
            mutated = self.mutate(valid)
            if r.random() < 0.5:
                return name, mutated
            try:
                return name, json.dumps(mutated, ensure_ascii=False)
            except (ValueError, RecursionError):  # too deep for json.dumps: the value, then
                return name, mutated
        return name, self.adversarial_text(valid)


# -- the run ----------------------------------------------------------------------------------


@dataclass(kw_only=True)
class FuzzReport:
    calls: int = 0
    crashes: int = 0
    hangs: int = 0
    schema_violations: int = 0
    unanswered: int = 0
    unserialisable: int = 0
    reached_tools: int = 0
    reached: Counter[str] = field(default_factory=Counter)
    """Calls each tool received."""
    statuses: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def calls_per_second(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0

    @property
    def clean(self) -> bool:
        return not (
            self.crashes
            or self.hangs
            or self.schema_violations
            or self.unanswered
            or self.unserialisable
        )


def _model(
    fuzzer: Fuzzer, tools: list[Tool], budget: list[int], emitted: list[str]
) -> FunctionModel:
    rounds = [0]

    def turn(request: ModelRequest) -> ModelTurn | str:
        if isinstance(request.messages[-1], UserMessage):
            rounds[0] = 0
        rounds[0] += 1
        if budget[0] <= 0 or rounds[0] > ROUNDS_PER_TURN:
            return "done"
        calls = []
        for _ in range(min(CALLS_PER_ROUND, budget[0])):
            name, arguments = fuzzer.call(tools)
            call_id = f"f{len(emitted)}"
            emitted.append(call_id)
            calls.append(ScriptedCall(id=call_id, name=name, arguments=arguments))
        budget[0] -= len(calls)
        return ModelTurn(tool_calls=calls)

    return FunctionModel(turn)


def _check_turn(
    report: FuzzReport, events: list[BaseEvent], history: list[Any], ids: list[str]
) -> None:
    pending = Counter(e.id for e in events if isinstance(e, ToolCallEvent))
    terminal = Counter(e.id for e in events if isinstance(e, ToolResultEvent))
    results = Counter(m.call_id for m in history if isinstance(m, ToolResultMessage))
    asked = Counter(c.id for m in history if isinstance(m, AssistantMessage) for c in m.tool_calls)
    for call_id in ids:
        if not (pending[call_id] == terminal[call_id] == results[call_id] == asked[call_id] == 1):
            report.unanswered += 1
            report.problems.append(f"call {call_id} is not answered exactly once")
    for event in events:
        if isinstance(event, ToolResultEvent):
            report.statuses[event.status] += 1
        try:
            json.loads(event.model_dump_json())
        except ValueError as exc:
            report.unserialisable += 1
            report.problems.append(f"{type(event).__name__}: {exc}")
    for message in history:
        try:
            json.loads(message.model_dump_json())
        except ValueError as exc:
            report.unserialisable += 1
            report.problems.append(f"{type(message).__name__}: {exc}")


async def run_fuzz(
    *,
    calls: int,
    seed: int,
    state_dir: Path,
    mcp_tools: Sequence[Tool] = (),
    on_turn: Callable[[FuzzReport], None] | None = None,
) -> FuzzReport:
    """Fuzz `calls` tool calls; `mcp_tools` are real MCP tools to include (recorded)."""
    catalogue = Catalogue(tools=[])
    catalogue.tools = [
        *function_tools(catalogue),
        SchemaTool("fz_schema", STRICT_SCHEMA, catalogue),
        SchemaTool("fz_any", ANY_SCHEMA, catalogue),
        *(RecordedMcpTool(t, catalogue) for t in mcp_tools),
    ]
    fuzzer = Fuzzer(seed)
    report = FuzzReport()
    knobs = RuntimeKnobs(
        max_iterations=ROUNDS_PER_TURN + 1, loop_detection=LoopDetectionKnobs(enabled=False)
    )
    store = SqliteSessionStore.open(state_dir)
    budget = [calls]
    started = time.perf_counter()
    try:
        turn = 0
        while budget[0] > 0:
            emitted: list[str] = []
            agent = Agent(
                model=_model(fuzzer, catalogue.tools, budget, emitted),
                tools=catalogue.tools,
                autonomy="full",
                knobs=knobs,
            )
            events: list[BaseEvent] = []
            try:
                result = await asyncio.wait_for(
                    agent.run(f"fuzz turn {turn}", sink=events.append), TURN_BOUND_S
                )
            except TimeoutError:
                report.hangs += 1
                report.problems.append(f"turn {turn} did not end within {TURN_BOUND_S:g} s")
                continue
            except Exception as exc:  # what the suite exists to find
                report.crashes += 1
                report.problems.append(f"turn {turn}: {type(exc).__name__}: {exc}"[:500])
                continue
            finally:
                report.calls += len(emitted)
                turn += 1
            if result.outcome.status == "error":
                report.crashes += 1
                report.problems.append(f"turn {turn}: ended in error: {result.outcome.error}")
            _check_turn(report, events, result.history, emitted)
            store.append(f"fuzz-{seed}-{turn}", result.history)
            if on_turn is not None:
                on_turn(report)
    finally:
        store.close()
    report.seconds = time.perf_counter() - started
    report.schema_violations = len(catalogue.violations)
    report.problems += [f"{name} received {what}" for name, what in catalogue.violations[:20]]
    report.reached_tools = sum(catalogue.received.values())
    report.reached = catalogue.received
    return report
