"""Tools from typed Python functions: `@tool` builds a `FunctionTool`.

Everything is worked out once, when the decorator runs: the signature, the type hints, the
docstring, the argument model and its JSON Schema, the examples. A definition mistake is a
`ToolDefinitionError` (a `heron.ConfigurationError`, and a `TypeError`) at import time that
lists every problem at once, never a surprise on the first call.

Arguments are checked by a pydantic model in strict JSON mode (`model_validate_json(...,
strict=True)` on the canonical JSON of the arguments). JSON mode is what lets strict validation
still turn RFC 3339 strings into `datetime`/`date` and values into `Enum` members, while `"5"`,
`1.0` and `true` are refused for an `int`. The model's fields are named `p0, p1, …` with the
parameter names as aliases, so a parameter may be called `json`, `schema` or `_hidden` without
colliding with pydantic's own attribute rules.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import re
import time
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, assert_never, overload

import pydantic
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic_core import to_jsonable_python

from heron._support.canonical import canonical_json
from heron.tools.definition import (
    RUNTIME_ARG_NOTES,
    CallApproval,
    RunsIn,
    RuntimeArg,
    ToolAnnotations,
    ToolArgumentsError,
    ToolContext,
    ToolDefinitionError,
    ToolExample,
    ToolResult,
    ToolSpec,
)
from heron.tools.docstrings import parse_docstring
from heron.tools.parameters import parameter_fields, visible_schema
from heron.tools.validation import check_input, pydantic_problems
from heron.tools.worker_process import (
    ProcessTarget,
    process_target,
    run_in_process,
    unpicklable_types,
)

__all__ = ["FunctionTool", "tool"]

MAX_EXAMPLES = 5

log = logging.getLogger("heron.tools")

# `approved` is runtime-only, so the model never sees it. `channel` stays visible: it is a delivery
# default the model may override (see RUNTIME_ARG_NOTES), the runtime only fills it when empty.
_HIDDEN_RUNTIME_ARGS: frozenset[str] = frozenset({"approved"})

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# `json.dumps` with an option builds an encoder per call; validation runs once per tool call.
_ARGUMENTS_ENCODER = json.JSONEncoder(allow_nan=False)


class _ThreadRun:
    """One call running in a worker thread; `finished` is set by the thread itself."""

    __slots__ = ("abandoned_at", "call_id", "finished", "tool")

    def __init__(self, tool: str, call_id: str) -> None:
        self.tool = tool
        self.call_id = call_id
        self.finished = False
        self.abandoned_at: float | None = None

    def call(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        try:
            return fn(**kwargs)
        finally:
            self.finished = True
            if self.abandoned_at is not None:
                log.info(
                    "'%s' (call %s) finished in its worker thread %.1f s after heron stopped "
                    "waiting for it; its result was discarded",
                    self.tool,
                    self.call_id,
                    time.monotonic() - self.abandoned_at,
                )


class FunctionTool:
    """A `Tool` made from a typed function by `@tool`. The function stays callable as `.fn`.

    Sync functions run in a worker thread so a slow one cannot stall the event loop;
    `@tool(thread=False)` runs cheap ones inline, and `@tool(runs_in="process")` runs them in a
    worker process heron can kill. The choice is part of the definition: `spec.runs_in` is
    `"thread"`, `"process"` or `"event_loop"`. A thread cannot be interrupted, so a timed-out or
    cancelled call to a threaded function is reported at once, as still running, while the
    function keeps running to its end; `still_running()` names such calls until they return.
    """

    __slots__ = (
        "_abandoned",
        "_context_param",
        "_fields",
        "_is_async",
        "_judge",
        "_model",
        "_spec",
        "_target",
        "fn",
    )

    def __init__(
        self,
        *,
        fn: Callable[..., Any],
        spec: ToolSpec,
        model: type[BaseModel],
        fields: Mapping[str, str],
        context_param: str | None,
        target: ProcessTarget | None = None,
        approval_for: Callable[[Mapping[str, Any]], CallApproval | None] | None = None,
    ) -> None:
        self.fn = fn
        self._judge = approval_for
        self._spec = spec
        self._model = model
        self._fields = fields  # parameter name -> model field name
        self._context_param = context_param
        self._is_async = inspect.iscoroutinefunction(fn)
        self._target = target
        self._abandoned: list[_ThreadRun] = []

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def __repr__(self) -> str:
        return f"FunctionTool({self._spec.name!r})"

    def approval_for(self, arguments: Mapping[str, Any]) -> CallApproval | None:
        """What this call needs before it runs (`@tool(approval_for=...)`, given the validated
        arguments); None when the tool's approval does not depend on the call."""
        return self._judge(arguments) if self._judge is not None else None

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validate raw JSON-like arguments strictly; return python values keyed by parameter.

        Defaults are applied. Runtime arguments (`approved`) are accepted although the model does
        not see them. Raises `ToolArgumentsError` listing every problem.
        """
        check_input(self._spec.name, arguments)
        try:
            text = _ARGUMENTS_ENCODER.encode(
                arguments if type(arguments) is dict else dict(arguments)
            )
        except (TypeError, ValueError) as exc:
            raise ToolArgumentsError(self._spec.name, [f"arguments are not JSON: {exc}"]) from None
        try:
            # extra="forbid" reaches nested models too: an unknown key is refused, never dropped.
            instance = self._model.model_validate_json(text, strict=True, extra="forbid")
        except ValidationError as exc:
            problems = pydantic_problems(exc.errors(), arguments)
            raise ToolArgumentsError(self._spec.name, problems) from None
        return {param: getattr(instance, field) for param, field in self._fields.items()}

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Call the function with validated arguments; exceptions propagate to the dispatcher."""
        kwargs = dict(arguments)
        if self._context_param is not None:
            kwargs[self._context_param] = ctx
        if self._is_async:
            value = await typing.cast("Awaitable[Any]", self.fn(**kwargs))
            return _to_result(value)
        match self._spec.runs_in:
            case "thread":
                value = await self._in_thread(kwargs, ctx.call_id)
            case "process":
                assert self._target is not None  # checked when the tool was defined
                value = await run_in_process(self._target, kwargs)
            case "event_loop":
                value = self.fn(**kwargs)
            case unknown:
                assert_never(unknown)
        return _to_result(value)

    async def _in_thread(self, kwargs: dict[str, Any], call_id: str) -> Any:
        """Like `asyncio.to_thread`, but remembers a call it was cancelled out of (a timeout, an
        interrupt) while the thread still runs."""
        loop = asyncio.get_running_loop()
        run = _ThreadRun(self._spec.name, call_id)
        context = contextvars.copy_context()
        try:
            return await loop.run_in_executor(None, context.run, run.call, self.fn, kwargs)
        except asyncio.CancelledError:
            if not run.finished:
                run.abandoned_at = time.monotonic()
                self._abandoned.append(run)
            raise

    def still_running(self) -> tuple[str, ...]:
        """The ids of this tool's calls heron stopped waiting for (a timeout, an interrupt) whose
        worker thread has not returned yet. Empty unless `spec.runs_in == "thread"`."""
        if not self._abandoned:
            return ()
        self._abandoned = [run for run in self._abandoned if not run.finished]
        return tuple(run.call_id for run in self._abandoned)


