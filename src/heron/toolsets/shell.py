"""The `shell` tool: a bash command in the workspace, checked by the command policy and run in
the agent's sandbox, with its history kept in a `ShellHistory` (SQLite by default:
`heron.toolsets.sqlite_shell_history`).

Layers, in order: the arguments are validated (no empty command, no NUL bytes, a timeout in
range; nothing is "fixed"); the command is parsed and classified (`CommandPolicy`), and the
approval gate learns the call's risk tier from the tool (`approval_for`): with no operator, a
low-risk command runs only where the sandbox contains heron's environment and the files outside
the workspace (`ContainmentReport.allows_unattended_low_risk`; elsewhere low counts as medium),
a medium-risk one only with `unattended_risk = "medium"`, a high-risk one never. In the tool,
low risk runs, medium risk runs only when the runtime approved the call (`approved`, which the
model cannot set), high risk is refused unless the deployment allows it; the command runs in
the sandbox with limits and a timeout; known secrets in its output become placeholders
(`heron.safety.secrets`); long output is cut to its head and tail with the full text saved
under the workspace's `.heron/outputs/`.

Fidelity: the command runs exactly as written (`bash -c <command>`). heron appends no flags.
What it does set — the environment below — is stated in the tool description and echoed in
every result's `data`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import os
import re
import shutil
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from heron.safety.command_policy import CommandPolicy, CommandVerdict
from heron.safety.redact import scrub_text
from heron.safety.secrets import known_secrets
from heron.sandbox.base import AGENT_ENV, NetworkMode, RunResult, Sandbox, SandboxUnavailable
from heron.sandbox.containment import ContainmentReport, containment_report
from heron.tools.definition import CallApproval, Tool, ToolContext, ToolResult
from heron.tools.function_tool import tool

__all__ = [
    "AGENT_ENV",
    "OUTPUT_DIR",
    "ShellHistory",
    "ShellHistoryEntry",
    "UnattendedRisk",
    "agent_environment",
    "describe_network",
    "no_read_only_workspace",
    "read_only_twin",
    "render_run",
    "shell_tool",
    "with_network",
]


SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
OUTPUT_DIR = Path(".heron") / "outputs"
"""Where full outputs are saved, relative to the workspace."""
HOME_DIR = Path(".heron") / "home"
"""`$HOME` for commands, relative to the workspace (so dotfiles stay out of the real home)."""

MAX_LINES = 200
MAX_CHARS = 10_000
HEAD_LINES = 50
TAIL_LINES = 50

HistoryOutcome = Literal["ran", "refused", "needs_approval"]
UnattendedRisk = Literal["low", "medium"]
"""The highest risk tier a command may have to run with no operator (`[tools.shell]
unattended_risk`); high risk never runs unattended."""


def agent_environment(workspace: Path, passthrough: Sequence[str] = ()) -> dict[str, str]:
    """The complete environment a command gets: `AGENT_ENV`, `PATH`, `HOME` and the named
    variables copied from heron's own environment (nothing else leaks in). A known secret
    (`heron.safety.secrets`: a provider key, a configured credential) is never passed: naming
    one raises `ValueError`."""
    secret = [name for name in passthrough if known_secrets().name_of(os.environ.get(name, ""))]
    if secret:
        raise ValueError(
            f"env_passthrough names {', '.join(secret)}: a secret heron holds for its own "
            "consumer (a provider, a connector, an MCP server) is passed to no command"
        )
    env = {"PATH": SYSTEM_PATH, "HOME": str(workspace / HOME_DIR), **AGENT_ENV}
    for name in passthrough:
        value = os.environ.get(name)
        if value is not None:
            env[name] = value
    return env


# --- history ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ShellHistoryEntry:
    """One command the shell tool was asked to run, and what became of it."""

    id: int
    at: dt.datetime
    agent: str | None
    command: str
    cwd: str
    outcome: HistoryOutcome
    risk: str
    exit_code: int | None
    duration_s: float | None
    timed_out: bool


class ShellHistory(Protocol):
    """The durable history of the shell tool (synchronous; a back-end failure raises
    `heron.errors.StoreError`)."""

    def record(
        self,
        *,
        command: str,
        cwd: Path,
        outcome: HistoryOutcome,
        risk: str,
        agent: str | None = None,
        exit_code: int | None = None,
        duration_s: float | None = None,
        timed_out: bool = False,
    ) -> None:
        """Append one command and what became of it, stamped with the current UTC time."""
        ...

    def recent(self, limit: int = 20, *, agent: str | None = None) -> list[ShellHistoryEntry]:
        """The newest `limit` entries (of one agent, if given), newest first."""
        ...


# --- output rendering ---------------------------------------------------------------------


def _clip(text: str) -> tuple[str, str, int, int] | None:
    """Head, tail, omitted lines and omitted characters, or None when `text` is short enough."""
    lines = text.splitlines(keepends=True)
    if len(lines) <= MAX_LINES and len(text) <= MAX_CHARS:
        return None
    if len(lines) > HEAD_LINES + TAIL_LINES:
        head, tail = "".join(lines[:HEAD_LINES]), "".join(lines[-TAIL_LINES:])
    else:  # few but very long lines
        head, tail = text[: MAX_CHARS // 2], text[-(MAX_CHARS // 2) :]
    head, tail = head[: MAX_CHARS // 2], tail[-(MAX_CHARS // 2) :]
    middle = text[len(head) : len(text) - len(tail)]
    return head, tail, middle.count("\n"), len(middle)


def _decode(raw: bytes, truncated: bool) -> str | None:
    """UTF-8 text, or None for binary output (NUL bytes, or mostly invalid UTF-8). Text with a
    few bytes that are not UTF-8 (an `ls` of an odd file name) shows each as `\\xNN`."""
    if b"\x00" in raw:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if truncated and exc.start >= len(raw) - 3:  # the capture limit split a character
            return _decode(raw[: exc.start], False)
    text = raw.decode("utf-8", "backslashreplace")
    return text if (len(text) - len(raw)) * 3 <= len(raw) else None  # ≤ 1 odd byte in 10


def _present(
    name: str, raw: bytes, total: int, save: Callable[[str, bytes], Path]
) -> tuple[str, dict[str, Any]]:
    """The text shown for one stream and facts about it for `data`."""
    info: dict[str, Any] = {"bytes": total}
    truncated = total > len(raw)
    notes: list[str] = []
    if truncated:
        info["capture_truncated"] = True
        notes.append(
            f"[capture limit reached: the command wrote {total:,} bytes to {name}; "
            f"the first {len(raw):,} were kept]"
        )
    text = _decode(raw, truncated)
    if text is None:
        path = save(f"{name}.bin", raw)
        info["binary"] = True
        info["saved_to"] = str(path)
        shown = f"[binary output: {total:,} bytes, not shown; saved to {path} in the workspace]"
        return "\n".join([shown, *notes]), info
    clipped = _clip(text)
    if clipped is None:
        if truncated:
            path = save(f"{name}.txt", raw)
            info["saved_to"] = str(path)
        return "\n".join([text.rstrip("\n"), *notes]) if notes else text, info
    head, tail, lines, chars = clipped
    path = save(f"{name}.txt", raw)
    info["saved_to"] = str(path)
    info["omitted_lines"] = lines
    marker = (
        f"[… {lines:,} lines ({chars:,} characters) omitted, full output saved to {path} in "
        "the workspace; read that file for the rest …]"
    )
    body = head if head.endswith("\n") else head + "\n"
    return "\n".join([body + marker, tail.rstrip("\n"), *notes]), info


def _status(result: RunResult, timeout_s: float) -> str:
    took = f"{result.duration_s:.2f} s"
    if result.timed_out:
        return (
            f"timed out after {timeout_s:g} s; the command and every process it started were "
            "stopped (SIGTERM, then SIGKILL)"
        )
    if result.killed_by_signal is not None:
        try:
            name = signal.Signals(result.killed_by_signal).name
        except ValueError:
            name = f"signal {result.killed_by_signal}"
        why = " (CPU time limit)" if name == "SIGXCPU" else ""
        return f"killed by {name}{why} after {took}"
    return f"exit code {result.exit_code} in {took}"


def _sandbox_line(result: RunResult) -> str:
    return f"[sandbox {result.level}, network {result.network}]"


def describe_network(mode: NetworkMode) -> str:
    """The network a sandbox gives commands, in words for a tool description."""
    return {
        "none": "network none (no network access)",
        "loopback": "network loopback (only a loopback interface of the sandbox's own)",
        "host": "network host (the host's network, its loopback services included)",
    }[mode]


def with_network(sandbox: Sandbox, network: NetworkMode | None) -> Sandbox:
    """`sandbox` with another default network for one tool set (the same sandbox otherwise).
    Raises `SandboxUnavailable` when the sandbox cannot give that network, at build time."""
    if network is None or network == sandbox.network_mode:
        return sandbox
    twin = getattr(sandbox, "with_network", None)
    if twin is None:
        raise SandboxUnavailable(
            f"a {type(sandbox).__name__} sandbox cannot give a tool set network {network!r}"
        )
    changed: Sandbox = twin(network)
    return changed


def read_only_twin(sandbox: Sandbox) -> Sandbox | None:
    """`sandbox` with the workspace mounted read-only, for runs whose workspace is read-only
    (`ToolContext.workspace_read_only`); None where the level has no such view (only
    `bwrap` has one): such a run's commands are refused there, never run with write access."""
    twin = getattr(sandbox, "with_read_only_workspace", None)
    changed: Sandbox | None = twin() if twin is not None else None
    return changed


