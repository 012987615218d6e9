"""The skill tools: `load_skill` (level two of progressive disclosure: the instructions) and
`read_skill_file` (level three: the files they point to), and `SkillGuard`, the hook that
enforces a loaded skill's `allowed-tools`.

`load_skill` returns `SKILL.md` without its front matter, headed by where the skill lies and
which files it has, so the model can run its scripts through the usual tools (`shell`,
`run_python`: the sandbox, approval and every other step of the lifecycle apply as for any
call). The result is kept in context (`ToolResult.keep_in_context`): history trimming never
drops the instructions the model is following.

A skill with `allowed-tools` narrows what may run from the moment it is loaded until the turn
that loaded it ends: `SkillGuard` (a `before_tool_call` hook that runs last, after any hook that
rewrites calls) refuses every other call, at call preparation, with a result that says why. The
tool list sent to the model does not change, so the provider's prompt cache is kept. The guard
fails closed: a call it cannot judge is refused.
"""

from __future__ import annotations

import io
from collections import OrderedDict
from collections.abc import Collection, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from heron._support.folder_files import FileRefused, check_relative, open_inside
from heron.skills.allowed import Narrowing
from heron.skills.catalogue import SkillCatalogue
from heron.skills.skill import SKILL_FOLDER
from heron.tools.definition import ToolAnnotations, ToolContext, ToolResult, ToolSpec
from heron.tools.validation import SchemaValidator
from heron.turn.hooks import Cancel, HookCall, Rewrite, ToolHook

__all__ = [
    "LOAD_SKILL",
    "READ_SKILL_FILE",
    "LoadSkillTool",
    "ReadSkillFileTool",
    "SkillGuard",
    "skill_tools",
]

LOAD_SKILL = "load_skill"
READ_SKILL_FILE = "read_skill_file"
MAX_FILE_CHARS = 100_000
_KEPT_TURNS = 64

_LOAD_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "The skill's name, as the skills list says."}
    },
    "required": ["name"],
    "additionalProperties": False,
}
_READ_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "The skill's name."},
        "path": {
            "type": "string",
            "description": "A file of the skill, relative to its folder (`references/format.md`).",
        },
    },
    "required": ["name", "path"],
    "additionalProperties": False,
}


class SkillGuard(ToolHook):
    """Refuses, for the rest of a turn, the calls a skill loaded in that turn does not allow.

    Runs after every other `before_tool_call` hook (lowest priority), so it judges the call as
    it will run. Each loaded skill with `allowed-tools` adds a narrowing; a call must pass all
    of them (loading a second skill never widens the first one's).
    """

    priority = -1_000_000

    def __init__(self) -> None:
        self._turns: OrderedDict[str, list[Narrowing]] = OrderedDict()

    def narrow(self, turn_id: str, narrowing: Narrowing) -> None:
        self._turns.setdefault(turn_id, []).append(narrowing)
        self._turns.move_to_end(turn_id)
        while len(self._turns) > _KEPT_TURNS:
            self._turns.popitem(last=False)

    def active(self, turn_id: str) -> list[Narrowing]:
        return list(self._turns.get(turn_id, ()))

    async def before_tool_call(self, call: HookCall) -> Rewrite | Cancel | None:
        narrowings = self._turns.get(call.turn_id)
        if not narrowings:
            return None
        try:
            for narrowing in narrowings:
                reason = narrowing.refusal(call.name, call.arguments)
                if reason is not None:
                    return Cancel(reason=reason)
        except Exception as exc:  # fail closed: a hook that raises would be skipped
            return Cancel(reason=f"the skill guard could not judge the call ({exc!r})")
        return None


def _spec(name: str, description: str, schema: Mapping[str, Any]) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=description,
        parameters=schema,
        annotations=ToolAnnotations(read_only=True, idempotent=True),
        owner="builtin",
    )


def _where(folder: Path, workspace: Path | None) -> str:
    path = folder.resolve()
    if workspace is not None and path.is_relative_to(workspace.resolve()):
        return path.relative_to(workspace.resolve()).as_posix()
    return str(path)


