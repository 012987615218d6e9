"""The walk over a parsed command: scopes, places, and the checks every simple command gets.

`_Analysis` parses bash with tree-sitter and walks the tree: pipelines, lists, subshells,
substitutions, function bodies and redirections. Each simple command is unwrapped (`_bash`),
checked against the deployment (privilege wrappers, the allow-list, high-risk patterns) and
handed to the rule for its name (`_rules`). The working directories a command may run in are
followed through `cd` as a `_Scope`; a path is resolved against each of them to a `_Place`
(inside the workspace, outside it, a device, harmless, or known only at run time).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from tree_sitter import Node, Parser

from heron._support.own_paths import claimed_state_dirs, config_files_touched
from heron.safety.command_policy._bash import (
    _UNKNOWN,
    _command_words,
    _commands_in,
    _descendants,
    _effective_name,
    _has_downloader,
    _inside,
    _names,
    _reads_code_from_stdin,
    _stdin_code,
    _text,
    _unwrap,
    _Word,
    _word,
)
from heron.safety.command_policy._verdict import Finding, RiskLevel

_SEGMENT_MAX = 200


# Shell builtins that never need to be on a deployment's allow-list.
_ALWAYS_PERMITTED = _names(
    "cd pushd popd dirs : true false test [ set shift exit return break continue wait read"
)
_PRIVILEGE = frozenset({"sudo", "doas", "su", "pkexec", "runuser", "sudoedit"})
_HARMLESS_PATHS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/zero"})
_HARMLESS_FD = re.compile(r"^/(dev|proc/self)/fd/\d+$")
_WRITE_REDIRECTS = frozenset({">", ">>", "&>", "&>>", ">|", "<>"})


class _Settings(Protocol):
    """What the walk and the rules read from the deployment's `CommandPolicy`."""

    @property
    def allowed_commands(self) -> frozenset[str] | None: ...
    @property
    def low_risk_commands(self) -> frozenset[str]: ...
    @property
    def high_risk_patterns(self) -> tuple[re.Pattern[str], ...]: ...
    @property
    def writable_roots(self) -> tuple[Path, ...]: ...
    @property
    def max_nesting(self) -> int: ...


_Rule = Callable[["_Analysis", "_Cmd"], None]
"""Judges one simple command: adds findings, or (`cd`) changes the scope."""


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SEGMENT_MAX else text[: _SEGMENT_MAX - 1] + "…"


def _is_glob(part: str) -> bool:
    return any(ch in part for ch in "*?[")


@dataclass(slots=True)
class _Scope:
    """Possible working directories at this point; `None` stands for one heron cannot know."""

    cwds: frozenset[Path | None]

    def fork(self) -> _Scope:
        return _Scope(self.cwds)


@dataclass(frozen=True, slots=True)
class _Place:
    kind: Literal["inside", "outside", "unknown", "device", "harmless"]
    shown: str


_PLACE_RANK = {"harmless": 0, "inside": 1, "unknown": 2, "outside": 3, "device": 4}


@dataclass(slots=True)
class _Cmd:
    """A simple command after unwrapping, in its scope."""

    name: str
    args: list[_Word]
    seg: str
    scope: _Scope
    depth: int
    stdin: _Word | None