def no_read_only_workspace(sandbox: Sandbox) -> ToolResult:
    """The refusal of a command in a read-only run where the sandbox cannot mount the
    workspace read-only."""
    message = (
        f"nothing was run: the workspace is read-only for this agent and the {sandbox.level} "
        "sandbox cannot mount it read-only (the bwrap level can); use the file tools to read"
    )
    return ToolResult.fail(message, data={"error": "read_only_workspace", "sandbox": sandbox.level})


def mask_run(result: RunResult) -> RunResult:
    """`result` with every known secret in its output replaced by its placeholder: a
    process's output enters the data path here (the byte counts follow the new lengths)."""
    known = known_secrets()
    if not len(known):
        return result
    out, err = known.mask_bytes(result.stdout), known.mask_bytes(result.stderr)
    if out is result.stdout and err is result.stderr:
        return result
    return dataclasses.replace(
        result,
        stdout=out,
        stderr=err,
        stdout_bytes=result.stdout_bytes + len(out) - len(result.stdout),
        stderr_bytes=result.stderr_bytes + len(err) - len(result.stderr),
    )


def render_run(
    result: RunResult, *, workspace: Path, label: str, timeout_s: float
) -> tuple[str, str, dict[str, Any]]:
    """Status line, model-facing body and `data` for a finished run.

    The status line ends with the sandbox the command ran in and the network it had, e.g.
    `exit code 0 in 0.02 s [sandbox bwrap, network none]`. Known secrets in the output become
    their placeholders before anything is shown or saved. Each stream above 200 lines or
    10,000 characters is cut to its first 50 and last 50 lines with a marker naming the file
    (under `.heron/outputs/`) that holds the full output.
    """
    result = mask_run(result)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%f")
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", label)[:80]

    def save(suffix: str, raw: bytes) -> Path:
        relative = OUTPUT_DIR / f"{stamp}-{safe}.{suffix}"
        target = workspace / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(raw)
        return relative

    status = f"{_status(result, timeout_s)} {_sandbox_line(result)}"
    out, out_info = _present("stdout", result.stdout, result.stdout_bytes, save)
    err, err_info = _present("stderr", result.stderr, result.stderr_bytes, save)
    sections = [status]
    if out:
        sections.append(f"--- stdout ---\n{out.rstrip(chr(10))}")
    if err:
        sections.append(f"--- stderr ---\n{err.rstrip(chr(10))}")
    if not out and not err:
        sections.append("(no output)")
    data = {
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "killed_by_signal": result.killed_by_signal,
        "duration_s": round(result.duration_s, 4),
        "stdout": out_info,
        "stderr": err_info,
        "sandbox": dict(result.metadata),
    }
    return status, "\n".join(sections[1:]), data


