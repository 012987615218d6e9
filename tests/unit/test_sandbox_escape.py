"""The escape suite: every attempt of `heron.sandbox.escape` against each sandbox level.

Each attempt runs a real command in a real sandbox and is judged by what happened on the host
(a file outside the workspace, a connection to a listener started here, a surviving process).
The verdicts must match the level's containment report (which `heron doctor` prints), both
ways: every attempt on an aspect reported as contained is held, and every aspect reported as
not contained is shown by at least one attempt that gets through. Besides the two levels as
this host builds them, the process level runs with namespaces, then Landlock, taken away, as
on a kernel or container without them, so its fallbacks are checked the same way. Attempts
that cannot run on this host are skipped with the reason; the attempts of one level run
concurrently, once, in a module fixture.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from heron import ToolContext
from heron.sandbox import (
    BwrapSandbox,
    NetworkMode,
    ProcessSandbox,
    RunResult,
    SandboxUnavailable,
    make_sandbox,
)
from heron.sandbox.containment import (
    ASPECTS,
    UNATTENDED_REQUIRES,
    ContainmentReport,
    containment_report,
    describe_level,
)
from heron.sandbox.escape import (
    ATTEMPTS,
    Attempt,
    EscapeRig,
    Outcome,
    run_suite,
    suite_sandbox,
    unproven,
    visible_outside,
)
from heron.toolsets.python_exec import run_python_tool

LEVELS = ("process", "bwrap")
VARIANTS = (*LEVELS, "bwrap-spared", "process-without-namespaces", "process-without-landlock")
BOUND_S = 20.0  # per level; the suite takes one to five seconds on 2 busy cores
REPO = Path(__file__).resolve().parents[2]


def need_bwrap() -> None:
    if shutil.which("bwrap") is None:
        pytest.fail(
            "bubblewrap (`bwrap`) is required for this test; install the bubblewrap package"
        )


def _outside_base(workspace: Path) -> tuple[Path, bool]:
    """Where the rig lays out its files: a directory the process sandbox shows as it is."""
    probe = ProcessSandbox(workspace=workspace)
    found = visible_outside(probe, workspace, [Path.cwd(), REPO, Path.home()])
    if found is None:
        return workspace.parent, False
    return found, True


@pytest.fixture(scope="module")
def suite(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, tuple[ContainmentReport, list[Outcome], float]]]:
    """Report, outcomes and wall time of the whole suite, per level."""
    need_bwrap()
    workspace = tmp_path_factory.mktemp("escape") / "ws"
    workspace.mkdir()
    base, visible = _outside_base(workspace)
    outside = base / f".heron-escape-{secrets.token_hex(4)}"

    async def run_all() -> dict[str, tuple[ContainmentReport, list[Outcome], float]]:
        sandboxes = {variant: _variant(variant, workspace) for variant in VARIANTS}
        exposed = [p for s in sandboxes.values() for p in _exposed(s)]
        results = {}
        async with EscapeRig.start(
            workspace=workspace, outside=outside, exposed=exposed, outside_visible=visible
        ) as rig:
            for level, sandbox in sandboxes.items():
                report = containment_report(sandbox)
                started = time.monotonic()
                # One at a time for the spared variant: each call finds its spare ready.
                alone = isinstance(sandbox, _Spared)
                outcomes = await run_suite(sandbox, rig, report, concurrency=1 if alone else 4)
                results[level] = (report, outcomes, time.monotonic() - started)
                if alone:
                    await sandbox.aclose()
                    assert sandbox.served > len(ATTEMPTS) // 2, "the suite did not run spared"
        return results

    try:
        yield asyncio.run(run_all())
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def _variant(name: str, workspace: Path) -> ProcessSandbox | BwrapSandbox:
    """A level as this host builds it, the bwrap level serving every call it can from a spare,
    or the process level with a mechanism taken away."""
    sandbox = suite_sandbox(name.split("-")[0], workspace=workspace)
    if name == "bwrap-spared":
        return _Spared(workspace=workspace, limits=sandbox.limits, spares=True)
    if isinstance(sandbox, ProcessSandbox) and sandbox.facts is not None:
        if name.endswith("without-namespaces"):
            sandbox.facts = dataclasses.replace(
                sandbox.facts,
                namespaces=False,
                network_namespace=False,
                proc_mount=False,
                problems=("namespaces taken away for this test",),
            )
        elif name.endswith("without-landlock"):
            sandbox.facts = dataclasses.replace(sandbox.facts, landlock_abi=0)
    return sandbox


class _Spared(BwrapSandbox):
    """bwrap with spares whose every run first waits for its spare to be ready."""

    @property
    def served(self) -> int:
        return self._spares.served if self._spares is not None else 0

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout_s: float,
        stdin: bytes | None = None,
        pass_fds: Sequence[int] = (),
        network: NetworkMode | None = None,
    ) -> RunResult:
        await self.prepare(cwd=cwd, network=network)
        return await super().run(
            argv,
            cwd=cwd,
            env=env,
            timeout_s=timeout_s,
            stdin=stdin,
            pass_fds=pass_fds,
            network=network,
        )


def _exposed(sandbox: ProcessSandbox | BwrapSandbox) -> tuple[Path, ...]:
    return sandbox.exposed if isinstance(sandbox, ProcessSandbox) else sandbox.ro_binds


@pytest.mark.parametrize("level", VARIANTS)
@pytest.mark.parametrize("attempt", [a.name for a in ATTEMPTS])
def test_an_attempt_on_an_aspect_the_report_calls_contained_is_held(
    suite: dict[str, tuple[ContainmentReport, list[Outcome], float]], level: str, attempt: str
) -> None:
    report, outcomes, _ = suite[level]
    [outcome] = [o for o in outcomes if o.attempt.name == attempt]
    if outcome.skipped:
        pytest.skip(outcome.skipped)
    assert outcome.as_reported, (
        f"{level}: {attempt} ({outcome.attempt.description}) got through, but the report says "
        f"{outcome.attempt.aspect} is contained ({outcome.how}): {outcome.evidence}\n"
        + report.render()
    )


@pytest.mark.parametrize("level", VARIANTS)
def test_every_aspect_the_report_calls_not_contained_is_shown_by_an_attempt_that_gets_through(
    suite: dict[str, tuple[ContainmentReport, list[Outcome], float]], level: str
) -> None:
    report, outcomes, _ = suite[level]
    held = {o.attempt.name: o.evidence for o in outcomes if o.expected_escape and not o.skipped}
    assert unproven(outcomes) == [], f"{level}: all held: {held}\n{report.render()}"


def test_an_aspect_not_contained_is_unproven_only_when_every_attempt_on_it_ran_and_was_held() -> (
    None
):
    write = [a for a in ATTEMPTS if a.aspect == "files_outside_write"][:2]

    def outcome(attempt: Attempt, *, escaped: bool = False, skipped: str | None = None) -> Outcome:
        return Outcome(
            attempt=attempt,
            level="l",
            escaped=escaped,
            evidence="",
            expected_escape=True,
            how="",
            skipped=skipped,
        )

    assert unproven([outcome(write[0]), outcome(write[1])]) == ["files_outside_write"]
    assert unproven([outcome(write[0]), outcome(write[1], escaped=True)]) == []
    # The skipped one might have been the attempt that gets through: nothing is concluded.
    assert unproven([outcome(write[0]), outcome(write[1], skipped="not here")]) == []


def test_the_suite_has_at_least_29_attempts_covering_every_aspect() -> None:
    assert len(ATTEMPTS) >= 29
    assert len({a.name for a in ATTEMPTS}) == len(ATTEMPTS)
    assert {a.aspect for a in ATTEMPTS} == set(ASPECTS)


@pytest.mark.parametrize("level", VARIANTS)
def test_the_suite_of_one_level_runs_well_under_a_minute(
    suite: dict[str, tuple[ContainmentReport, list[Outcome], float]], level: str
) -> None:
    _, outcomes, took = suite[level]
    assert took < BOUND_S, f"{level}: {took:.1f} s"
    assert len(outcomes) == len(ATTEMPTS)


def test_as_root_both_levels_contain_heron_and_the_files_outside_the_workspace(
    suite: dict[str, tuple[ContainmentReport, list[Outcome], float]],
) -> None:
    if os.geteuid() != 0:
        pytest.skip("as a normal user the process level reads heron's user's own files")
    for level in LEVELS:
        report = suite[level][0]
        assert report.allows_unattended_low_risk(), report.render()
        assert report.holds("other_users_files", "other_processes", "signals", "privileges")


# --- run_python through the tool -----------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
async def test_run_python_cannot_write_outside_the_workspace(tmp_path: Path, level: str) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    base, visible = _outside_base(workspace)
    target = base / f".heron-escape-run-python-{secrets.token_hex(4)}"
    sandbox = make_sandbox(level, workspace=workspace)  # type: ignore[arg-type]
    runner = run_python_tool(sandbox=sandbox, workspace=workspace)
    code = f"open({str(target)!r}, 'w').write('x')\nprint('wrote')"
    try:
        result = await runner.execute(
            runner.validate({"code": code}), ToolContext(call_id="p1", turn_id="t1")
        )
        assert not target.exists()
        if visible:  # else `base` is one the sandbox keeps private: a write there stays inside
            assert not result.success and "wrote" not in result.output
            assert "Error" in result.output  # PermissionError / FileNotFoundError / OSError
        inside = await runner.execute(
            runner.validate({"code": "open('kept.txt', 'w').write('x')\nprint('ok')"}),
            ToolContext(call_id="p2", turn_id="t1"),
        )
        assert inside.success and (workspace / "kept.txt").read_text() == "x"
    finally:
        target.unlink(missing_ok=True)


# --- network modes ---------------------------------------------------------------------------


async def _listener() -> tuple[asyncio.Server, list[bytes]]:
    got: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got.append(await reader.readline())
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, got


SELF_LOOP = (
    "import socket\nserver = socket.create_server(('127.0.0.1', 0))\n"
    "client = socket.create_connection(server.getsockname())\nprint('self-connected')"
)


async def test_the_process_level_can_cut_the_network_where_the_kernel_allows(
    tmp_path: Path,
) -> None:
    try:
        isolated = ProcessSandbox(workspace=tmp_path, network="none")
    except SandboxUnavailable as exc:
        pytest.skip(f"no network namespace for the process level here: {exc}")
    server, got = await _listener()
    port = server.sockets[0].getsockname()[1]
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo reached >&3"
    env = {"PATH": "/usr/bin:/bin"}
    async with server:
        cut = await isolated.run(["/bin/bash", "-c", connect], cwd=tmp_path, env=env, timeout_s=5)
        own = await isolated.with_network("loopback").run(
            ["python3", "-c", SELF_LOOP], cwd=tmp_path, env=env, timeout_s=5
        )
        host = await isolated.run(
            ["/bin/bash", "-c", connect], cwd=tmp_path, env=env, timeout_s=5, network="host"
        )
        await asyncio.sleep(0.05)
    assert cut.exit_code != 0 and cut.metadata["network"] == "none"
    assert own.stdout == b"self-connected\n" and own.metadata["network"] == "loopback"
    assert host.ok and host.metadata["network"] == "host"
    assert got == [b"reached\n"]  # only the run that asked for the host's network
    assert containment_report(isolated).holds("network", "loopback")


async def test_bwrap_has_no_network_by_default_and_a_run_may_ask_for_the_hosts(
    tmp_path: Path,
) -> None:
    need_bwrap()
    sandbox = make_sandbox("bwrap", workspace=tmp_path, network=True)
    assert sandbox.network_mode == "none" and not sandbox.network
    server, got = await _listener()
    port = server.sockets[0].getsockname()[1]
    connect = ["/bin/bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo reached >&3"]
    env = {"PATH": "/usr/bin:/bin"}
    async with server:
        cut = await sandbox.run(connect, cwd=tmp_path, env=env, timeout_s=5)
        host = await sandbox.run(connect, cwd=tmp_path, env=env, timeout_s=5, network="host")
        await asyncio.sleep(0.05)
    assert cut.exit_code != 0 and cut.metadata["network"] == "none"
    assert host.ok and host.metadata["network"] == "host"
    assert got == [b"reached\n"]
    assert sandbox.with_network("host").network_mode == "host"


# --- the report ------------------------------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
def test_the_report_names_every_aspect_in_data_and_in_text(tmp_path: Path, level: str) -> None:
    if level == "bwrap":
        need_bwrap()
    report = describe_level(level, workspace=tmp_path)  # type: ignore[arg-type]
    data = report.to_data()
    assert list(data["contained"]) == list(ASPECTS)
    assert all(data["how"][a] for a in ASPECTS)
    text = report.render()
    assert text.startswith(f"sandbox {level} (network ")
    for aspect in ASPECTS:
        assert aspect in text
    assert set(UNATTENDED_REQUIRES) <= set(ASPECTS)


def test_a_level_that_cannot_be_built_is_reported_as_containing_nothing(tmp_path: Path) -> None:
    report = describe_level("process", workspace=tmp_path, network="bogus")  # type: ignore[arg-type]
    assert not any(report.to_data()["contained"].values())
