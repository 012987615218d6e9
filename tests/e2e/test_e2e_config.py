"""Invocation and configuration mistakes exit 2 with a clear message; valid files need no flags."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from support.cli import Heron, stable

ECHO_TURNS: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "configured"}}]},
    {"text": "Done from config.", "expect": {"last_message_contains": "configured"}},
]


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        ("turns: [\n", "while parsing"),
        ("turns:\n  - tool_calls: [{nme: echo}]\n", "turns.0.tool_calls.0.name"),
        ("protocol: smoke-signals\nturns: []\n", "protocol"),
        ("turns: " + "[" * 900 + "]" * 900 + "\n", "nested too deeply"),
    ],
    ids=["yaml-syntax", "unknown-field", "bad-protocol", "nested-too-deeply"],
)
def test_a_malformed_model_script_exits_2_naming_the_file(
    heron: Heron, script: str, problem: str
) -> None:
    heron.write("broken.yaml", script)
    done = heron.run_turn("scripted:broken.yaml")

    assert done.code == 2
    assert done.stdout == ""
    assert done.stderr.startswith("heron: cannot load model script broken.yaml:"), done.stderr
    assert problem in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_model_script_that_is_not_a_regular_file_is_refused_at_once(
    heron: Heron, kind: str
) -> None:
    # A FIFO held the read for ever, /dev/zero filled the memory.
    if kind == "fifo":
        os.mkfifo(heron.root / "pipe.yaml")
        model = "scripted:pipe.yaml"
    else:
        model = "scripted:/dev/zero"
    done = heron.run_turn(model)
    assert done.code == 2
    assert "is not a regular file" in done.stderr and "Traceback" not in done.stderr


def test_a_missing_model_script_exits_2(heron: Heron) -> None:
    done = heron.run("run", "hi", "--model", "scripted:nowhere.yaml")

    assert done.code == 2
    assert "cannot load model script nowhere.yaml" in done.stderr


def test_an_unknown_model_prefix_exits_2_and_says_what_is_supported(heron: Heron) -> None:
    done = heron.run_turn("nope:gpt-4o")

    assert done.code == 2
    assert done.stdout == ""
    assert done.stderr.startswith("heron: unknown model provider 'nope'"), done.stderr
    assert "openai, anthropic, ollama, openai-compatible, scripted" in done.stderr


def test_a_provider_without_its_api_key_exits_2_naming_the_variable(heron: Heron) -> None:
    heron.env.pop("OPENAI_API_KEY", None)
    done = heron.run_turn("openai:gpt-4o")

    assert done.code == 2
    assert "set OPENAI_API_KEY" in done.stderr


def test_a_tools_file_that_does_not_exist_exits_2(heron: Heron) -> None:
    done = heron.run(
        "run", "hi", "--model", heron.script("s.yaml", ECHO_TURNS), "--tools", "missing.py"
    )

    assert done.code == 2
    assert "cannot load tools" in done.stderr and "missing.py" in done.stderr


def test_an_unknown_key_in_heron_toml_exits_2_naming_the_key_and_file(heron: Heron) -> None:
    heron.write("heron.toml", '[agent]\nmodel = "scripted:s.yaml"\nmax_iteration = 3\n')
    done = heron.run("run", "hi")

    assert done.code == 2
    assert done.stdout == ""
    assert "configuration error" in done.stderr
    assert "heron.toml" in done.stderr
    assert "unknown key 'agent.max_iteration'" in done.stderr


def test_heron_toml_in_the_working_directory_supplies_model_and_tools(heron: Heron) -> None:
    heron.tools()
    heron.script("script.yaml", ECHO_TURNS)
    heron.write(
        "heron.toml",
        '[agent]\nmodel = "scripted:script.yaml"\n\n[tools]\nmodules = ["tools.py"]\n',
    )

    jsonl = heron.run("run", "echo it", "--events", "jsonl")
    assert jsonl.code == 0, jsonl.stdout + jsonl.stderr
    events = stable(jsonl.events())
    assert [e["type"] for e in events] == ["tool_call", "tool_result", "text_delta", "final"]
    assert (events[-1]["text"], events[-1]["reason"]) == ("Done from config.", "answer")

    # The default renderer: one line per call and per result, then the answer text.
    pretty = heron.run("run", "echo it")
    assert pretty.code == 0, pretty.stdout + pretty.stderr
    lines = pretty.stdout.splitlines()
    assert lines[0] == "→ echo configured"
    assert lines[1].startswith("✔ echo configured  ok · ")
    assert lines[-1] == "Done from config."


def test_the_default_renderer_shows_the_models_arguments_as_text_never_as_markup(
    heron: Heron,
) -> None:
    # Rich markup in a model-written argument once raised MarkupError in the renderer
    # (a traceback, the call's line lost) or was rendered (a hyperlink the model chose).
    path = "[/bold] notes [link=http://attacker.example]x[/link].txt"
    model = heron.script(
        "s.yaml",
        [{"tool_calls": [{"name": "read_file", "arguments": {"path": path}}]}, {"text": "ok"}],
    )
    done = heron.run("run", "read it", "--model", model, "--builtin", "perception")

    assert done.code == 0, done.stdout + done.stderr
    assert "MarkupError" not in done.stderr and "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"→ read_file {path}"
    assert lines[1].startswith(f"✘ read_file {path}  error · ")


def test_escape_sequences_from_the_model_never_reach_the_terminal(heron: Heron) -> None:
    # Clear the screen, set the title, a hyperlink, an 8-bit CSI, a bidi override: raw, each
    # would act on the operator's terminal.
    nasty = "a\x1b[2J\x1b]0;pwn\x07\x1b]8;;http://attacker.example\x1b\\x\x9b2J\u202eb"
    model = heron.script(
        "s.yaml",
        [
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": nasty, "content": nasty}}
                ]
            },
            {"text": f"said {nasty}"},
        ],
    )
    flags = ("--model", model, "--builtin", "execution", "--session", "esc")
    done = heron.run("run", "write it", *flags)
    shown = heron.run("sessions", "show", "esc")

    assert done.code == 0 and shown.code == 0, done.stderr + shown.stderr
    for text in (done.stdout, done.stderr, shown.stdout):
        assert not {"\x1b", "\x9b", "\x07", "\u202e"} & set(text), text
    assert "said a\\u001b[2J\\u001b]0;pwn" in done.stdout
    assert "\\u009b2J\\u202eb" in done.stdout
    assert not list(heron.root.glob("a*"))  # denied: nothing written


def test_json_lines_events_carry_escape_sequences_as_json_escapes_only(heron: Heron) -> None:
    # JSON leaves C1 controls and bidi overrides raw; on a terminal tailing the events they act.
    nasty = "x\x9b2J\u202eb\x1b]0;pwn\x07"
    model = heron.script("s.yaml", [{"text": f"said {nasty}"}])
    done = heron.run("run", "say it", "--model", model, "--events", "jsonl")

    assert done.code == 0, done.stderr
    assert not {"\x1b", "\x9b", "\x07", "\u202e"} & set(done.stdout), done.stdout
    events = [json.loads(line) for line in done.stdout.splitlines()]
    said = "".join(e["text"] for e in events if e["type"] == "text_delta")
    assert said == f"said {nasty}"  # the same value, decoded


def test_user_config_is_read_from_xdg_config_home_and_the_project_file_overrides_it(
    heron: Heron,
) -> None:
    heron.tools()
    model = heron.script(
        "script.yaml",
        [
            {"tool_calls": [{"id": "c1", "name": "make_file", "arguments": {"name": "made.txt"}}]},
            {"text": "Finished."},
        ],
    )
    user_config = heron.config_home / "heron" / "config.toml"
    heron.write(str(user_config), '[agent]\nautonomy = "full"\nmodel = "scripted:elsewhere.yaml"\n')
    heron.write("heron.toml", f'[agent]\nmodel = "{model}"\n\n[tools]\nmodules = ["tools.py"]\n')

    done = heron.run("run", "make a file", "--events", "jsonl", "--non-interactive")

    assert done.code == 0, done.stdout + done.stderr
    results = [e for e in done.events() if e["type"] == "tool_result"]
    assert [r["status"] for r in results] == ["ok"]
    assert (heron.root / "made.txt").exists()


def test_a_tools_file_given_in_heron_toml_and_again_as_a_flag_exits_2_naming_the_tool(
    heron: Heron,
) -> None:
    heron.write("heron.toml", '[tools]\nmodules = ["tools.py"]\n')
    done = heron.run_turn(heron.script("s.yaml", ECHO_TURNS))

    assert done.code == 2
    assert done.stdout == ""
    assert done.stderr.startswith("heron: cannot build the tool set:"), done.stderr
    assert "'read_first' is registered twice" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_budget_in_heron_toml_ends_the_run_with_a_graceful_summary(heron: Heron) -> None:
    heron.tools()
    # One tool call uses the budget up; the next model call is the summary request, offered no
    # tools (the scripted turn would fail its expectation otherwise).
    heron.script(
        "script.yaml",
        [
            {"tool_calls": [{"id": "e0", "name": "echo", "arguments": {"text": "x0"}}]},
            {"text": "Summary: one echo done.", "expect": {"tools_exclude": ["echo"]}},
        ],
    )
    heron.write(
        "heron.toml",
        '[agent]\nmodel = "scripted:script.yaml"\n\n[tools]\nmodules = ["tools.py"]\n\n'
        "[budgets]\ntool_calls = 1\n",
    )
    done = heron.run("run", "echo twice", "--events", "jsonl")
    assert done.code == 0, done.stdout + done.stderr
    events = done.events()
    assert [e["status"] for e in events if e["type"] == "tool_result"] == ["ok"]
    final = events[-1]
    assert (final["type"], final["reason"], final["text"]) == (
        "final",
        "budget_exhausted",
        "Summary: one echo done.",
    )


def test_the_result_bound_follows_the_context_window_when_unset(heron: Heron) -> None:
    from heron.config import load_config

    heron.write("heron.toml", '[agent]\nmodel = "openai:gpt-4o"\ncontext_window_tokens = 400000\n')
    config = load_config(project_dir=heron.root, include_user=False)
    assert 200_000 < config.result_limit() < 400_000  # a quarter of the window, in characters
    heron.write("heron.toml", '[agent]\nmodel = "openai:gpt-4o"\ncontext_window_tokens = 8000\n')
    small = load_config(project_dir=heron.root, include_user=False)
    assert small.result_limit() == 24_000  # never below the spill preview and its marker
    heron.write("heron.toml", "[agent]\nmax_tool_result_chars = 123\n")
    assert load_config(project_dir=heron.root, include_user=False).result_limit() == 123
