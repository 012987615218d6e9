"""`heron skills`: the Agent Skills an agent finds here (docs/skills.md).

- `list`     every skill found, where it comes from and whether it is offered
- `show`     one skill: its fields, files, trust status (with the diff when it changed) and body
- `check`    every problem of every skill, strictly (exit 1 when a skill has an error)
- `approve`  pin a project skill as it is now, after showing what changed
- `revoke`   forget a project skill's pin; it is withheld again

Loading is lenient (an agent takes what it can, with a warning); `check` is strict.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heron._support.terminal import line_safe
from heron.cli import common
from heron.cli.common import EXIT_ERROR, EXIT_OK, UsageError

if TYPE_CHECKING:
    from heron.config import HeronConfig
    from heron.skills import Skill, SkillScan, SkillTrust


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `heron skills` and its actions to the `heron` parser."""
    skills = sub.add_parser("skills", help="Agent Skills: list, show, check, approve, revoke")
    actions = skills.add_subparsers(dest="skills_command", required=True, metavar="ACTION")
    skills.set_defaults(handler=cmd_skills)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        common.add_config_flags(p)
        p.add_argument(
            "--project", type=Path, metavar="DIR", help="the project (default: this directory)"
        )
        return p

    action("list", "every skill found and whether it is offered").add_argument(
        "--json", action="store_true"
    )
    action("show", "one skill: fields, files, trust status and instructions").add_argument("name")
    check = action("check", "every problem of every skill (strict)")
    check.add_argument("--json", action="store_true")
    check.add_argument(
        "--no-agent",
        action="store_true",
        help="do not assemble the configured agent (allowed-tools names are not checked)",
    )
    action("approve", "pin a project skill as it is now").add_argument("name")
    action("revoke", "forget a project skill's pin").add_argument("name")


def _scan(config: HeronConfig, project: Path) -> tuple[SkillScan, list[str]]:
    from heron.skills import scan_skills

    s = config.skills
    return scan_skills(
        project, extra_dirs=[Path(d).expanduser() for d in s.dirs], packages=s.packages
    )


def _trust(config: HeronConfig) -> SkillTrust:
    from heron.mcp.trust import SqliteTrustStore
    from heron.skills import SkillTrust

    return SkillTrust(SqliteTrustStore(config.state.path()))


def _find(scan: SkillScan, name: str) -> Skill:
    for skill in scan.skills:
        if skill.name == name:
            return skill
    known = ", ".join(s.name for s in scan.skills) or "none"
    raise UsageError(f"no skill named {name!r} (found: {known}); see `heron skills list`")


def cmd_skills(args: argparse.Namespace) -> int:
    from heron.skills.trust import SkillPinError

    config = common.load_config(args)
    project = (args.project or Path.cwd()).resolve()
    scan, failed = _scan(config, project)
    for line in failed:
        common.err(f"skills: {line}")
    command = args.skills_command
    if command == "list":
        return _list(scan, _trust(config), as_json=args.json)
    if command == "check":
        return _check(args, config, scan)
    skill = _find(scan, args.name)
    trust = _trust(config)
    if command == "show":
        return _show(skill, trust)
    if skill.source != "project":
        raise UsageError(
            f"{skill.name!r} is a {skill.source} skill: only project skills need approval"
        )
    if command == "revoke":
        gone = trust.revoke(skill)
        common.out(f"revoked {skill.name}" if gone else f"{skill.name} was not approved")
        return EXIT_OK
    verdict = trust.verdict(skill)
    if verdict.status == "approved":
        common.out(f"{skill.name} is already approved as it is; nothing changed")
        return EXIT_OK
    if verdict.status == "unpinnable":
        return _unpinnable(skill.name, verdict.problems)
    if verdict.status == "changed":
        common.out(f"{skill.name} changed since it was approved:")
        for change in verdict.changes:
            common.out(f"  {change}")
        common.out(verdict.diff)
    try:
        pin = trust.approve(skill)
    except SkillPinError as exc:  # a file became unreadable since the verdict
        return _unpinnable(skill.name, exc.problems)
    common.out(
        f"approved {skill.name}: {len(pin.definitions)} file(s) pinned (sha256 {pin.digest[:16]})"
    )
    return EXIT_OK


