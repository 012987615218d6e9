"""Agent definitions: `[agents.NAME]` in heron.toml and `agents/NAME.md` files.

A file is Markdown with YAML front matter, the convention other harnesses use::

    ---
    name: researcher
    description: Finds and summarises sources on one question.
    model: scripted:researcher.json
    tools: [read_file, web_fetch]
    max_iterations: 6
    ---
    You research one question and hand back a short, sourced answer.

The body is the role prompt. heron.toml is the operator's own file, so its `[agents.*]` take
effect at once; files in the project's `agents/` directory come with a repository someone
else wrote, so — like MCP servers — they are pinned: a file's prompt, tools and model take
effect only after `heron agents approve NAME`, and a changed file is refused (with the diff
shown) until it is approved again. The pins reuse the MCP trust store (`SqliteTrustStore`,
table `agent_pins`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from heron._support.folder_files import FileRefused, FileTooLarge, open_inside, read_at_most
from heron._support.front_matter import load_front_matter, split_front_matter
from heron.always_on.subagents.config import AgentEntry
from heron.errors import ConfigurationError
from heron.mcp.trust.pins import (
    ServerIdentity,
    ToolDefinition,
    TrustStore,
    compare_pin,
)

__all__ = [
    "AgentDefinition",
    "AgentFileError",
    "approve_file",
    "load_definitions",
    "parse_agent_file",
]

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_MAX_FILE_BYTES = 256 * 1024
AGENTS_FOLDER = "the agents folder"
"""How messages name the folder an agent file must stay in (a link out of it is not read)."""
Trust = Literal["config", "approved", "unapproved", "changed"]


class AgentFileError(ConfigurationError, ValueError):
    """An agent file or `[agents.NAME]` entry that cannot be used; names every problem."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentDefinition:
    """One agent that can be spawned."""

    name: str
    description: str
    model: str | None
    """A model string as the CLI takes it; `None`: the parent's model."""
    tools: tuple[str, ...] | None
    """Tool names within the parent's grant; `None`: the whole grant."""
    prompt: str
    max_iterations: int | None = None
    model_calls: int | None = None
    total_tokens: int | None = None
    wall_time_s: float | None = None
    source: str = "heron.toml"
    """`heron.toml`, or the path of the agent file."""
    trust: Trust = "config"
    """`config` (heron.toml), `approved`, or — for a project file — `unapproved` / `changed`,
    when its prompt, tools and model must not take effect."""
    changes: str = ""
    """For a changed file: the unified diff from the approved text."""
    text: str = ""
    """The file as read (empty for heron.toml entries): what an approval pins."""

    @property
    def usable(self) -> bool:
        return self.trust in ("config", "approved")

    def to_data(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "model": self.model,
            "tools": list(self.tools) if self.tools is not None else None,
            "source": self.source,
            "trust": self.trust,
        }


def _check_name(name: str, where: str) -> None:
    if not _NAME.match(name):
        raise AgentFileError(
            f"{where}: agent name {name!r} must be 1-64 lowercase letters, digits, '-' or '_'"
        )


def _from_entry(name: str, entry: AgentEntry, **extra: Any) -> AgentDefinition:
    return AgentDefinition(
        name=name,
        description=entry.description,
        model=entry.model,
        tools=tuple(entry.tools) if entry.tools is not None else None,
        prompt=entry.prompt.strip(),
        max_iterations=entry.max_iterations,
        model_calls=entry.model_calls,
        total_tokens=entry.total_tokens,
        wall_time_s=entry.wall_time_s,
        **extra,
    )


def _read_agent_file(path: Path) -> str:
    """The file's text: only a regular file inside its folder, never more than the bound."""
    try:
        with open_inside(path.parent, path.name, place=AGENTS_FOLDER) as (fh, size):
            raw = read_at_most(fh, size, _MAX_FILE_BYTES)
    except FileTooLarge:
        raise AgentFileError(f"{path}: larger than {_MAX_FILE_BYTES} bytes") from None
    except FileRefused as exc:
        raise AgentFileError(f"{path}: {exc}") from None
    except OSError as exc:
        raise AgentFileError(f"{path}: cannot read: {exc.strerror}") from None
    return raw.decode("utf-8", errors="replace")


