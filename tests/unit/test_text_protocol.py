"""Text tool-call protocol: parsing every accepted format, rejecting non-calls, rendering."""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

import pytest

from heron.models.text_protocol import (
    MALFORMED_FALLBACK_ANSWER,
    MAX_MALFORMED_RETRIES,
    PARSE_ERROR_FEEDBACK,
    TextParseResult,
    TextToolCall,
    parse_text_tool_calls,
    render_assistant_tool_calls,
    render_tool_protocol_prompt,
    render_tool_results,
)

KNOWN = ("shell", "file_read", "memory_recall", "get_time")


def parse(text: str) -> TextParseResult:
    return parse_text_tool_calls(text, KNOWN)


def call(name: str, arguments: dict[str, Any], call_id: str | None = None) -> TextToolCall:
    return TextToolCall(name=name, arguments=arguments, call_id=call_id)


SHELL_LS = call("shell", {"command": "ls"})


# -- tag blocks -------------------------------------------------------------------------------


def test_tool_call_block_becomes_a_call_and_surrounding_text_stays_visible() -> None:
    result = parse(
        'Let me look.\n<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}\n'
        "</tool_call>\nBack soon."
    )
    assert result == TextParseResult(
        text="Let me look.\n\nBack soon.", calls=(SHELL_LS,), issue=None
    )


@pytest.mark.parametrize("tag", ["tool_calls", "toolcall", "tool-call", "function_call"])
def test_every_tool_call_tag_alias_is_accepted(tag: str) -> None:
    result = parse(f'<{tag}>{{"name": "shell", "arguments": {{"command": "ls"}}}}</{tag}>')
    assert result.calls == (SHELL_LS,)
    assert result.text == ""


def test_tags_match_case_insensitively() -> None:
    assert parse(
        '<TOOL_CALL>{"name": "shell", "arguments": {"command": "ls"}}</Tool_Call>'
    ).calls == (SHELL_LS,)


def test_parameters_key_is_accepted_in_place_of_arguments() -> None:
    result = parse('<tool_call>{"name": "shell", "parameters": {"command": "ls"}}</tool_call>')
    assert result.calls == (SHELL_LS,)


def test_openai_function_wrapper_inside_a_tag_carries_its_id() -> None:
    result = parse(
        '<tool_call>{"id": "call_7", "type": "function", '
        '"function": {"name": "shell", "arguments": "{\\"command\\": \\"ls\\"}"}}</tool_call>'
    )
    assert result.calls == (call("shell", {"command": "ls"}, "call_7"),)


@pytest.mark.parametrize("key", ["id", "call_id", "tool_call_id"])
def test_call_id_is_taken_from_any_id_key(key: str) -> None:
    result = parse(
        f'<tool_call>{{"name": "get_time", "arguments": {{}}, "{key}": "c-1"}}</tool_call>'
    )
    assert result.calls == (call("get_time", {}, "c-1"),)


def test_tool_calls_plural_tag_with_a_json_array_keeps_order() -> None:
    result = parse(
        '<tool_calls>[{"name": "file_read", "arguments": {"path": "a"}}, '
        '{"name": "shell", "arguments": {"command": "ls"}}]</tool_calls>'
    )
    assert [c.name for c in result.calls] == ["file_read", "shell"]


def test_tool_calls_envelope_inside_a_tag_is_unpacked() -> None:
    result = parse(
        '<tool_call>{"tool_calls": [{"name": "shell", "arguments": {"command": "ls"}}]}</tool_call>'
    )
    assert result.calls == (SHELL_LS,)


def test_multiple_blocks_keep_the_order_they_were_written_in() -> None:
    result = parse(
        '<tool_call>{"name": "memory_recall", "arguments": {"query": "x"}}</tool_call>\n'
        "then\n"
        '<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call>\n'
        '<tool_call>{"name": "file_read", "arguments": {"path": "p"}}</tool_call>'
    )
    assert [c.name for c in result.calls] == ["memory_recall", "shell", "file_read"]
    assert result.text == "then"


