from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import threading
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from heron.tools.definition import (
    RUNTIME_ARG_NOTES,
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolDefinitionError,
    ToolExample,
    ToolResult,
)
from heron.tools.function_tool import FunctionTool, tool

CTX = ToolContext(call_id="call-1", turn_id="turn-1", channel="console")


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Window(BaseModel):
    since: dt.datetime
    until: dt.datetime | None = None


class Point(TypedDict):
    x: int
    y: int


@dataclasses.dataclass
class Size:
    width: int
    height: int


def problems_of(fn_tool: FunctionTool, arguments: dict[str, Any]) -> list[str]:
    with pytest.raises(ToolArgumentsError) as caught:
        fn_tool.validate(arguments)
    assert caught.value.tool == fn_tool.spec.name
    return caught.value.problems


def definition_error(fn: Any, **options: Any) -> str:
    with pytest.raises(ToolDefinitionError) as caught:
        tool(**options)(fn)
    assert isinstance(caught.value, TypeError)  # what callers caught before the error family
    lines = str(caught.value).splitlines()
    assert lines[1:] == [f"- {problem}" for problem in caught.value.problems]  # every problem
    return str(caught.value)


@tool
def count_words(path: str, limit: int, ratio: float = 0.5, verbose: bool = False) -> int:
    """Count words in a file."""
    return 0


# --- schema -----------------------------------------------------------------------------------


def test_scalar_parameters_become_a_closed_object_schema_without_titles() -> None:
    assert count_words.spec.parameters == {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "limit": {"type": "integer"},
            "ratio": {"type": "number", "default": 0.5},
            "verbose": {"type": "boolean", "default": False},
        },
        "required": ["path", "limit"],
        "additionalProperties": False,
    }