def _yaml_why(exc: yaml.YAMLError) -> str:
    """What YAML refused, at its line of the file (the front matter starts on line 2)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        return f"line {exc.problem_mark.line + 2}: {exc.problem or exc.context}"
    return str(exc)


def parse_agent_file(path: Path) -> AgentDefinition:
    """The definition in one `agents/NAME.md` file (trust not yet decided: `unapproved`)."""
    text = _read_agent_file(path)
    split = split_front_matter(text)
    if split is None:
        raise AgentFileError(f"{path}: no YAML front matter (a '---' block at the top)")
    head, body, _ = split
    try:
        front = load_front_matter(head) or {}
    except yaml.YAMLError as exc:  # the bounds' refusals too (`FrontMatterRefused`)
        raise AgentFileError(f"{path}: front matter is not valid YAML: {_yaml_why(exc)}") from None
    if not isinstance(front, dict):
        raise AgentFileError(f"{path}: front matter must be a mapping")
    name = front.pop("name", path.stem)
    if not isinstance(name, str):
        raise AgentFileError(f"{path}: 'name' must be a string")
    _check_name(name, str(path))
    if name != path.stem:
        raise AgentFileError(f"{path}: the file of agent {name!r} must be named {name}.md")
    try:
        entry = AgentEntry.model_validate({**front, "prompt": body})
    except ValidationError as exc:
        problems = [f"'{'.'.join(map(str, e['loc']))}': {e['msg']}" for e in exc.errors()]
        raise AgentFileError(f"{path}", problems=problems) from None
    return _from_entry(name, entry, source=str(path), trust="unapproved", text=text)


def _identity(definition: AgentDefinition) -> ServerIdentity:
    return ServerIdentity(launch=f"agent file {Path(definition.source).name}")


def _pinned(definition: AgentDefinition) -> tuple[ToolDefinition, ...]:
    return (ToolDefinition(server=definition.name, name="agent", description=definition.text),)


def _judge(definition: AgentDefinition, pins: TrustStore) -> AgentDefinition:
    pin = pins.get(definition.name)
    check = compare_pin(pin, _identity(definition), _pinned(definition))
    if check.status == "match":
        return replace(definition, trust="approved")
    if pin is None or check.status == "unpinned":
        return definition
    before = pin.definitions[0].description if pin.definitions else ""
    diff = "\n".join(
        difflib.unified_diff(
            before.splitlines(),
            definition.text.splitlines(),
            fromfile=f"approved/{definition.name}.md",
            tofile=f"now/{definition.name}.md",
            lineterm="",
        )
    )
    return replace(definition, trust="changed", changes=diff)


def load_definitions(
    entries: Mapping[str, AgentEntry], agents_dir: Path | None, pins: TrustStore | None
) -> dict[str, AgentDefinition]:
    """Every agent by name: heron.toml's entries, and the files of `agents_dir` judged against
    `pins` (a name in both is an error: which one would run is not obvious)."""
    found: dict[str, AgentDefinition] = {}
    for name, entry in entries.items():
        _check_name(name, f"[agents.{name}]")
        found[name] = _from_entry(name, entry)
    if agents_dir is None or not agents_dir.is_dir():
        return found
    for path in sorted(agents_dir.glob("*.md")):
        definition = parse_agent_file(path)
        if definition.name in found:
            raise AgentFileError(
                f"agent {definition.name!r} is defined both in heron.toml and in {path}"
            )
        found[definition.name] = _judge(definition, pins) if pins is not None else definition
    return found


def approve_file(definition: AgentDefinition, pins: TrustStore) -> None:
    """Pin an agent file as it is now: its prompt, tools and model take effect."""
    if definition.trust == "config":
        raise AgentFileError(f"agent {definition.name!r} is in heron.toml: nothing to approve")
    pins.approve(definition.name, _identity(definition), _pinned(definition))