def test_wrapper_tag_around_individual_blocks_is_transparent() -> None:
    result = parse(
        "<tool_calls>\n"
        '<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>\n'
        "</tool_calls>\nDone."
    )
    assert result.calls == (SHELL_LS, call("get_time", {}))
    assert result.text == "Done."


def test_string_arguments_are_json_decoded() -> None:
    result = parse(
        '<tool_call>{"name": "shell", "arguments": "{\\"command\\": \\"ls\\"}"}</tool_call>'
    )
    assert result.calls == (SHELL_LS,)


def test_double_encoded_string_arguments_are_unwrapped() -> None:
    double = json.dumps(json.dumps({"command": "ls"}))
    payload = json.dumps({"name": "shell", "arguments": double})
    assert parse(f"<tool_call>{payload}</tool_call>").calls == (SHELL_LS,)


def test_missing_arguments_mean_an_empty_object() -> None:
    assert parse('<tool_call>{"name": "get_time"}</tool_call>').calls == (call("get_time", {}),)


def test_missing_close_tag_at_the_end_recovers_the_json_object() -> None:
    result = parse('Checking.\n<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}')
    assert result == TextParseResult(text="Checking.", calls=(SHELL_LS,), issue=None)


def test_close_tag_inside_a_json_string_does_not_end_the_block() -> None:
    result = parse(
        '<tool_call>{"name": "shell", "arguments": {"command": "echo </tool_call>"}}</tool_call>'
    )
    assert result.calls == (call("shell", {"command": "echo </tool_call>"}),)
    assert result.text == ""


def test_stray_closing_brace_before_the_close_tag_is_tolerated() -> None:
    result = parse('<tool_call>{"name": "shell", "arguments": {"command": "ls"}}}</tool_call>')
    assert result == TextParseResult(text="", calls=(SHELL_LS,), issue=None)


def test_json_body_wrapped_in_a_code_fence_inside_the_tag_is_read() -> None:
    result = parse(
        '<tool_call>\n```json\n{"name": "shell", "arguments": {"command": "ls"}}\n```\n</tool_call>'
    )
    assert result == TextParseResult(text="", calls=(SHELL_LS,), issue=None)


def test_qwen_coder_function_body_inside_a_tag_is_read() -> None:
    result = parse(
        "<tool_call>\n<function=shell>\n<parameter=command>\nls -la\n</parameter>\n"
        "<parameter=timeout>\n30\n</parameter>\n</function>\n</tool_call>"
    )
    assert result.calls == (call("shell", {"command": "ls -la", "timeout": 30}),)


def test_glm_arg_key_body_inside_a_tag_is_read() -> None:
    result = parse(
        "<tool_call>file_read\n<arg_key>path</arg_key>\n<arg_value>notes.md</arg_value>\n</tool_call>"
    )
    assert result.calls == (call("file_read", {"path": "notes.md"}),)


# -- names ------------------------------------------------------------------------------------


def test_names_match_case_insensitively_and_come_back_canonical() -> None:
    result = parse('<tool_call>{"name": "File_Read", "arguments": {"path": "a"}}</tool_call>')
    assert result.calls == (call("file_read", {"path": "a"}),)


def test_unknown_name_in_a_tag_block_is_returned_so_the_engine_can_answer_it() -> None:
    result = parse('<tool_call>{"name": "launch_rockets", "arguments": {}}</tool_call>')
    assert result == TextParseResult(text="", calls=(call("launch_rockets", {}),), issue=None)


@pytest.mark.parametrize("prefix", ["functions.", "default_api.", "Functions."])
def test_known_prefix_is_stripped_when_the_rest_is_a_known_tool(prefix: str) -> None:
    result = parse(f'<tool_call>{{"name": "{prefix}shell", "arguments": {{}}}}</tool_call>')
    assert result.calls == (call("shell", {}),)


def test_prefixed_name_whose_rest_is_unknown_is_kept_as_written() -> None:
    result = parse('<tool_call>{"name": "functions.nope", "arguments": {}}</tool_call>')
    assert result.calls == (call("functions.nope", {}),)


