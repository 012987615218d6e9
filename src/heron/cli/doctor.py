"""`heron doctor`: check the installation, configuration, state directory and sandbox tools."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from heron.cli import common
from heron.cli.common import UsageError


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `doctor` to the `heron` parser."""
    doctor = sub.add_parser("doctor", help="check the installation and configuration")
    common.add_config_flags(doctor)
    common.add_store_flag(doctor)
    doctor.set_defaults(handler=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    import importlib.metadata
    import os
    import platform
    import shutil

    from heron._support.state import open_db
    from heron.config import ConfigError, HeronConfig, StateConfig, load_config
    from heron.errors import StoreError

    problems = 0

    def report(ok: bool, what: str, detail: str, *, required: bool = True) -> None:
        nonlocal problems
        mark = "ok  " if ok else ("FAIL" if required else "warn")
        problems += not ok and required
        sys.stdout.write(f"[{mark}] {what}: {detail}\n")

    report(sys.version_info >= (3, 11), "python", platform.python_version())
    for dist in ("pydantic", "rich", "pyyaml", "jsonschema"):
        try:
            report(True, dist, importlib.metadata.version(dist))
        except importlib.metadata.PackageNotFoundError:
            report(False, dist, "not installed")
    config: HeronConfig | None
    try:
        config = load_config(config_file=args.config)
        report(True, "configuration", "valid")
    except ConfigError as exc:
        report(False, "configuration", str(exc))
        config = None
    root = args.state_dir or (config.state if config is not None else StateConfig()).path()
    try:
        open_db(root).close()
        writable = os.access(root, os.W_OK)
        report(writable, "state directory", f"{root} ({'writable' if writable else 'read-only'})")
    except StoreError as exc:  # not a folder, not writable, a damaged database
        report(False, "state directory", str(exc))
    if config is not None and config.mcp.enabled_servers():
        from heron.mcp.doctor import doctor_checks

        try:
            tools = common.user_tools(config)
        except UsageError as exc:
            report(False, "tools", str(exc), required=False)
        else:
            for ok, what, detail in doctor_checks(config, root, tools):
                report(ok, what, detail, required=False)
    if config is not None:
        safe, detail = config.gateway.exposure()
        report(safe, "gateway", detail, required=False)
        url = vars(args).get("store") or config.store.url
        if url is not None:
            for ok, what, detail, required in _shared_store(url, config, root):
                report(ok, what, detail, required=required)
    bwrap = shutil.which("bwrap")
    report(
        bwrap is not None,
        "bubblewrap",
        bwrap or "not found (namespace sandbox unavailable)",
        required=False,
    )
    _containment(config, root)
    sys.stdout.write("heron is ready.\n" if not problems else f"{problems} problem(s) found.\n")
    return 0 if not problems else 1


def _shared_store(url: str, config: object, state_dir: Path) -> list[tuple[bool, str, str, bool]]:
    """The shared store reached, and whether this worker's workspace is a mount other hosts
    share or pinned to this host (docs/deployment.md#workspaces)."""
    import os

    from heron.config import HeronConfig
    from heron.errors import StoreError

    assert isinstance(config, HeronConfig)
    builtin = config.tools.builtin
    # `heron serve`'s workspace: the built-in tools' one when given, else the state directory's.
    root = builtin.workspace_path() if builtin.workspace else state_dir / "workspace"
    try:
        from heron._support.postgres import open_pool
        from heron.always_on.postgres_workspaces import PostgresWorkspaceBindings
        from heron.always_on.workspaces import describe_workspace

        pool = open_pool(url, max_size=1)
        try:
            bindings = PostgresWorkspaceBindings(pool).list()
        finally:
            pool.close()
    except (StoreError, ImportError) as exc:
        return [(False, "shared store", str(exc), True)]
    if not root.is_dir():
        return [
            (True, "shared store", "reachable", True),
            (False, "workspace", f"{root}: no such directory", False),
        ]
    shared, detail = describe_workspace(Path(root), bindings, host=os.uname().nodename)
    return [(True, "shared store", "reachable", True), (shared, "workspace", detail, False)]


def _containment(config: object, state_dir: Path) -> None:
    """What each sandbox level contains on this machine, the configured one first; the
    unattended shell runs low-risk commands only where the report says it may."""
    from heron.config import HeronConfig
    from heron.sandbox.containment import describe_level

    builtin = config.tools.builtin if isinstance(config, HeronConfig) else None
    chosen = builtin.sandbox if builtin is not None else "process"
    workspace = Path(builtin.workspace_path() if builtin is not None else state_dir)
    for level in (chosen, "bwrap" if chosen == "process" else "process"):
        report = describe_level(level, workspace=workspace)
        mark = " (configured)" if level == chosen else ""
        sys.stdout.write(f"\nsandbox {level}{mark}, network {report.network}:\n")
        sys.stdout.write(report.render().split("\n", 1)[-1] + "\n")