# --- the tool -----------------------------------------------------------------------------


def _describe(
    sandbox: Sandbox,
    policy: CommandPolicy,
    workspace: Path,
    default_s: float,
    max_s: float,
    network: NetworkMode,
    unattended: str,
) -> str:
    env = " ".join(f"{k}={v}" for k, v in AGENT_ENV.items())
    limits = sandbox.limits
    memory = limits.address_space_bytes
    limit_text = (
        f" Limits per command: CPU {limits.cpu_seconds or 'unlimited'} s, "
        f"memory {f'{memory // 2**20} MiB' if memory else 'unlimited'}, "
        f"{limits.max_processes or 'unlimited'} processes."
    )
    high = (
        "needs approval (this deployment allows high-risk commands)"
        if policy.allow_high_risk
        else "is refused"
    )
    return f"""Run a bash command in the workspace ({workspace}) and get its exit code, stdout \
and stderr.

Use it for builds, tests, git, searching and inspecting files and other command-line work. \
Each call is a fresh `bash -c <command>` started in the workspace: `cd`, variables and \
background jobs do not carry over, processes still running when the command exits are killed, \
and stdin is empty (nothing can be answered interactively). The command runs exactly as \
written — heron adds no flags — with this environment: {env} PATH={SYSTEM_PATH} \
HOME=<workspace>/{HOME_DIR}.

Safety: the command is parsed and classified before it runs. Low risk (inspection, writes \
inside the workspace) runs. Medium risk (deleting or changing permissions inside the \
workspace, network clients, interpreters, unknown programs, targets computed at run time) runs \
only after approval. High risk (sudo, any write or delete outside the workspace, `rm -rf /`, \
`dd` to a device, `mkfs`, `curl … | sh`, fork bombs, shutdown, unparseable input) {high}. \
{unattended} Sandbox: {sandbox.level}, {describe_network(network)}.{limit_text}

Output: a status line (exit code and duration), then stdout and stderr. A non-zero exit is a \
failed call with the output kept. A stream above {MAX_LINES} lines or {MAX_CHARS:,} characters \
shows its first {HEAD_LINES} and last {TAIL_LINES} lines and a marker naming a file under \
{OUTPUT_DIR}/ with the full output; binary output is saved there and not shown. Default \
timeout {default_s:g} s, at most {max_s:g} s."""