def test_containers_literals_enums_and_dates_map_to_json_schema() -> None:
    @tool
    def shapes(
        tags: list[str],
        scores: dict[str, float],
        mode: Literal["fast", "safe"],
        colour: Colour,
        when: dt.datetime,
        day: dt.date | None = None,
    ) -> None:
        """Shapes."""

    props = shapes.spec.parameters["properties"]
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["scores"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert props["mode"] == {"type": "string", "enum": ["fast", "safe"]}
    assert props["colour"] == {"$ref": "#/$defs/Colour"}
    assert shapes.spec.parameters["$defs"]["Colour"] == {"type": "string", "enum": ["red", "blue"]}
    assert props["when"] == {"type": "string", "format": "date-time"}
    assert props["day"] == {
        "anyOf": [{"type": "string", "format": "date"}, {"type": "null"}],
        "default": None,
    }


def test_pydantic_models_and_typeddicts_become_nested_objects() -> None:
    @tool
    def nested(window: Window, point: Point) -> None:
        """Nested."""

    defs = nested.spec.parameters["$defs"]
    assert defs["Window"]["required"] == ["since"]
    assert defs["Window"]["properties"]["since"] == {"type": "string", "format": "date-time"}
    assert defs["Point"] == {
        "type": "object",
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
        "required": ["x", "y"],
        "additionalProperties": False,
    }


def test_annotated_field_constraints_reach_the_schema_and_its_description_wins() -> None:
    @tool
    def page(size: Annotated[int, Field(ge=1, le=100, description="Rows per page.")]) -> None:
        """Page.

        Args:
            size: Ignored because the Field says it better.
        """

    assert page.spec.parameters["properties"]["size"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
        "description": "Rows per page.",
    }


def test_parameter_names_that_clash_with_pydantic_attributes_are_usable() -> None:
    @tool
    def clash(json: str, schema: int, _hidden: bool = False) -> None:
        """Clash."""

    assert list(clash.spec.parameters["properties"]) == ["json", "schema", "_hidden"]
    assert clash.validate({"json": "j", "schema": 1}) == {
        "json": "j",
        "schema": 1,
        "_hidden": False,
    }


# --- docstrings -------------------------------------------------------------------------------


def test_google_docstring_sections_become_descriptions() -> None:
    @tool
    def read_file(path: str, max_bytes: int = 4096) -> str:
        """Read a text file from the workspace.

        Use it before editing a file. Binary files are refused.

        Args:
            path (str): Workspace-relative path,
                for example `src/app.py`.
            max_bytes: Stop after this many bytes.

        Returns:
            The file's text.

        Raises:
            FileNotFoundError: If the file does not exist.
        """
        return ""

    spec = read_file.spec
    assert spec.description == (
        "Read a text file from the workspace.\n\n"
        "Use it before editing a file. Binary files are refused.\n\n"
        "Returns: The file's text.\n\n"
        "Raises:\n- FileNotFoundError: If the file does not exist."
    )
    props = spec.parameters["properties"]
    assert props["path"]["description"] == "Workspace-relative path, for example `src/app.py`."
    assert props["max_bytes"]["description"] == "Stop after this many bytes."


def test_sphinx_docstring_fields_become_descriptions() -> None:
    @tool
    def send(to: str, body: str) -> str:
        """Send a message.

        :func:`send` never retries.

        :param str to: E.164 phone number,
            like `+12025551234`.
        :param body: Message text.
        :type body: str
        :returns: The message id.
        :rtype: str
        :raises ValueError: If the number is invalid.
        """
        return ""

    assert send.spec.description == (
        "Send a message.\n\n"
        ":func:`send` never retries.\n\n"
        "Returns: The message id.\n\n"
        "Raises:\n- ValueError: If the number is invalid."
    )
    props = send.spec.parameters["properties"]
    assert props["to"]["description"] == "E.164 phone number, like `+12025551234`."
    assert props["body"]["description"] == "Message text."


# --- strict validation ------------------------------------------------------------------------


def test_a_numeric_string_is_not_an_integer() -> None:
    assert problems_of(count_words, {"path": "a", "limit": "5"}) == [
        "limit: expected integer, got string '5'"
    ]


def test_a_whole_float_is_not_an_integer() -> None:
    assert problems_of(count_words, {"path": "a", "limit": 1.0}) == [
        "limit: expected integer, got number 1.0"
    ]


def test_booleans_are_neither_integers_nor_numbers() -> None:
    assert problems_of(count_words, {"path": "a", "limit": True, "ratio": True}) == [
        "limit: expected integer, got boolean true",
        "ratio: expected number, got boolean true",
    ]


def test_unexpected_and_missing_arguments_are_named_together() -> None:
    assert problems_of(count_words, {"colour": "red"}) == [
        "missing required argument 'path'",
        "missing required argument 'limit'",
        "unexpected argument 'colour'",
    ]


def test_validate_applies_defaults_and_keys_values_by_parameter() -> None:
    assert count_words.validate({"path": "a", "limit": 3, "ratio": 2}) == {
        "path": "a",
        "limit": 3,
        "ratio": 2.0,
        "verbose": False,
    }


def test_arguments_that_are_not_json_are_refused() -> None:
    problems = problems_of(count_words, {"path": "a", "limit": 1, "ratio": float("nan")})
    other = problems_of(count_words, {"path": "a", "limit": 1, "ratio": {1.5}})

    assert problems == ["ratio: expected a finite number, got NaN"]
    assert other == ["ratio: expected a JSON value, got set"]


def test_numbers_no_double_holds_are_refused_like_a_type_mismatch() -> None:
    for value, shown in [
        (float("inf"), "Infinity"),
        (float("-inf"), "-Infinity"),
        (10**400, "integer of about 401 digits"),
    ]:
        problems = problems_of(count_words, {"path": "a", "limit": 1, "ratio": value})
        assert problems == [f"ratio: expected a finite number, got {shown}"]
    huge_limit = problems_of(count_words, {"path": "a", "limit": -(10**400)})
    assert huge_limit == ["limit: expected a finite number, got integer of about 401 digits"]


@tool
def schedule(when: dt.datetime, day: dt.date, colour: Colour, mode: Literal["a", "b"]) -> None:
    """Schedule."""


def test_rfc3339_strings_become_datetime_and_date_values() -> None:
    validated = schedule.validate(
        {"when": "2024-03-15T14:30:00Z", "day": "2024-03-15", "colour": "blue", "mode": "a"}
    )

    assert validated["when"] == dt.datetime(2024, 3, 15, 14, 30, tzinfo=dt.UTC)
    assert validated["day"] == dt.date(2024, 3, 15)
    assert validated["colour"] is Colour.BLUE


def test_dates_enums_and_literals_refuse_other_values_readably() -> None:
    problems = problems_of(
        schedule, {"when": 1710513000, "day": "yesterday", "colour": "green", "mode": "c"}
    )

    assert problems == [
        "when: expected RFC 3339 date-time string, got integer 1710513000",
        "day: expected date string (YYYY-MM-DD), got string 'yesterday'",
        "colour: expected 'red' or 'blue', got string 'green'",
        "mode: expected 'a' or 'b', got string 'c'",
    ]


@tool
def search(window: Window, points: list[Point], key: str | int | None = None) -> None:
    """Search."""


def test_nested_models_are_validated_into_instances() -> None:
    validated = search.validate(
        {"window": {"since": "2024-03-15T00:00:00+01:00"}, "points": [{"x": 1, "y": 2}]}
    )

    assert isinstance(validated["window"], Window)
    assert validated["window"].since.utcoffset() == dt.timedelta(hours=1)
    assert validated["points"] == [{"x": 1, "y": 2}]


def test_nested_problems_name_their_path_and_union_branches_merge() -> None:
    problems = problems_of(
        search,
        {"window": {}, "points": [{"x": 1, "y": "2"}, {"x": 1, "y": 2, "z": 3}], "key": True},
    )

    assert problems == [
        "window: missing required field 'since'",
        "points[0].y: expected integer, got string '2'",
        "points[1]: unexpected field 'z'",
        "key: expected string or integer, got boolean true",
    ]


# --- execution --------------------------------------------------------------------------------


async def test_a_tool_context_parameter_is_injected_and_kept_out_of_the_schema() -> None:
    @tool
    def whoami(prefix: str, context: ToolContext) -> str:
        """Who am I."""
        return f"{prefix}{context.call_id}"

    assert list(whoami.spec.parameters["properties"]) == ["prefix"]
    assert problems_of(whoami, {"prefix": "x", "context": {}}) == ["unexpected argument 'context'"]
    result = await whoami.execute(whoami.validate({"prefix": "id="}), CTX)
    assert result == ToolResult.ok("id=call-1")


async def test_sync_functions_run_in_a_worker_thread_and_the_spec_says_so() -> None:
    @tool
    def where() -> int:
        """Where."""
        return threading.get_ident()

    result = await where.execute({}, CTX)

    assert result.data != threading.get_ident()
    assert where.spec.runs_in == "thread"


async def test_thread_false_runs_a_sync_function_inline_on_the_event_loop() -> None:
    @tool(thread=False)
    def where() -> int:
        """Where."""
        return threading.get_ident()

    result = await where.execute({}, CTX)

    assert result.data == threading.get_ident()
    assert where.spec.runs_in == "event_loop"


async def test_async_functions_are_awaited_on_the_event_loop() -> None:
    @tool
    async def where(offset: int) -> int:
        """Where."""
        return threading.get_ident() + offset

    result = await where.execute({"offset": 0}, CTX)

    assert result.data == threading.get_ident()
    assert where.spec.runs_in == "event_loop"


def test_where_a_tool_runs_stays_out_of_what_the_model_sees() -> None:
    @tool
    def where() -> int:
        """Where."""
        return 0

    assert "runs_in" not in where.spec.to_wire()
    assert "thread" not in where.spec.description


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (ToolResult.fail("nope"), ToolResult.fail("nope")),
        ("plain text", ToolResult.ok("plain text")),
        (None, ToolResult.ok("")),
        ({"a": [1, "é"]}, ToolResult.ok('{"a":[1,"é"]}', data={"a": [1, "é"]})),
        ([1, 2], ToolResult.ok("[1,2]", data=[1, 2])),
        (3.5, ToolResult.ok("3.5", data=3.5)),
        (
            Size(width=2, height=3),
            ToolResult.ok('{"width":2,"height":3}', data={"width": 2, "height": 3}),
        ),
        (
            Window(since=dt.datetime(2024, 3, 15, tzinfo=dt.UTC)),
            ToolResult.ok(
                '{"since":"2024-03-15T00:00:00Z","until":null}',
                data={"since": "2024-03-15T00:00:00Z", "until": None},
            ),
        ),
    ],
)
async def test_return_values_map_to_tool_results(value: object, expected: ToolResult) -> None:
    @tool(thread=False)
    def give() -> Any:
        """Give."""
        return value

    assert await give.execute({}, CTX) == expected