def _to_result(value: object) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult.ok(value)
    if value is None:
        return ToolResult.ok("")
    data = to_jsonable_python(value)
    return ToolResult.ok(json.dumps(data, ensure_ascii=False, separators=(",", ":")), data=data)


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    destructive: bool = False,
    idempotent: bool = False,
    irreversible: bool = False,
    open_world: bool = False,
    requires_approval: bool = False,
    workspace_only: bool = False,
    owner: str = "user",
    examples: Sequence[Mapping[str, Any] | ToolExample] = (),
    runtime_args: Sequence[RuntimeArg] = (),
    thread: bool = True,
    runs_in: RunsIn | None = None,
    timeout_s: float | None = None,
    approval_for: Callable[[Mapping[str, Any]], CallApproval | None] | None = None,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    destructive: bool = False,
    idempotent: bool = False,
    irreversible: bool = False,
    open_world: bool = False,
    requires_approval: bool = False,
    workspace_only: bool = False,
    owner: str = "user",
    examples: Sequence[Mapping[str, Any] | ToolExample] = (),
    runtime_args: Sequence[RuntimeArg] = (),
    thread: bool = True,
    runs_in: RunsIn | None = None,
    timeout_s: float | None = None,
    approval_for: Callable[[Mapping[str, Any]], CallApproval | None] | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a tool from a typed sync or async function: `@tool` or `@tool(read_only=True, ...)`.

    The schema comes from the type hints, the description from the docstring (Google `Args:` /
    `Returns:` / `Raises:` or Sphinx `:param x:` fields document the parameters). A parameter
    annotated `ToolContext` receives the call context and is not part of the schema. `examples`
    (at most five) are validated now and rendered into the description. A sync function runs in
    a worker thread (`spec.runs_in == "thread"`); `thread=False` runs it on the event loop
    instead, and `runs_in="process"` in a worker process heron can kill on a timeout or a
    cancel (module-level function, picklable arguments and result, no `ToolContext`).
    `timeout_s` is the tool's own time limit per call (`spec.timeout_s`). `approval_for`
    judges each call from its validated arguments (its risk tier, whether it may run with no
    operator: a `CallApproval`) for the approval gate. Definition mistakes raise one
    `ToolDefinitionError` listing every problem.
    """
    annotations = ToolAnnotations(
        read_only=read_only,
        destructive=destructive,
        idempotent=idempotent,
        irreversible=irreversible,
        open_world=open_world,
        requires_approval=requires_approval,
        workspace_only=workspace_only,
    )

    placement = _Placement(thread=thread, runs_in=runs_in, timeout_s=timeout_s)
    # By function definition, for this decorator's own arguments: a decorator made once (at
    # import) and applied to a closure per session skips the introspection and its key.
    known: dict[Any, tuple[tuple[Any, ...], _Definition]] = {}

    def build(function: Callable[..., Any]) -> FunctionTool:
        code = getattr(function, "__code__", None)
        shape = _shape(function)
        hit = known.get(code)
        if hit is not None and _same(hit[0], shape):
            return _from_definition(function, hit[1], approval_for)
        definition = _define(
            function, name, description, annotations, owner, examples, runtime_args, placement
        )
        if code is not None:
            if len(known) >= _MAX_SHAPES:
                known.clear()
            known[code] = (shape, definition)
        return _from_definition(function, definition, approval_for)

    return build if fn is None else build(fn)


_MAX_SHAPES = 8


def _shape(fn: Callable[..., Any]) -> tuple[Any, ...]:
    """What of a function `_define` reads besides its code: the same code with another shape
    (other defaults, a renamed function) is defined again."""
    kwdefaults = getattr(fn, "__kwdefaults__", None)
    return (
        getattr(fn, "__defaults__", None),
        tuple(sorted(kwdefaults.items())) if kwdefaults else None,
        tuple(getattr(fn, "__annotations__", {}).items()),
        getattr(fn, "__doc__", None),
        getattr(fn, "__name__", None),
    )


def _same(known: tuple[Any, ...], shape: tuple[Any, ...]) -> bool:
    try:
        return bool(known == shape)
    except Exception:  # a default that cannot be compared (an array): defined again
        return False


def _define(
    fn: Callable[..., Any],
    name: str | None,
    description: str | None,
    annotations: ToolAnnotations,
    owner: str,
    examples: Sequence[Mapping[str, Any] | ToolExample],
    runtime_args: Sequence[RuntimeArg],
    placement: _Placement,
) -> _Definition:
    key = _definition_key(
        fn, name, description, annotations, owner, examples, runtime_args, placement
    )
    defined = _DEFINITIONS.get(key) if key is not None else None
    if defined is not None:
        return defined
    problems: list[str] = []
    tool_name = name if name is not None else str(getattr(fn, "__name__", ""))
    if not _NAME.match(tool_name):
        problems.append(f"tool name {tool_name!r} must be 1-64 letters, digits, '_' or '-'")
    if annotations.read_only and (annotations.destructive or annotations.irreversible):
        problems.append("read_only contradicts destructive/irreversible")
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except (TypeError, ValueError, NameError) as exc:
        raise ToolDefinitionError([str(exc)], heading=f"cannot make a tool from {fn!r}") from exc

    doc_text, doc_params, doc_sections = parse_docstring(inspect.getdoc(fn))
    for documented in doc_params.keys() - signature.parameters.keys():
        problems.append(f"docstring documents '{documented}', which is not a parameter")
    parameters = list(signature.parameters.values())
    fields, definitions, context_param = parameter_fields(parameters, hints, doc_params, problems)
    declared = tuple(dict.fromkeys(runtime_args))
    for arg in declared:
        if arg not in RUNTIME_ARG_NOTES:
            known = ", ".join(RUNTIME_ARG_NOTES)
            problems.append(f"unknown runtime argument {arg!r} (known: {known})")
        elif arg not in fields:
            problems.append(f"runtime argument '{arg}' needs a typed parameter of that name")
        elif signature.parameters[arg].default is inspect.Parameter.empty:
            problems.append(f"runtime argument '{arg}' needs a default (the model may omit it)")
    hidden = [arg for arg in declared if arg in _HIDDEN_RUNTIME_ARGS]
    runs_in = _runs_in(fn, placement, problems)
    target: ProcessTarget | None = None
    if runs_in == "process":
        target = _process_checks(fn, parameters, hints, context_param, problems)

    main_text = (description or doc_text).strip()
    if not main_text:
        problems.append("no description: write a docstring or pass description=")
    if placement.timeout_s is not None and not 0 < placement.timeout_s < float("inf"):
        problems.append(
            f"timeout_s must be a finite number of seconds > 0, not {placement.timeout_s!r}"
        )
    parsed = [e if isinstance(e, ToolExample) else ToolExample(arguments=e) for e in examples]
    if len(parsed) > MAX_EXAMPLES:
        problems.append(f"{len(parsed)} examples given; at most {MAX_EXAMPLES} are allowed")

    model: type[BaseModel] | None = None
    schema: dict[str, Any] = {}
    if len(definitions) == len(fields):  # every parameter was usable
        try:
            model = create_model(
                f"{tool_name}_arguments",
                __config__=ConfigDict(extra="forbid", strict=True),
                **definitions,
            )
            schema = visible_schema(model, hidden)
        except pydantic.PydanticUserError as exc:
            model = None
            problems.append(f"cannot build the argument model: {str(exc).splitlines()[0]}")
    built: FunctionTool | None = None
    if model is not None:
        notes = [RUNTIME_ARG_NOTES[arg] for arg in declared if arg in RUNTIME_ARG_NOTES]
        sections = [main_text, *doc_sections, *notes]
        if parsed:
            sections.append("Examples:\n" + "\n".join(map(_render_example, parsed)))
        spec = ToolSpec(
            name=tool_name,
            description="\n\n".join(sections),
            parameters=schema,
            annotations=annotations,
            owner=owner,
            runtime_args=declared,
            channel_aware="channel" in declared,
            runs_in=runs_in,
            timeout_s=placement.timeout_s,
        )
        definition = (spec, model, fields, context_param, target)
        built = _from_definition(fn, definition, None)
    for number, example in enumerate(parsed, start=1):
        leaked = sorted(set(example.arguments) & set(hidden))
        if leaked:
            problems.append(f"example {number}: sets runtime-only argument {', '.join(leaked)}")
        elif built is not None:
            try:
                built.validate(example.arguments)
            except ToolArgumentsError as exc:
                problems.append(f"example {number}: " + "; ".join(exc.problems))
    if problems or built is None:
        raise ToolDefinitionError(problems, heading=f"cannot make a tool from {tool_name or fn!r}")
    if key is not None:
        if len(_DEFINITIONS) >= _MAX_DEFINITIONS:
            _DEFINITIONS.clear()
        _DEFINITIONS[key] = definition
    return definition


_Definition = tuple[ToolSpec, type[BaseModel], Mapping[str, str], str | None, ProcessTarget | None]
_DEFINITIONS: dict[tuple[Any, ...], _Definition] = {}
"""What `_define` worked out, by function definition and decorator arguments: a tool defined in
a function with a decorator made there too is introspected once, not on every call."""
_MAX_DEFINITIONS = 1024


def _from_definition(
    fn: Callable[..., Any],
    definition: _Definition,
    approval_for: Callable[[Mapping[str, Any]], CallApproval | None] | None,
) -> FunctionTool:
    spec, model, fields, context_param, target = definition
    return FunctionTool(
        fn=fn,
        spec=spec,
        model=model,
        fields=fields,
        context_param=context_param,
        target=target,
        approval_for=approval_for,
    )


def _definition_key(
    fn: Callable[..., Any],
    name: str | None,
    description: str | None,
    annotations: ToolAnnotations,
    owner: str,
    examples: Sequence[Mapping[str, Any] | ToolExample],
    runtime_args: Sequence[RuntimeArg],
    placement: _Placement,
) -> tuple[Any, ...] | None:
    """Everything `_define` reads from a definition, as a key; None when a part is not
    hashable (a list default): such a tool is introspected each time."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    try:
        shown = tuple(
            (canonical_json(e.arguments), e.description)
            if isinstance(e, ToolExample)
            else (canonical_json(e), None)
            for e in examples
        )
    except (TypeError, ValueError):
        return None
    kwdefaults = getattr(fn, "__kwdefaults__", None)
    key = (
        code,
        getattr(fn, "__defaults__", None),
        tuple(sorted(kwdefaults.items())) if kwdefaults else None,
        tuple(getattr(fn, "__annotations__", {}).items()),
        getattr(fn, "__doc__", None),
        getattr(fn, "__name__", None),
        name,
        description,
        annotations,
        owner,
        tuple(runtime_args),
        placement,
        shown,
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


@dataclass(frozen=True, slots=True)
class _Placement:
    """Where and how long a function tool runs, as the decorator was told."""

    thread: bool
    runs_in: RunsIn | None
    timeout_s: float | None


def _runs_in(fn: Callable[..., Any], placement: _Placement, problems: list[str]) -> RunsIn:
    """A coroutine function is awaited on the loop; a plain `def` goes to a thread unless told."""
    is_async = inspect.iscoroutinefunction(fn)
    asked = placement.runs_in
    if asked is None:
        return "thread" if placement.thread and not is_async else "event_loop"
    if asked not in typing.get_args(RunsIn):
        known = ", ".join(map(repr, typing.get_args(RunsIn)))
        problems.append(f"unknown runs_in {asked!r} (known: {known})")
        return "event_loop"
    if is_async and asked != "event_loop":
        problems.append(f"runs_in={asked!r} is for a plain def; an async def runs on the loop")
    if not placement.thread and asked != "event_loop":
        problems.append(f"thread=False contradicts runs_in={asked!r}")
    return asked


def _process_checks(
    fn: Callable[..., Any],
    parameters: Sequence[inspect.Parameter],
    hints: Mapping[str, Any],
    context_param: str | None,
    problems: list[str],
) -> ProcessTarget | None:
    """What a worker process needs: a function it can import, picklable argument and result
    types, and no `ToolContext` (its callbacks live in heron's process)."""
    target, found = process_target(fn)
    problems.extend(found)
    if context_param is not None:
        problems.append(
            f"parameter '{context_param}': a runs_in='process' tool cannot take the ToolContext "
            "(progress and call_tool do not cross a process boundary)"
        )
    for param in parameters:
        for where in unpicklable_types(hints.get(param.name), set()):
            problems.append(
                f"parameter '{param.name}': type {where}, so its values cannot be pickled to the "
                "worker process; define it at module level in an importable module"
            )
    for where in unpicklable_types(hints.get("return"), set()):
        problems.append(
            f"return type {where}, so it cannot be pickled back from the worker process; define "
            "it at module level in an importable module"
        )
    return target


def _render_example(example: ToolExample) -> str:
    line = "- " + json.dumps(dict(example.arguments), ensure_ascii=False)
    return f"{line}  — {example.description}" if example.description else line