def test_no_alias_guessing_maps_other_names_onto_known_tools() -> None:
    result = parse_text_tool_calls(
        '<tool_call>{"name": "web_search", "arguments": {"q": "x"}}</tool_call>'
        '<tool_call>{"name": "srv__domains.list", "arguments": {}}</tool_call>',
        ("shell", "list"),
    )
    assert [c.name for c in result.calls] == ["web_search", "srv__domains.list"]


# -- whole-reply JSON -------------------------------------------------------------------------


def test_openai_style_envelope_gives_calls_and_content_as_text() -> None:
    reply = json.dumps(
        {
            "content": "Checking the time.",
            "tool_calls": [
                {"id": "c1", "function": {"name": "get_time", "arguments": "{}"}},
                {"name": "shell", "arguments": {"command": "ls"}},
            ],
        }
    )
    result = parse(reply)
    assert result == TextParseResult(
        text="Checking the time.", calls=(call("get_time", {}, "c1"), SHELL_LS), issue=None
    )


def test_whole_reply_single_call_object_to_a_known_tool_is_a_call() -> None:
    assert parse('{"name": "shell", "parameters": {"command": "ls"}}') == TextParseResult(
        text="", calls=(SHELL_LS,), issue=None
    )


def test_whole_reply_call_object_naming_an_unknown_tool_is_an_ordinary_answer() -> None:
    reply = '{"name": "Ada", "arguments": {"age": 36}}'
    assert parse(reply) == TextParseResult(text=reply, calls=(), issue=None)


def test_whole_reply_array_of_calls_is_accepted_only_if_every_item_is_a_call() -> None:
    calls = '[{"name": "shell", "arguments": {"command": "ls"}}, {"name": "get_time"}]'
    assert parse(calls).calls == ()
    both = (
        '[{"name": "shell", "arguments": {"command": "ls"}}, {"name": "get_time", "arguments": {}}]'
    )
    assert parse(both).calls == (SHELL_LS, call("get_time", {}))


def test_truncated_whole_reply_call_json_is_reported_as_an_issue() -> None:
    result = parse('{"name": "shell", "arguments": {"command": "ls"}')
    assert result.calls == ()
    assert result.text == ""
    assert result.issue is not None
    assert result.issue.startswith("reply looks like a JSON tool call but is invalid JSON: ")


def test_reply_that_is_only_a_json_fence_is_parsed_as_the_whole_reply() -> None:
    result = parse('```json\n{"name": "shell", "arguments": {"command": "ls"}}\n```')
    assert result == TextParseResult(text="", calls=(SHELL_LS,), issue=None)


# -- attribute XML ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("opening", "closing"),
    [
        ("", ""),
        ("<minimax:tool_call>\n", "\n</minimax:tool_call>"),
        ("<function_calls>\n", "\n</function_calls>"),
    ],
)
def test_invoke_elements_are_read_with_json_decoded_values(opening: str, closing: str) -> None:
    result = parse(
        f"Running it.\n{opening}"
        '<invoke name="shell">\n'
        '<parameter name="command">ls -la</parameter>\n'
        '<parameter name="timeout">30</parameter>\n'
        '<parameter name="env">{"A": "1"}</parameter>\n'
        "</invoke>"
        f"{closing}"
    )
    assert result == TextParseResult(
        text="Running it.",
        calls=(call("shell", {"command": "ls -la", "timeout": 30, "env": {"A": "1"}}),),
        issue=None,
    )


def test_invoke_for_an_unknown_tool_is_not_a_call_and_stays_visible() -> None:
    reply = '<invoke name="teleport"><parameter name="to">mars</parameter></invoke>'
    assert parse(reply) == TextParseResult(text=reply, calls=(), issue=None)


def test_invoke_without_its_close_is_an_issue() -> None:
    result = parse('<invoke name="shell"><parameter name="command">ls</parameter>')
    assert result.calls == ()
    assert result.issue == '<invoke name="shell"> element without </invoke>'


# -- fences -----------------------------------------------------------------------------------