def shell_tool(
    *,
    sandbox: Sandbox,
    policy: CommandPolicy,
    workspace: Path,
    history: ShellHistory,
    default_timeout_s: float = 60,
    max_timeout_s: float = 600,
    env_passthrough: Sequence[str] = (),
    network: NetworkMode | None = None,
    unattended_risk: UnattendedRisk = "low",
    containment: ContainmentReport | None = None,
) -> Tool:
    """Build the `shell` tool for one agent. `env_passthrough` names variables copied from
    heron's environment into every command (values are never echoed, only names; a known
    secret is refused with `ValueError`). `network` is the network this tool set's commands
    get (default: the sandbox's own default); every result's status line says which one a
    command had.

    With no operator (`NoApprover`), a call runs when its tier is at most `unattended_risk`
    (`"low"`, or `"medium"`); a low-risk command counts as medium unless the sandbox contains
    heron's environment and the files outside the workspace — `containment` (default: the
    sandbox's own `containment_report`, as `heron doctor` prints it) says whether it does.
    High risk never runs unattended."""
    if not 0 < default_timeout_s <= max_timeout_s:
        raise ValueError("need 0 < default_timeout_s <= max_timeout_s")
    if unattended_risk not in ("low", "medium"):
        raise ValueError(f"unattended_risk must be 'low' or 'medium', not {unattended_risk!r}")
    workspace = workspace.resolve()
    agent_environment(workspace, env_passthrough)  # a secret named there is refused now
    bash = shutil.which("bash") or "/bin/bash"
    sandbox = with_network(sandbox, network)
    read_only = read_only_twin(sandbox)
    mode = sandbox.network_mode
    report = containment or containment_report(sandbox, workspace=workspace)
    contained = report.allows_unattended_low_risk()
    judge = _judge(policy, workspace, unattended_risk, contained, sandbox.level)
    description = _describe(
        sandbox,
        policy,
        workspace,
        default_timeout_s,
        max_timeout_s,
        mode,
        _unattended_text(unattended_risk, contained),
    )

    @tool(
        name="shell",
        description=description,
        destructive=True,
        open_world=mode == "host",
        workspace_only=mode != "host",
        owner="builtin",
        runtime_args=["approved"],
        approval_for=judge,
        examples=[
            {"command": "git status --short"},
            {"command": "pytest -q tests/unit 2>&1 | tail -n 30", "timeout_s": 300},
            {"command": "grep -rn 'def main' src | head -n 20"},
        ],
    )
    async def shell(
        command: str, ctx: ToolContext, timeout_s: float | None = None, approved: bool = False
    ) -> ToolResult:
        """Run a bash command.

        Args:
            command: The bash command line, run as written, e.g. `ls -la src` or
                `make test 2>&1 | tail -n 40`.
            timeout_s: Seconds before the command is stopped, greater than 0 and at most the
                maximum stated above; the default applies when omitted.
            approved: Set by the runtime only.
        """
        if not command.strip():
            return ToolResult.fail("`command` is empty; nothing was run")
        if "\x00" in command:
            return ToolResult.fail("`command` contains a NUL byte; nothing was run")
        timeout = default_timeout_s if timeout_s is None else timeout_s
        if not 0 < timeout <= max_timeout_s:
            return ToolResult.fail(
                f"timeout_s must be greater than 0 and at most {max_timeout_s:g}; nothing was run"
            )
        verdict = policy.classify(command, cwd=workspace)
        decision = policy.decide(verdict, approved=approved)
        # The history is a store people read: shapes of credentials are masked there.
        shown = scrub_text(command)
        if decision != "run":
            outcome: HistoryOutcome = "refused" if decision == "refuse" else "needs_approval"
            history.record(
                command=shown, cwd=workspace, outcome=outcome, risk=verdict.risk, agent=ctx.agent
            )
            return _not_run(verdict, decision)
        box = read_only if ctx.workspace_read_only else sandbox
        if box is None:
            history.record(
                command=shown, cwd=workspace, outcome="refused", risk=verdict.risk, agent=ctx.agent
            )
            return no_read_only_workspace(sandbox)
        env = agent_environment(workspace, env_passthrough)
        _ensure_dir(Path(env["HOME"]))
        ctx.progress(f"running: {command if len(command) <= 80 else command[:79] + '…'}")
        result = await box.run([bash, "-c", command], cwd=workspace, env=env, timeout_s=timeout)
        history.record(
            command=shown,
            cwd=workspace,
            outcome="ran",
            risk=verdict.risk,
            agent=ctx.agent,
            exit_code=result.exit_code,
            duration_s=result.duration_s,
            timed_out=result.timed_out,
        )
        status, body, data = await asyncio.to_thread(
            render_run, result, workspace=workspace, label=f"shell-{ctx.call_id}", timeout_s=timeout
        )
        data["command"] = command
        data["environment"] = {
            **{k: v for k, v in env.items() if k not in env_passthrough},
            "passed_through": [name for name in env_passthrough if name in env],
        }
        data["policy"] = verdict.to_data()
        if result.ok:
            return ToolResult.ok(f"{status}\n{body}", data=data)
        return ToolResult.fail(status, output=body, data=data)

    return shell