async def test_exceptions_from_the_function_propagate_to_the_dispatcher() -> None:
    @tool
    async def broken() -> None:
        """Broken."""
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        await broken.execute({}, CTX)


# --- runtime arguments and examples -----------------------------------------------------------


def test_approved_is_hidden_from_the_model_but_accepted_and_declared() -> None:
    @tool(runtime_args=["approved"], requires_approval=True)
    def wipe(path: str, approved: bool = False) -> None:
        """Delete a file."""

    spec = wipe.spec
    assert list(spec.parameters["properties"]) == ["path"]
    assert spec.runtime_args == ("approved",)
    assert spec.description.endswith(RUNTIME_ARG_NOTES["approved"])
    assert not spec.channel_aware
    assert wipe.validate({"path": "a", "approved": True}) == {"path": "a", "approved": True}
    assert wipe.validate({"path": "a"}) == {"path": "a", "approved": False}


def test_channel_runtime_arg_makes_the_tool_channel_aware_and_stays_overridable() -> None:
    @tool(runtime_args=["channel"])
    def notify(text: str, channel: str | None = None) -> None:
        """Notify the user."""

    assert notify.spec.channel_aware
    assert RUNTIME_ARG_NOTES["channel"] in notify.spec.description
    assert "channel" in notify.spec.parameters["properties"]
    assert notify.spec.parameters["required"] == ["text"]


def test_runtime_args_need_a_matching_parameter_with_a_default() -> None:
    def wipe(path: str, approved: bool) -> None:
        """Delete a file."""

    message = definition_error(wipe, runtime_args=["approved", "channel", "sudo"])

    assert "runtime argument 'approved' needs a default" in message
    assert "runtime argument 'channel' needs a typed parameter of that name" in message
    assert "unknown runtime argument 'sudo'" in message