@pytest.mark.parametrize("label", ["tool_call", "tool-call"])
def test_tool_call_fence_with_a_known_tool_is_a_call(label: str) -> None:
    result = parse(
        f"Sure.\n\n```{label}\n"
        '{"name": "shell", "arguments": {"command": "ls"}}\n'
        "```\n\nThanks."
    )
    assert result.calls == (SHELL_LS,)
    assert result.text == "Sure.\n\nThanks."


def test_tool_call_fence_with_an_unknown_tool_stays_visible_text() -> None:
    reply = 'Like so:\n```tool_call\n{"name": "teleport", "arguments": {}}\n```'
    assert parse(reply) == TextParseResult(text=reply, calls=(), issue=None)


# -- never executed ---------------------------------------------------------------------------


def test_prose_with_embedded_json_is_never_executed() -> None:
    reply = 'I would run {"name": "shell", "arguments": {"command": "rm -rf /"}} but I will not.'
    assert parse(reply) == TextParseResult(text=reply, calls=(), issue=None)


def test_tools_declaration_block_is_never_executed_and_stays_visible() -> None:
    reply = (
        '<tools>[{"name": "shell", "description": "Run a command", "parameters": {}}]</tools>\n'
        '<tools>{"name": "shell", "arguments": {"command": "ls"}}</tools>'
    )
    assert parse(reply) == TextParseResult(text=reply, calls=(), issue=None)


def test_calls_inside_a_tools_declaration_are_not_executed_but_later_blocks_are() -> None:
    result = parse(
        '<tools><tool_call>{"name": "shell", "arguments": {"command": "bad"}}</tool_call></tools>\n'
        '<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call>'
    )
    assert result.calls == (SHELL_LS,)
    assert result.text.startswith("<tools>")


def test_tags_in_inline_code_are_examples_not_calls_or_issues() -> None:
    reply = (
        "Wrap calls in `<tool_call>` tags, e.g. "
        '`<tool_call>{"name": "shell", "arguments": {}}</tool_call>`, '
        "and close with `</tool_call>`."
    )
    assert parse(reply) == TextParseResult(text=reply, calls=(), issue=None)


def test_backtick_inside_an_earlier_blocks_json_does_not_hide_the_next_block() -> None:
    result = parse(
        '<tool_call>{"name": "shell", "arguments": {"command": "echo `"}}</tool_call> '
        '<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call> `done`'
    )
    assert result.calls == (call("shell", {"command": "echo `"}), SHELL_LS)
    assert result.text == "`done`"


@pytest.mark.parametrize(
    "intro",
    [
        "For example, the format looks like this:",
        "Write calls like this (e.g. to list files):",
        "Here is an example:",
        "For instance:",
        "调用格式例如：",
    ],
)
def test_fenced_tool_call_blocks_presented_as_an_example_are_not_executed(intro: str) -> None:
    reply = (
        f"{intro}\n```xml\n"
        '<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call>\n'
        "```\nThat is all."
    )
    assert parse(reply) == TextParseResult(text=reply, calls=(), issue=None)


def test_a_fence_mixing_tool_call_blocks_with_code_is_an_example_not_a_call() -> None:
    reply = (
        "The parser reads this:\n```python\n"
        'REPLY = """\n'
        '<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call>\n'
        '"""\n'
        "```"
    )
    assert parse(reply) == TextParseResult(text=reply, calls=(), issue=None)


# -- fenced calls after prose -----------------------------------------------------------------


@pytest.mark.parametrize("label", ["xml", "json", "", "html", "text"])
def test_prose_then_a_fenced_tool_call_runs_the_call_and_drops_the_fence(label: str) -> None:
    result = parse(
        f"Let me list the files first.\n\n```{label}\n"
        '<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}\n</tool_call>\n'
        "```"
    )
    assert result == TextParseResult(
        text="Let me list the files first.", calls=(SHELL_LS,), issue=None
    )