def _judge(
    policy: CommandPolicy,
    workspace: Path,
    unattended_risk: UnattendedRisk,
    contained: bool,
    level: str,
) -> Callable[[Mapping[str, Any]], CallApproval]:
    """The shell's `approval_for`: the parsed command's tier, and whether it may run with no
    operator."""
    ceiling = 1 if unattended_risk == "low" else 2

    def approval_for(arguments: Mapping[str, Any]) -> CallApproval:
        risk = policy.classify(str(arguments.get("command", "")), cwd=workspace).risk
        note = ""
        if risk == "low" and not contained:
            risk = "medium"
            note = (
                f"low risk counts as medium here: the {level} sandbox does not contain heron's "
                "environment and the files outside the workspace (see heron doctor)"
            )
        rank = {"low": 1, "medium": 2, "high": 3}[risk]
        return CallApproval(risk=risk, unattended=rank <= ceiling, note=note)

    return approval_for


def _unattended_text(unattended_risk: UnattendedRisk, contained: bool) -> str:
    if unattended_risk == "medium":
        runs = "low- and medium-risk commands run" if contained else "medium-risk commands run"
    else:
        runs = "low-risk commands run" if contained else "no command runs"
    return (
        f"With no operator to ask, {runs}; anything else is not run. A high-risk command needs "
        "an operator's yes every time."
    )


def _ensure_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


def _not_run(verdict: CommandVerdict, decision: str) -> ToolResult:
    data = {"policy": verdict.to_data(), "ran": False}
    if decision == "refuse":
        return ToolResult.fail(
            "refused by the command policy (high risk); nothing was run.\n"
            + verdict.explain()
            + "\nChoose a different approach that stays inside the workspace.",
            data=data,
        )
    return ToolResult.fail(
        "this command is medium risk and needs approval, which this call did not have; "
        "nothing was run.\n" + verdict.explain(),
        data=data,
    )
