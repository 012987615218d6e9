"""`run_python`: code orchestration — a Python script in the sandbox that calls the agent's tools.

The script runs in a separate interpreter inside the agent's sandbox (same limits, timeout and
output handling as `shell`). The agent's tools are Python functions in it: `read_file(path="x")`
or `tools.read_file(path="x")`. Each call is one JSON line over a socket pair to heron, which
runs it through `ToolContext.call_tool` — the whole lifecycle: availability, validation,
approval, events, receipts. The reply is the tool's text output (a `str` subclass whose
`.json()` parses JSON output) or a `ToolError` raised inside the script, which the script may
catch. Intermediate data stays in the interpreter; only what the script prints returns to the
model, which is what saves context compared with one tool result per call.

Wire format, one JSON object per line: request `{"id": n, "tool": name, "arguments": {...}}`,
reply `{"id": n, "ok": true, "output": "..."}` or `{"id": n, "ok": false, "error": "..."}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from heron._support.limits import parse_json
from heron.sandbox.base import NetworkMode, Sandbox
from heron.tools.definition import Tool, ToolContext, ToolResult
from heron.tools.function_tool import tool
from heron.toolsets.shell import (
    HEAD_LINES,
    MAX_CHARS,
    MAX_LINES,
    OUTPUT_DIR,
    TAIL_LINES,
    agent_environment,
    describe_network,
    no_read_only_workspace,
    read_only_twin,
    render_run,
    with_network,
)

__all__ = ["BOOTSTRAP", "run_python_tool"]

TOOL_NAME = "run_python"
MAX_REQUEST_BYTES = 16 * 1024 * 1024
_LIBRARIES = ("numpy", "pandas", "sympy", "scipy", "matplotlib")

BOOTSTRAP = r'''
import json, keyword, linecache, os, socket, sys, traceback


class ToolError(Exception):
    """A tool call that failed or was refused; str(error) is heron's message."""

    def __init__(self, tool, message):
        super().__init__(message)
        self.tool = tool


class ToolOutput(str):
    """A tool's text output; .json() parses it when the tool returned JSON."""

    def json(self):
        return json.loads(self)


class _Channel:
    def __init__(self, fd):
        sock = socket.socket(fileno=fd)
        self._reader = sock.makefile("rb")
        self._writer = sock.makefile("wb")
        self._count = 0

    def call(self, name, arguments):
        self._count += 1
        request = {"id": self._count, "tool": name, "arguments": arguments}
        self._writer.write(json.dumps(request).encode("utf-8") + b"\n")
        self._writer.flush()
        line = self._reader.readline()
        if not line:
            raise ToolError(name, "heron closed the tool channel")
        reply = json.loads(line)
        if reply.get("ok"):
            return ToolOutput(reply.get("output", ""))
        raise ToolError(name, reply.get("error") or "the tool failed")


class _Tools:
    """The agent's tools: tools.<name>(**arguments) or tools.call(name, **arguments)."""

    def __init__(self, channel, names):
        self._channel = channel
        self._names = names

    def call(self, _name, /, **arguments):
        return self._channel.call(_name, arguments)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        channel = self._channel

        def call(*args, **arguments):
            if args:
                raise TypeError(f"{name}() takes keyword arguments only, e.g. {name}(path='x')")
            return channel.call(name, arguments)

        call.__name__ = name
        return call

    def __dir__(self):
        return sorted(self._names)


def _main():
    fd = int(os.environ.pop("HERON_TOOL_FD"))
    names = json.loads(os.environ.pop("HERON_TOOL_NAMES", "[]"))
    code = sys.stdin.buffer.read().decode("utf-8")
    sys.stdin = open(os.devnull)
    tools = _Tools(_Channel(fd), names)
    namespace = {"__name__": "__main__", "tools": tools, "ToolError": ToolError}
    for name in names:
        if name.isidentifier() and not keyword.iskeyword(name) and name not in namespace:
            namespace[name] = getattr(tools, name)
    filename = "<run_python>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        compiled = compile(code, filename, "exec")
    except SyntaxError as exc:
        sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
        sys.exit(1)
    try:
        exec(compiled, namespace)
    except SystemExit:
        raise
    except BaseException as exc:
        report = traceback.TracebackException.from_exception(exc)
        _hide_bootstrap(report, set())
        sys.stderr.write("".join(report.format()))
        sys.exit(1)