class _Analysis:
    """One classification: walks the code and collects the findings of every rule it meets."""

    def __init__(self, policy: _Settings, parser: Parser, rule_for: Callable[[str], _Rule]) -> None:
        self.policy = policy
        self.parser = parser
        self.rule_for = rule_for
        self.findings: list[Finding] = []

    def add(self, risk: RiskLevel, rule: str, reason: str, segment: str) -> None:
        self.findings.append(Finding(risk=risk, rule=rule, reason=reason, segment=_clip(segment)))

    # -- walking

    def code(self, source: str, scope: _Scope, depth: int) -> None:
        """Parse `source` as bash and analyse it in `scope`."""
        if depth > self.policy.max_nesting:
            self.add("high", "nesting-too-deep", "shell code nested too deeply to check", source)
            return
        tree = self.parser.parse(source.encode("utf-8"))
        if tree.root_node.has_error:
            self.add(
                "high",
                "unparseable",
                "the command does not parse as shell syntax, so it cannot be checked",
                source,
            )
        self.walk(tree.root_node, scope, depth)

    def walk(self, node: Node, scope: _Scope, depth: int) -> None:
        kind = node.type
        if kind == "command":
            self._command(node, scope, depth)
        elif kind == "file_redirect":
            self._redirect(node, scope)
            for child in node.named_children:
                self.walk(child, scope.fork(), depth)
        elif kind in ("subshell", "command_substitution", "process_substitution"):
            inner = scope.fork()
            for child in node.named_children:
                self.walk(child, inner, depth)
        elif kind == "pipeline":
            self._pipeline(node, scope, depth)
        elif kind == "function_definition":
            self._function(node, scope, depth)
        else:
            for child in node.named_children:
                self.walk(child, scope, depth)

    def _command(self, node: Node, scope: _Scope, depth: int) -> None:
        name = node.child_by_field_name("name")
        arguments = node.children_by_field_name("argument")
        word_ids = {n.id for n in arguments} | ({name.id} if name is not None else set())
        for child in node.named_children:
            if child.id in word_ids:
                self.walk(child, scope.fork(), depth)  # substitutions run before the command
            else:
                self.walk(child, scope, depth)  # assignments and redirections
        if name is None:
            return
        self.simple(_command_words(node), _text(node), scope, depth, _stdin_code(node))

    def simple(
        self,
        words: list[_Word],
        segment: str,
        scope: _Scope,
        depth: int,
        stdin_code: _Word | None,
    ) -> None:
        if words[0].value is None:
            self.dynamic(words[0], segment, "the command name")
            return
        unwrapped = _unwrap(words)
        for wrapper in unwrapped.wrappers:
            if wrapper in _PRIVILEGE:
                self.add(
                    "high",
                    "privilege-escalation",
                    f"`{wrapper}` runs a command with another user's privileges",
                    segment,
                )
        for code in unwrapped.code:
            self.run_code(code, segment, scope, depth)
        if not unwrapped.argv:
            return
        if unwrapped.chdir is not None:
            scope = _Scope(frozenset(self.resolve_dirs(unwrapped.chdir, scope)))
        argv = unwrapped.argv
        if argv[0].value is None:
            self.dynamic(argv[0], segment, "the command name")
            return
        name = os.path.basename(argv[0].value)
        policy = self.policy
        if (
            policy.allowed_commands is not None
            and name not in policy.allowed_commands
            and name not in _ALWAYS_PERMITTED
        ):
            self.add(
                "high",
                "not-allowed",
                f"`{name}` is not among this deployment's allowed commands",
                segment,
            )
        unwrapped_text = " ".join(w.value if w.value is not None else w.text for w in argv)
        for pattern in policy.high_risk_patterns:
            if pattern.search(segment) or pattern.search(unwrapped_text):
                self.add(
                    "high",
                    "deployment-pattern",
                    f"matches the deployment's high-risk pattern /{pattern.pattern}/",
                    segment,
                )
        args = list(argv[1:])
        if unwrapped.extra_operands:
            args.append(_UNKNOWN)
        cmd = _Cmd(name, args, segment, scope, depth, stdin_code)
        self.rule_for(name)(self, cmd)

    def _pipeline(self, node: Node, scope: _Scope, depth: int) -> None:
        stages = node.named_children
        for stage in stages:
            self.walk(stage, scope.fork(), depth)
        fetched = False
        for stage in stages:
            if fetched:
                for command in _commands_in(stage, substitutions=False):
                    argv = _unwrap(_command_words(command)).argv
                    if argv and _stdin_code(command) is None and _reads_code_from_stdin(argv):
                        self.add(
                            "high",
                            "download-to-interpreter",
                            "downloaded content is piped into an interpreter that runs it",
                            _text(node),
                        )
            fetched = fetched or _has_downloader(stage)

    def _function(self, node: Node, scope: _Scope, depth: int) -> None:
        name = _text(node.child_by_field_name("name"))
        body = node.child_by_field_name("body")
        if body is None:
            return
        calls = [c for c in _commands_in(body, substitutions=True) if _effective_name(c) == name]
        if calls:
            background = any(n.type == "&" for n in _descendants(body))
            piped = any(_inside(call, "pipeline", body) for call in calls)
            if background or piped or len(calls) > 1:
                self.add(
                    "high",
                    "fork-bomb",
                    f"function `{name}` calls itself in a pipeline or in the background, "
                    "multiplying processes without bound",
                    _text(node),
                )
            else:
                self.add(
                    "medium", "recursive-function", f"function `{name}` calls itself", _text(node)
                )
        self.walk(body, scope.fork(), depth)

    def _redirect(self, node: Node, scope: _Scope) -> None:
        operator = next((c.type for c in node.children if not c.is_named), "")
        destination = node.child_by_field_name("destination")
        if destination is None:
            return
        target = _word(destination)
        if operator in (">&", "<&"):
            if operator == "<&" or destination.type == "number" or target.value == "-":
                return
        elif operator not in _WRITE_REDIRECTS:
            return
        statement = node.parent
        while statement is not None and statement.type == "heredoc_redirect":
            statement = statement.parent
        segment = _text(statement if statement is not None else node)
        self.write(target, scope, segment, "redirects output to")

    # -- places

    def locate(self, word: _Word, scope: _Scope) -> _Place:
        value = word.value
        if value is None:
            return _Place("unknown", f"`{word.text}`")
        if value in ("", "-") or value in _HARMLESS_PATHS or _HARMLESS_FD.match(value):
            return _Place("harmless", value)
        if value.startswith("~"):
            return _Place("outside", "the home directory" if value in ("~", "~/") else value)
        path = Path(value)
        places: list[_Place] = []
        if path.is_absolute():
            places.append(self._place(path))
        else:
            for cwd in scope.cwds:
                if cwd is None:
                    places.append(_Place("unknown", f"`{value}` in a directory chosen at run time"))
                else:
                    places.append(self._place(cwd / path))
        return max(places, key=lambda p: _PLACE_RANK[p.kind])

    def _place(self, path: Path) -> _Place:
        parts = [
            ".."
            if part.startswith(".") and _is_glob(part) and fnmatch.fnmatch("..", part)
            else part
            for part in path.parts
        ]
        resolved = Path(*parts).resolve()
        shown = "the root directory /" if resolved == Path("/") else str(resolved)
        if str(resolved) in _HARMLESS_PATHS:
            return _Place("harmless", shown)
        if resolved.parts[:2] == ("/", "dev"):
            return _Place("device", shown)
        # heron's own files count as outside: a write there needs an operator, whatever the
        # autonomy (heron._support.own_paths).
        if any(resolved.is_relative_to(state) for state in claimed_state_dirs()):
            return _Place("outside", f"{shown} (heron's state directory)")
        if config_files_touched(resolved):
            return _Place("outside", f"{shown} (heron's configuration)")
        if any(resolved.is_relative_to(root) for root in self.policy.writable_roots):
            return _Place("inside", shown)
        return _Place("outside", shown)

    def resolve_dirs(self, word: _Word, scope: _Scope) -> set[Path | None]:
        """Where `cd word` may lead from each possible working directory."""
        value = word.value
        if value is None or value.startswith("~") or value == "-":
            return {None}
        path = Path(value)
        if path.is_absolute():
            return {path.resolve()}
        return {None if cwd is None else (cwd / path).resolve() for cwd in scope.cwds}

    def write(self, word: _Word, scope: _Scope, segment: str, verb: str) -> None:
        place = self.locate(word, scope)
        if place.kind == "device":
            self.add("high", "device-write", f"{verb} the device {place.shown}", segment)
        elif place.kind == "outside":
            self.add(
                "high",
                "write-outside-workspace",
                f"{verb} {place.shown}, outside the workspace",
                segment,
            )
        elif place.kind == "unknown":
            self.add(
                "medium",
                "write-unresolved",
                f"{verb} {place.shown}, known only at run time",
                segment,
            )

    def delete(self, word: _Word, cmd: _Cmd, *, recursive: bool, how: str = "") -> None:
        place = self.locate(word, cmd.scope)
        how = how or ("recursively deletes" if recursive else "deletes")
        if place.kind == "device":
            self.add("high", "device-write", f"{how} the device {place.shown}", cmd.seg)
        elif place.kind == "outside":
            rule = "recursive-delete-outside-workspace" if recursive else "delete-outside-workspace"
            self.add("high", rule, f"{how} {place.shown}, outside the workspace", cmd.seg)
        elif place.kind == "unknown":
            if recursive:
                self.add(
                    "high",
                    "recursive-delete-unresolved",
                    f"{how} {place.shown}, a target known only at run time",
                    cmd.seg,
                )
            else:
                self.add(
                    "medium",
                    "delete-unresolved",
                    f"{how} {place.shown}, known only at run time",
                    cmd.seg,
                )
        elif place.kind == "inside":
            self.add("medium", "delete-in-workspace", f"{how} {place.shown}", cmd.seg)

    # -- code known only at run time, or handed to another shell

    def dynamic(self, word: _Word, segment: str, what: str) -> None:
        if _has_downloader(word.node):
            self.add(
                "high",
                "download-to-interpreter",
                "downloaded content is run as code",
                segment,
            )
        else:
            self.add(
                "high",
                "dynamic-code",
                f"{what} `{word.text}` is computed at run time, so it cannot be checked",
                segment,
            )

    def run_code(self, code: _Word, segment: str, scope: _Scope, depth: int) -> None:
        if code.value is None:
            self.dynamic(code, segment, "the shell code")
        else:
            self.code(code.value, scope.fork(), depth + 1)