def test_several_fenced_calls_with_prose_before_and_after_all_run_in_order() -> None:
    result = parse(
        "I'll check two things.\n"
        "```xml\n"
        '<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>\n'
        "```\n"
        "Then the memory:\n"
        "```\n"
        '<tool_call>{"name": "memory_recall", "arguments": {"query": "x"}}</tool_call>\n'
        "```\n"
        "Back soon."
    )
    assert result.calls == (
        SHELL_LS,
        call("get_time", {}),
        call("memory_recall", {"query": "x"}),
    )
    assert result.text == "I'll check two things.\n\nThen the memory:\n\nBack soon."
    assert result.issue is None
    assert "```" not in result.text and "<tool_call>" not in result.text


def test_a_fenced_call_that_does_not_parse_is_an_issue_not_visible_text() -> None:
    result = parse(
        'Reading it now.\n```xml\n<tool_call>{"name": "shell", "arguments": {ls}}</tool_call>\n```'
    )
    assert result.calls == ()
    assert result.text == "Reading it now."
    assert result.issue is not None and "invalid JSON" in result.issue


def test_an_unclosed_fence_around_a_call_still_runs_it() -> None:
    result = parse(
        'On it.\n```xml\n<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call>'
    )
    assert result == TextParseResult(text="On it.", calls=(SHELL_LS,), issue=None)


def test_a_file_named_example_is_not_example_prose() -> None:
    result = parse(
        "Reading example.py:\n```\n"
        '<tool_call>{"name": "file_read", "arguments": {"path": "example.py"}}</tool_call>\n'
        "```"
    )
    assert result.calls == (call("file_read", {"path": "example.py"}),)
    assert result.text == "Reading example.py:"


def test_plain_answer_passes_through_unchanged() -> None:
    assert parse("  The answer is 42.  ") == TextParseResult(
        text="The answer is 42.", calls=(), issue=None
    )


# -- reasoning and markers --------------------------------------------------------------------


def test_think_blocks_are_stripped_and_calls_inside_them_are_not_executed() -> None:
    result = parse(
        "<think>maybe "
        '<tool_call>{"name": "shell", "arguments": {"command": "x"}}</tool_call></think>'
        "<thinking>more</thinking>Hello."
    )
    assert result == TextParseResult(text="Hello.", calls=(), issue=None)


def test_reply_with_only_a_closing_think_tag_drops_the_reasoning_before_it() -> None:
    assert parse("the opener was in the template</think>\nHello.").text == "Hello."


def test_trailing_end_of_message_markers_are_stripped() -> None:
    result = parse('<tool_call>{"name": "get_time", "arguments": {}}</tool_call> <|eom|>\n<eom>')
    assert result == TextParseResult(text="", calls=(call("get_time", {}),), issue=None)


# -- malformed --------------------------------------------------------------------------------


def test_tag_block_with_invalid_json_is_an_issue_and_leaks_no_protocol_text() -> None:
    result = parse(
        'Let me check.\n<tool_call>{"name": "shell", "arguments": {"command": ls}}</tool_call>'
    )
    assert result.calls == ()
    assert result.text == "Let me check."
    assert result.issue is not None
    assert result.issue.startswith("<tool_call> block with invalid JSON: ")


def test_tag_block_without_a_name_is_an_issue() -> None:
    result = parse('<tool_call>{"arguments": {"command": "ls"}}</tool_call>')
    assert result == TextParseResult(
        text="", calls=(), issue="<tool_call> block with a call without a tool name"
    )


@pytest.mark.parametrize(
    "body",
    ["", "   ", "shell ls -la", '{"name": "shell", "arguments": "not json"}', "[]", '"shell"'],
)
def test_tag_block_that_yields_no_call_is_an_issue(body: str) -> None:
    result = parse(f"<tool_call>{body}</tool_call>")
    assert result.calls == ()
    assert result.issue is not None


def test_unclosed_tag_with_broken_json_is_an_issue() -> None:
    result = parse('Now:\n<tool_call>{"name": "shell", "arguments": {"comm')
    assert result.calls == ()
    assert result.text == "Now:"
    assert result.issue is not None


def test_fence_with_invalid_json_is_an_issue() -> None:
    result = parse("```tool_call\n{name: shell}\n```\nafter")
    assert result.calls == ()
    assert result.text == "after"
    assert result.issue is not None
    assert result.issue.startswith("```tool_call fence with invalid JSON: ")