def _unpinnable(name: str, problems: tuple[str, ...]) -> int:
    common.err(f"{name} cannot be pinned, so it cannot be approved:")
    for problem in problems:
        common.err(f"  {problem}")
    return EXIT_ERROR


def _list(scan: SkillScan, trust: SkillTrust, *, as_json: bool) -> int:
    rows: list[dict[str, Any]] = []
    for skill in scan.skills:
        verdict = trust.verdict(skill)
        rows.append(
            {
                "name": skill.name,
                "source": skill.source,
                "status": verdict.status,
                "offered": verdict.ok,
                "folder": str(skill.folder),
                "description": skill.description,
            }
        )
    if as_json:
        from heron.cli.render import print_json

        print_json(rows)
        return EXIT_OK
    if not rows:
        common.out("no skills found (see `heron skills check` for folders that failed to load)")
    for row in rows:
        line = " ".join(row["description"].split())
        first = line if len(line) <= 60 else line[:59] + "…"
        common.out(f"{row['name']:24} {row['source']:8} {row['status']:10} {first}")
    return EXIT_OK


def _show(skill: Skill, trust: SkillTrust) -> int:
    verdict = trust.verdict(skill)
    common.out(f"name:        {skill.name}")
    common.out(f"source:      {skill.source} ({line_safe(str(skill.folder))})")
    common.out(f"status:      {verdict.status}" + ("" if verdict.ok else " (not offered)"))
    common.out(f"description: {skill.description}")
    for label, value in (("license", skill.license), ("compatibility", skill.compatibility)):
        if value:
            common.out(f"{label + ':':12} {value}")
    if skill.metadata:
        common.out("metadata:    " + ", ".join(f"{k}={v}" for k, v in skill.metadata.items()))
    if skill.allowed_tools is not None:
        common.out("allowed-tools: " + (" ".join(skill.allowed_tools) or "(none)"))
    files = skill.files()
    common.out("files:       " + (", ".join(map(line_safe, files)) if files else "(none)"))
    if verdict.status == "changed":
        common.out("changed since it was approved:")
        for change in verdict.changes:
            common.out(f"  {change}")
        common.out(verdict.diff)
    if verdict.status == "unpinnable":
        common.out("cannot be pinned:")
        for problem in verdict.problems:
            common.out(f"  {problem}")
    common.out("")
    common.out(skill.body)
    return EXIT_OK


def _known_tools(args: argparse.Namespace, config: HeronConfig) -> list[str] | None:
    """The names the configured agent could call (registry and deferred catalogue)."""
    if args.no_agent:
        return None
    import asyncio

    from heron.config.build import open_agent
    from heron.models.scripted import ScriptedModel
    from heron.turn.approval import NoApprover

    model = ScriptedModel([], name="none") if config.agent.model is None else None

    async def names() -> list[str]:
        with common.library_errors():
            async with open_agent(
                config, approver=NoApprover(), tools=common.user_tools(config), model=model
            ) as agent:
                found = agent.registry.names()
                if agent.catalogue is not None:
                    found += agent.catalogue.names()
                return found

    return asyncio.run(names())


def _check(args: argparse.Namespace, config: HeronConfig, scan: SkillScan) -> int:
    from heron.cli.render import print_json
    from heron.skills import check_skills

    problems = check_skills(scan, known_tools=_known_tools(args, config))
    errors = [p for p in problems if p.severity == "error"]
    if args.json:
        rows = [
            {"path": str(p.path), "line": p.line, "severity": p.severity, "message": p.message}
            for p in problems
        ]
        print_json(rows)
    else:
        for problem in problems:
            common.out(str(problem))
        usable = len(scan.skills)
        common.out(
            f"{usable} skill(s) usable; {len(errors)} error(s), "
            f"{len(problems) - len(errors)} warning(s)"
        )
    return EXIT_ERROR if errors else EXIT_OK