class LoadSkillTool:
    """`load_skill(name)`: a skill's instructions, with its folder and files."""

    def __init__(
        self,
        catalogue: SkillCatalogue,
        *,
        guard: SkillGuard | None = None,
        known_tools: Collection[str] | None = None,
        workspace: Path | None = None,
    ) -> None:
        self.catalogue = catalogue
        self.guard = guard
        self.known_tools = known_tools
        self.workspace = workspace
        self._validator = SchemaValidator(LOAD_SKILL, _LOAD_SCHEMA)
        self._spec = _spec(
            LOAD_SKILL,
            "Load a skill's instructions (listed under Skills in your instructions, or found by "
            "the search tool) before doing the task it is for, and follow them. The answer "
            "names the skill's folder and files; read them with read_skill_file, run its "
            "scripts with your usual tools.",
            _LOAD_SCHEMA,
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self._validator.validate(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        name = str(arguments["name"]).strip()
        skill = self.catalogue.get(name)
        if skill is None:
            known = ", ".join(self.catalogue.names()) or "(none)"
            return ToolResult.fail(f"no skill named {name!r}; the skills are: {known}")
        workspace = self.workspace or ctx.workspace
        folder = _where(skill.folder, workspace)
        files = skill.files()
        lines = [f"# Skill: {skill.name}", "", f"Folder: {folder}"]
        if files:
            lines.append("Files: " + ", ".join(files))
            lines.append(
                "Paths in the instructions are relative to the folder. Read a file with "
                f"read_skill_file; run a script from the workspace by its path there (e.g. "
                f"`python {folder}/scripts/...`)."
            )
        if skill.compatibility:
            lines.append(f"Compatibility: {skill.compatibility}")
        data: dict[str, Any] = {"skill": skill.name, "folder": folder, "files": files}
        if skill.allowed_tools is not None:
            narrowing = Narrowing(skill, known_tools=self.known_tools, workspace=workspace)
            if self.guard is not None:
                self.guard.narrow(ctx.turn_id, narrowing)
            lines.append(
                "Until this turn ends, only these tools may run: " + narrowing.describe() + "."
            )
            data["allowed_tools"] = list(skill.allowed_tools)
            if narrowing.ignored:
                data["ignored_entries"] = narrowing.ignored
        lines += ["", skill.body]
        return ToolResult.ok("\n".join(lines), data=data, keep_in_context=True)


class ReadSkillFileTool:
    """`read_skill_file(name, path)`: one text file inside a skill's folder."""

    def __init__(self, catalogue: SkillCatalogue) -> None:
        self.catalogue = catalogue
        self._validator = SchemaValidator(READ_SKILL_FILE, _READ_SCHEMA)
        self._spec = _spec(
            READ_SKILL_FILE,
            "Read a file of a loaded skill (a reference, a template, a script's source) by its "
            "path relative to the skill's folder.",
            _READ_SCHEMA,
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self._validator.validate(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        skill = self.catalogue.get(str(arguments["name"]))
        if skill is None:
            return ToolResult.fail(f"no skill named {arguments['name']!r}")
        rel = str(arguments["path"]).strip()
        refusal = f"{rel!r} is not a file inside the skill's folder"
        why = check_relative(rel, place=SKILL_FOLDER)
        if why is None and any(part.startswith(".") for part in PurePosixPath(rel).parts):
            # Not listed and not pinned: a hidden file could change after the approval unseen.
            why = "hidden files are not part of a skill"
        if why is not None or not rel:
            return ToolResult.fail(f"{refusal}: {why or 'the path is empty'}")
        try:
            with (
                open_inside(skill.folder, rel, place=SKILL_FOLDER) as (fh, _),
                io.TextIOWrapper(fh, encoding="utf-8") as text_fh,
            ):
                text = text_fh.read(MAX_FILE_CHARS + 1)  # never more than is shown
        except UnicodeDecodeError:
            return ToolResult.fail(f"{rel!r} is not a text file (use your file tools for it)")
        except FileNotFoundError:
            listed = ", ".join(skill.files()) or "(none)"
            return ToolResult.fail(f"the skill has no file {rel!r}; its files: {listed}")
        except FileRefused as exc:
            if exc.outside:  # a link: check_relative let the path itself through
                return ToolResult.fail(f"{refusal}: it links out of the skill's folder")
            return ToolResult.fail(f"{exc}; read the files the skill lists")
        except OSError as exc:
            return ToolResult.fail(f"cannot read {rel!r}: {exc.strerror or exc}")
        if len(text) > MAX_FILE_CHARS:
            text = text[:MAX_FILE_CHARS] + f"\n[cut at {MAX_FILE_CHARS:,} characters]"
        return ToolResult.ok(text, data={"skill": skill.name, "path": rel})


def skill_tools(
    catalogue: SkillCatalogue,
    *,
    known_tools: Collection[str] | None = None,
    workspace: Path | None = None,
) -> tuple[list[LoadSkillTool | ReadSkillFileTool], SkillGuard]:
    """`load_skill` and `read_skill_file` over `catalogue`, and the guard to pass to
    `Agent(hooks=[...])` so that `allowed-tools` is enforced."""
    guard = SkillGuard()
    tools: list[LoadSkillTool | ReadSkillFileTool] = [
        LoadSkillTool(catalogue, guard=guard, known_tools=known_tools, workspace=workspace),
        ReadSkillFileTool(catalogue),
    ]
    return tools, guard