def test_valid_blocks_are_kept_and_the_issue_is_set_when_another_block_is_malformed() -> None:
    result = parse(
        '<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call>\n'
        '<tool_call>{"name": "file_read", "arguments": {"path": </tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    )
    assert result.calls == (SHELL_LS, call("get_time", {}))
    assert result.issue is not None
    assert "invalid JSON" in result.issue
    assert result.text == ""


def test_tool_declaration_inside_a_call_tag_is_an_issue_not_a_call() -> None:
    result = parse(
        '<tool_call>{"name": "shell", "description": "Run", "parameters": {"type": "object"}}'
        "</tool_call>"
    )
    assert result.calls == ()
    assert result.issue is not None


# -- rendering --------------------------------------------------------------------------------


def test_protocol_prompt_lists_each_tool_with_its_schema() -> None:
    schema = MappingProxyType({"type": "object", "properties": {"command": {"type": "string"}}})
    prompt = render_tool_protocol_prompt(
        [
            {"name": "shell", "description": "Run a shell command.", "parameters": schema},
            {"name": "get_time", "description": "", "parameters": {}},
        ]
    )
    assert prompt.startswith("## Tool calling protocol\n")
    assert "<tool_call>" in prompt
    assert "#### shell\nRun a shell command.\n" in prompt
    assert json.dumps(dict(schema)) in prompt
    assert "#### get_time\n" in prompt
    assert prompt.index("#### shell") < prompt.index("#### get_time")


def test_protocol_prompt_is_empty_without_tools() -> None:
    assert render_tool_protocol_prompt([]) == ""


def test_protocol_prompt_example_parses_as_a_call_to_the_placeholder() -> None:
    # The example block in the prompt must itself be valid protocol, or models copy a broken shape.
    prompt = render_tool_protocol_prompt([{"name": "shell", "description": "", "parameters": {}}])
    example = prompt[
        prompt.index("<tool_call>") : prompt.index("</tool_call>") + len("</tool_call>")
    ]
    assert parse_text_tool_calls(example, ["<tool name>"]).calls == (
        call("<tool name>", {"<parameter>": "<value>"}),
    )


def test_tool_results_render_as_one_message_with_status_and_ids() -> None:
    rendered = render_tool_results(
        [("shell", "c1", "file.txt", False), ("file_read", 'id"2', "no such file", True)]
    )
    assert rendered == (
        "[Tool results]\n"
        '<tool_result name="shell" id="c1" status="ok">\nfile.txt\n</tool_result>\n'
        '<tool_result name="file_read" id="id&quot;2" status="error">\n'
        "no such file\n</tool_result>\n"
    )


def test_rendered_assistant_calls_parse_back_to_the_same_calls() -> None:
    calls = [
        ("c1", "shell", {"command": "echo </tool_call> `odd"}),
        ("c2", "file_read", MappingProxyType({"path": "ü.md", "nested": {"a": [1, 2]}})),
        ("c3", "get_time", {}),
    ]
    rendered = render_assistant_tool_calls("Let me check a few things.", calls)
    result = parse(rendered)
    assert result.text == "Let me check a few things."
    assert result.issue is None
    assert result.calls == tuple(
        call(name, dict(arguments), call_id) for call_id, name, arguments in calls
    )


def test_rendered_assistant_calls_without_text_or_id_parse_back() -> None:
    rendered = render_assistant_tool_calls("", [("", "get_time", {})])
    assert rendered.startswith("<tool_call>")
    assert parse(rendered) == TextParseResult(text="", calls=(call("get_time", {}),), issue=None)


def test_retry_constants_match_the_documented_contract() -> None:
    assert MAX_MALFORMED_RETRIES == 2
    assert PARSE_ERROR_FEEDBACK.startswith("[Tool call parse error]\n")
    assert "<tool_call>" in PARSE_ERROR_FEEDBACK
    # The fallback is shown to the user, so it must not itself look like protocol.
    assert parse(MALFORMED_FALLBACK_ANSWER) == TextParseResult(
        text=MALFORMED_FALLBACK_ANSWER, calls=(), issue=None
    )
