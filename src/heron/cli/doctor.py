"""`heron doctor`: check the installation, configuration, state directory and sandbox tools."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import sys
from pathlib import Path

from heron._support.state import default_state_dir, open_db
from heron.config import ConfigError, load_config


def run_doctor(*, config_file: Path | None, state_dir: Path | None) -> int:
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
    try:
        config = load_config(config_file=config_file)
        report(True, "configuration", "valid")
    except ConfigError as exc:
        report(False, "configuration", str(exc))
        config = None
    root = state_dir or (
        Path(config.state.dir).expanduser() if config and config.state.dir else default_state_dir()
    )
    try:
        open_db(root).close()
        writable = os.access(root, os.W_OK)
        report(writable, "state directory", f"{root} ({'writable' if writable else 'read-only'})")
    except OSError as exc:
        report(False, "state directory", f"{root}: {exc}")
    if config is not None and config.mcp.enabled_servers():
        from heron.cli.mcp_commands import doctor_checks

        for ok, what, detail in doctor_checks(config, root):
            report(ok, what, detail, required=False)
    bwrap = shutil.which("bwrap")
    report(
        bwrap is not None,
        "bubblewrap",
        bwrap or "not found (namespace sandbox unavailable)",
        required=False,
    )
    sys.stdout.write("heron is ready.\n" if not problems else f"{problems} problem(s) found.\n")
    return 0 if not problems else 1