def _hide_bootstrap(report, seen):
    """Drop this bootstrap's frames (file "<string>") so tracebacks show the script's own."""
    if report is None or id(report) in seen:
        return
    seen.add(id(report))
    report.stack = traceback.StackSummary.from_list(
        [frame for frame in report.stack if frame.filename != "<string>"]
    )
    _hide_bootstrap(report.__cause__, seen)
    _hide_bootstrap(report.__context__, seen)


_main()
'''
"""The script heron runs in the sandbox (`python -I -u -X utf8 -c BOOTSTRAP`, code on stdin)."""


def _installed(python: str) -> list[str]:
    if python != sys.executable:
        return []
    return [name for name in _LIBRARIES if importlib.util.find_spec(name) is not None]


def _describe(
    sandbox: Sandbox,
    names: Sequence[str],
    libraries: Sequence[str],
    default_s: float,
    max_s: float,
    network: NetworkMode,
) -> str:
    callable_names = ", ".join(f"`{n}`" for n in names) if names else "none configured"
    libs = ", ".join(libraries) if libraries else "the standard library"
    return f"""Run a Python 3 script in the sandbox and get what it prints.

Use it for calculations and data work (available: {libs}), and for multi-step work over \
several tools: inside the script the agent's tools are Python functions — \
`read_file(path="notes.md")` or `tools.read_file(path="notes.md")`, keyword arguments only. A \
call returns the tool's text output (a `str`; `.json()` parses JSON output) and raises \
`ToolError` when the tool fails or is refused (catch it to carry on). Tool calls get the same \
checks and approvals as direct calls. Intermediate data stays in the script: print a summary, \
not raw data, since only printed output comes back. Callable tools: {callable_names}. \
`run_python` cannot call itself.

The script runs in the workspace as `__main__`, stdin is empty, sandbox: {sandbox.level}, \
{describe_network(network)}. Output is handled like `shell`: a status line (ending with the \
sandbox and network the script had), stdout and stderr (tracebacks); an exception or non-zero \
exit is a failed call with the output kept; a stream above {MAX_LINES} lines or \
{MAX_CHARS:,} characters shows its first {HEAD_LINES} and last {TAIL_LINES} lines and names a \
file under {OUTPUT_DIR}/ with the rest. Default timeout {default_s:g} s, at most \
{max_s:g} s."""


def run_python_tool(
    *,
    sandbox: Sandbox,
    workspace: Path,
    tool_names: Sequence[str] = (),
    python: str | None = None,
    default_timeout_s: float = 60,
    max_timeout_s: float = 600,
    env_passthrough: Sequence[str] = (),
    network: NetworkMode | None = None,
) -> Tool:
    """Build the `run_python` tool. `tool_names` are the agent tools defined as plain functions
    in the script (any tool can still be reached as `tools.<name>` or `tools.call(name)`; the
    runtime decides what is allowed). `python` defaults to heron's own interpreter. `network`
    is the network scripts get (default: the sandbox's own default)."""
    if not 0 < default_timeout_s <= max_timeout_s:
        raise ValueError("need 0 < default_timeout_s <= max_timeout_s")
    workspace = workspace.resolve()
    interpreter = python or sys.executable
    names = [n for n in dict.fromkeys(tool_names) if n != TOOL_NAME]
    sandbox = with_network(sandbox, network)
    read_only = read_only_twin(sandbox)
    mode = sandbox.network_mode
    description = _describe(
        sandbox, names, _installed(interpreter), default_timeout_s, max_timeout_s, mode
    )

    @tool(
        name=TOOL_NAME,
        description=description,
        destructive=True,
        open_world=mode == "host",
        workspace_only=mode != "host",
        owner="builtin",
        examples=[
            {
                "code": "import statistics\nprint(statistics.mean([3, 5, 8]))",
            },
            {
                "code": (
                    "sizes = {}\nfor name in ['a.md', 'b.md']:\n"
                    "    sizes[name] = len(read_file(path=name))\nprint(sizes)"
                ),
            },
        ],
    )
    async def run_python(code: str, ctx: ToolContext, timeout_s: float | None = None) -> ToolResult:
        """Run a Python script.

        Args:
            code: The complete script, e.g. `print(sum(range(10)))`.
            timeout_s: Seconds before the script is stopped, greater than 0 and at most the
                maximum stated above; the default applies when omitted.
        """
        if not code.strip():
            return ToolResult.fail("`code` is empty; nothing was run")
        timeout = default_timeout_s if timeout_s is None else timeout_s
        if not 0 < timeout <= max_timeout_s:
            return ToolResult.fail(
                f"timeout_s must be greater than 0 and at most {max_timeout_s:g}; nothing was run"
            )
        box = read_only if ctx.workspace_read_only else sandbox
        if box is None:
            return no_read_only_workspace(sandbox)
        ours, theirs = socket.socketpair()
        calls: list[str] = []
        try:
            env = agent_environment(workspace, env_passthrough)
            env |= {
                "HERON_TOOL_FD": str(theirs.fileno()),
                "HERON_TOOL_NAMES": json.dumps(names),
                "MPLBACKEND": "Agg",
            }
            reader, writer = await asyncio.open_unix_connection(sock=ours, limit=MAX_REQUEST_BYTES)
            server = asyncio.create_task(_serve(reader, writer, ctx, calls))
            try:
                result = await box.run(
                    [interpreter, "-I", "-u", "-X", "utf8", "-c", BOOTSTRAP],
                    cwd=workspace,
                    env=env,
                    timeout_s=timeout,
                    stdin=code.encode("utf-8"),
                    pass_fds=[theirs.fileno()],
                )
            finally:
                server.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await server
                writer.close()
                with contextlib.suppress(ConnectionError):
                    await writer.wait_closed()
        finally:
            ours.close()
            theirs.close()
        status, body, data = await asyncio.to_thread(
            render_run,
            result,
            workspace=workspace,
            label=f"python-{ctx.call_id}",
            timeout_s=timeout,
        )
        data["tool_calls"] = calls
        if result.ok:
            return ToolResult.ok(f"{status}\n{body}", data=data)
        return ToolResult.fail(status, output=body, data=data)

    return run_python


async def _serve(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    ctx: ToolContext,
    calls: list[str],
) -> None:
    """Answer the script's tool calls, one at a time, until it closes the channel."""
    while True:
        try:
            line = await reader.readline()
        except ValueError:  # a request above MAX_REQUEST_BYTES: framing is lost, stop serving
            return
        if not line:
            return
        reply = await _answer(line, ctx, calls)
        writer.write(json.dumps(reply).encode("utf-8") + b"\n")
        await writer.drain()


async def _answer(line: bytes, ctx: ToolContext, calls: list[str]) -> dict[str, Any]:
    try:
        request = parse_json(line)  # the script is the model's code: outside data
        ident = request["id"]
        name = request["tool"]
        arguments = request["arguments"]
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise TypeError("tool must be a string and arguments an object")
    except (ValueError, KeyError, TypeError) as exc:
        return {"id": None, "ok": False, "error": f"malformed tool request: {exc}"}
    if name == TOOL_NAME:
        return {"id": ident, "ok": False, "error": f"{TOOL_NAME} cannot call itself"}
    if ctx.call_tool is None:
        return {"id": ident, "ok": False, "error": "tool calls need a running agent turn"}
    calls.append(name)
    ctx.progress(f"{TOOL_NAME} → {name}")
    result = await ctx.call_tool(name, arguments)
    if result.success:
        return {"id": ident, "ok": True, "output": result.output}
    return {"id": ident, "ok": False, "error": result.error or result.output}