def test_examples_are_rendered_into_the_description() -> None:
    @tool(examples=[{"path": "README.md"}, ToolExample(arguments={"path": "a b"}, description="x")])
    def read(path: str) -> str:
        """Read a file."""
        return ""

    assert read.spec.description == (
        'Read a file.\n\nExamples:\n- {"path": "README.md"}\n- {"path": "a b"}  — x'
    )


def test_a_broken_example_is_a_definition_error() -> None:
    def read(path: str, approved: bool = False) -> str:
        """Read a file."""
        return ""

    message = definition_error(
        read,
        runtime_args=["approved"],
        examples=[{"path": 1}, {"path": "a", "approved": True}],
    )

    assert "example 1: path: expected string, got integer 1" in message
    assert "example 2: sets runtime-only argument approved" in message


def test_every_definition_problem_is_listed_in_one_error() -> None:
    def bad(a, *rest: int, b: set[int], c: dict[int, str], **more: str) -> None:  # type: ignore[no-untyped-def]
        pass

    message = definition_error(bad, examples=[{}] * 6, name="bad name")

    for expected in (
        "tool name 'bad name' must be",
        "parameter 'a': missing type hint",
        "parameter 'rest': *args/**kwargs",
        "parameter 'b': unsupported type set[int]",
        "parameter 'c': unsupported type dict key int",
        "parameter 'more': *args/**kwargs",
        "no description",
        "6 examples given; at most 5",
    ):
        assert expected in message


def test_a_docstring_that_documents_a_missing_parameter_is_a_definition_error() -> None:
    def stale(path: str) -> None:
        """Stale.

        Args:
            file: Renamed long ago.
        """

    assert "docstring documents 'file', which is not a parameter" in definition_error(stale)


# --- the tool object --------------------------------------------------------------------------


def test_decorator_options_reach_the_spec() -> None:
    @tool(
        name="fetch_page",
        description="Fetch a web page (5-10 s on large sites).",
        read_only=True,
        idempotent=True,
        open_world=True,
        owner="plugin:web",
    )
    def fetch(url: str) -> str:
        """Docstring text the explicit description replaces."""
        return url

    spec = fetch.spec
    assert spec.name == "fetch_page"
    assert spec.description == "Fetch a web page (5-10 s on large sites)."
    assert spec.owner == "plugin:web"
    assert spec.annotations.read_only and spec.annotations.idempotent
    assert spec.annotations.open_world and not spec.annotations.destructive


def test_the_function_stays_callable_as_fn_and_the_tool_itself_is_not_callable() -> None:
    assert count_words.fn("a", 1) == 0
    assert not callable(count_words)
    assert isinstance(count_words, Tool)


async def test_unknown_keys_in_nested_models_are_refused_not_dropped() -> None:
    class Point(BaseModel):
        x: int
        y: int

    @tool
    def plot(point: Point) -> str:
        """Plot a point.

        Args:
            point: Where.
        """
        return f"{point.x},{point.y}"

    assert plot.spec.parameters["$defs"]["Point"]["additionalProperties"] is False
    with pytest.raises(ToolArgumentsError) as info:
        plot.validate({"point": {"x": 1, "y": 2, "z": 3}})
    assert any("z" in problem for problem in info.value.problems)


_GREET = tool(name="greet", read_only=True, examples=[{"who": "Ada"}])


def _greeter(session: str, punctuation: str = "!") -> FunctionTool:
    """A tool closing over one session, made with a decorator made once (as `heron serve`'s
    session tools are)."""

    @_GREET
    async def greet(who: str, loud: bool = punctuation == "!") -> str:
        """Greet someone.

        Args:
            who: Whom to greet.
            loud: Shout.
        """
        return f"{session}: hello {who}{punctuation if loud else '.'}"

    return greet


async def test_a_decorator_made_once_binds_each_closure_and_shares_one_definition() -> None:
    one, two = _greeter("alpha"), _greeter("beta")
    # One definition (spec, argument model) for both, each running its own closure.
    assert one.spec is two.spec and one.fn is not two.fn
    assert (await one.execute(one.validate({"who": "Ada"}), CTX)).output == "alpha: hello Ada!"
    assert (await two.execute(two.validate({"who": "Bo"}), CTX)).output == "beta: hello Bo!"
    # The same code with another default is another definition: its schema says so.
    quiet = _greeter("gamma", punctuation="?")
    assert quiet.spec is not one.spec
    assert quiet.spec.parameters["properties"]["loud"]["default"] is False
    assert one.spec.parameters["properties"]["loud"]["default"] is True
    assert (await quiet.execute(quiet.validate({"who": "Cy"}), CTX)).output == "gamma: hello Cy."
