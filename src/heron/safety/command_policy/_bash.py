"""Bash words: quote removal, options and operands, and the wrappers that start another command.

A word is what bash would pass as one argument, or `None` where bash computes it at run time
(`$VAR`, `$(...)`, globs stay as written). Wrappers (`sudo`, `env VAR=x`, `nice`, `timeout`,
`xargs`, ...) are peeled off to the command they run, keeping the code they hand to a shell and
the directory they change to. Also here: the tree-sitter node helpers the walker uses, and the
names of shells, interpreters and downloaders, which decide whether code arrives on stdin.
"""

from __future__ import annotations

import codecs
import os
import re
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from tree_sitter import Node


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


_SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "mksh", "pdksh", "ash", "yash", "fish", "csh", "tcsh"}
)
_INTERPRETER = re.compile(
    r"^(python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node|nodejs|deno|bun|php[0-9.]*"
    r"|lua[0-9.]*|luajit|tclsh|wish|Rscript|julia|pwsh|powershell|osascript|groovy|jshell)$"
)
_DOWNLOADERS = _names(
    """
    curl wget fetch aria2c http https xh nc ncat netcat socat ftp tftp lwp-download
    lwp-request GET
    """
)


@dataclass(frozen=True, slots=True)
class _Word:
    value: str | None
    """The word after quote removal, or `None` when bash computes it at run time."""
    text: str
    node: Node | None = field(default=None, compare=False)


_UNKNOWN = _Word(None, "<computed at run time>")


def _text(node: Node | None) -> str:
    return "" if node is None or node.text is None else node.text.decode("utf-8", "replace")


def _descendants(node: Node) -> Iterator[Node]:
    stack = list(reversed(node.children))
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _static(node: Node) -> str | None:
    """The value of a word node after quote removal, or None if it needs expansion."""
    kind = node.type
    text = _text(node)
    if kind == "word":
        return re.sub(r"\\(.)", r"\1", text.replace("\\\n", ""))
    if kind == "number":
        return text
    if kind == "raw_string":
        return text[1:-1]
    if kind == "string":
        parts: list[str] = []
        for child in node.named_children:
            if child.type == "string_content":
                parts.append(re.sub(r'\\([$`"\\])', r"\1", _text(child).replace("\\\n", "")))
                continue
            value = _static(child) if child.type in ("simple_expansion", "expansion") else None
            if value is None:
                return None
            parts.append(value)
        return "".join(parts)
    if kind == "ansi_c_string":
        try:
            return codecs.decode(text[2:-1].encode("latin-1", "backslashreplace"), "unicode_escape")
        except (UnicodeDecodeError, UnicodeEncodeError):
            return None
    if kind in ("simple_expansion", "expansion"):
        names = [c for c in node.named_children if c.type == "variable_name"]
        if len(node.named_children) == 1 and names and _text(names[0]) == "HOME":
            return "~"  # $HOME and ${HOME}: the home directory, as for ~
        return None
    if kind == "concatenation":
        pieces = [_static(child) for child in node.named_children]
        if any(p is None for p in pieces):
            return None
        return "".join(p for p in pieces if p is not None)
    if kind == "command_name":
        return _static(node.named_children[0]) if node.named_children else None
    return None


def _word(node: Node) -> _Word:
    return _Word(_static(node), _text(node), node)


def _literal(value: str) -> _Word:
    return _Word(value, value)


def _split_options(
    args: Sequence[_Word], with_value: Collection[str]
) -> tuple[dict[str, _Word | None], list[_Word]]:
    """Leading options (and their values) and the rest; stops at `--` or the first operand."""
    options: dict[str, _Word | None] = {}
    index = 0
    while index < len(args):
        value = args[index].value
        if value is None or not value.startswith("-") or value == "-":
            break
        index += 1
        if value == "--":
            break
        if value.startswith("--") and "=" in value:
            key, _, rest = value.partition("=")
            options[key] = _literal(rest)
        elif value in with_value:
            options[value] = args[index] if index < len(args) else None
            index += 1
        elif not value.startswith("--") and len(value) > 2 and value[:2] in with_value:
            options[value[:2]] = _literal(value[2:])
        else:
            options[value] = None
    return options, list(args[index:])


def _operands(
    args: Sequence[_Word], with_value: Collection[str]
) -> tuple[dict[str, _Word | None], list[_Word]]:
    """Options anywhere on the line (GNU style) and the operands; `--` ends options."""
    options: dict[str, _Word | None] = {}
    operands: list[_Word] = []
    index = 0
    while index < len(args):
        word = args[index]
        value = word.value
        index += 1
        if value == "--":
            operands.extend(args[index:])
            break
        if value is None or not value.startswith("-") or value == "-":
            operands.append(word)
            continue
        chunk_options, _ = _split_options([word, *args[index : index + 1]], with_value)
        options.update(chunk_options)
        if value in with_value:
            index += 1
    return options, operands


def _short_flags(options: Iterable[str]) -> set[str]:
    """Single letters of short option clusters (`-rf` gives r and f)."""
    return {letter for opt in options if not opt.startswith("--") for letter in opt[1:]}


@dataclass(slots=True)
class _Unwrapped:
    """A simple command with its wrappers peeled off."""

    argv: list[_Word]
    wrappers: list[str] = field(default_factory=list)
    code: list[_Word] = field(default_factory=list)
    """Command strings a wrapper hands to a shell (`su -c`, `env -S`, `flock -c`, `watch`)."""
    chdir: _Word | None = None
    extra_operands: bool = False
    """`xargs` appends operands read from stdin."""


@dataclass(frozen=True, slots=True)
class _WrapperSpec:
    with_value: frozenset[str] = frozenset()
    skip_operands: int = 0
    no_command_flags: frozenset[str] = frozenset()
    code_options: frozenset[str] = frozenset()
    chdir_options: frozenset[str] = frozenset()


def _spec(
    with_value: str = "",
    *,
    skip: int = 0,
    no_command: str = "",
    code: str = "",
    chdir: str = "",
) -> _WrapperSpec:
    code_set = frozenset(code.split())
    chdir_set = frozenset(chdir.split())
    return _WrapperSpec(
        with_value=frozenset(with_value.split()) | code_set | chdir_set,
        skip_operands=skip,
        no_command_flags=frozenset(no_command.split()),
        code_options=code_set,
        chdir_options=chdir_set,
    )


_WRAPPERS: dict[str, _WrapperSpec] = {
    "env": _spec("-u --unset", code="-S --split-string", chdir="-C --chdir"),
    "command": _spec(no_command="-v -V"),
    "builtin": _spec(),
    "exec": _spec("-a"),
    "nohup": _spec(),
    "setsid": _spec(),
    "time": _spec("-f --format -o --output"),
    "nice": _spec("-n --adjustment"),
    "ionice": _spec("-c --class -n --classdata", no_command="-p --pid -P --pgid -u --uid"),
    "timeout": _spec("-s --signal -k --kill-after", skip=1),
    "stdbuf": _spec("-i -o -e --input --output --error"),
    "chrt": _spec(no_command="-p --pid", skip=1),
    "taskset": _spec(no_command="-p --pid", skip=1),
    "flock": _spec("-w --timeout -E --conflict-exit-code", skip=1, code="-c --command"),
    "xargs": _spec(
        "-a --arg-file -d --delimiter -E -e -I -i -L -l -n --max-args -P --max-procs -s "
        "--max-chars --process-slot-var"
    ),
    "sudo": _spec(
        "-u --user -g --group -C --close-from -h --host -p --prompt -r --role -t --type "
        "-T --command-timeout -U --other-user",
        no_command="-l --list -v --validate -k -K --reset-timestamp -e --edit -V --version",
        chdir="-D --chdir",
    ),
    "doas": _spec("-u -C"),
    "pkexec": _spec("--user"),
    "runuser": _spec("-u --user -g --group -G --supp-group", code="-c --command"),
    "su": _spec("-g --group -G --supp-group -s --shell", code="-c --command", skip=1),
    "busybox": _spec(),
}


def _unwrap(words: Sequence[_Word]) -> _Unwrapped:
    """Peel `sudo`, `env`, `nice`, `timeout`, `xargs`, ... off a simple command."""
    result = _Unwrapped(argv=list(words))
    while result.argv and result.argv[0].value is not None:
        name = os.path.basename(result.argv[0].value)
        spec = _WRAPPERS.get(name)
        if spec is None:
            break
        result.wrappers.append(name)
        options, rest = _split_options(result.argv[1:], spec.with_value)
        for key, value in options.items():
            if key in spec.code_options:
                result.code.append(value or _UNKNOWN)
            elif key in spec.chdir_options:
                result.chdir = value or _UNKNOWN
        if name == "env":
            while rest and rest[0].value is not None and re.match(r"^\w+=", rest[0].value):
                rest = rest[1:]
        if name == "su" or (name == "runuser" and options.keys() & {"-c", "--command"}):
            rest = []  # su-style: a command, if any, came with -c
        if name == "xargs":
            result.extra_operands = True
        if options.keys() & spec.no_command_flags:
            rest = []
        rest = rest[spec.skip_operands :] if rest else rest
        result.argv = rest
    if result.argv and result.argv[0].value == "watch":
        result.wrappers.append("watch")
        _, rest = _split_options(result.argv[1:], {"-n", "--interval", "-d", "-q"})
        result.code.append(_join(rest))
        result.argv = []
    return result


def _join(words: Sequence[_Word]) -> _Word:
    values = [w.value for w in words]
    text = " ".join(w.text for w in words)
    if any(v is None for v in values):
        return _Word(None, text)
    return _Word(" ".join(v for v in values if v is not None), text)


def _command_words(node: Node) -> list[_Word]:
    name = node.child_by_field_name("name")
    if name is None:
        return []
    return [_word(name), *(_word(a) for a in node.children_by_field_name("argument"))]


def _commands_in(node: Node, *, substitutions: bool) -> Iterator[Node]:
    """`command` nodes under `node`, optionally skipping command/process substitutions."""
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == "command":
            yield current
        if not substitutions and current.type in ("command_substitution", "process_substitution"):
            continue
        stack.extend(current.named_children)


def _effective_name(node: Node) -> str | None:
    argv = _unwrap(_command_words(node)).argv
    if not argv or argv[0].value is None:
        return None
    return os.path.basename(argv[0].value)


def _has_downloader(node: Node | None) -> bool:
    if node is None:
        return False
    return any(
        _effective_name(cmd) in _DOWNLOADERS for cmd in _commands_in(node, substitutions=True)
    )


def _reads_code_from_stdin(argv: Sequence[_Word]) -> bool:
    """An interpreter with no script operand and no inline code: it runs what stdin supplies."""
    name = os.path.basename(argv[0].value or "")
    if name not in _SHELLS and not _INTERPRETER.match(name):
        return False
    for word in argv[1:]:
        value = word.value
        if value is None:
            return False
        if value in ("-", "/dev/stdin", "--"):
            return True
        if value in ("-c", "-e", "-m", "-p", "-E", "--eval", "--command", "-r", "--run"):
            return False
        if value.startswith("-"):
            if name in _SHELLS and not value.startswith("--") and "c" in value[1:]:
                return False
            continue
        return False  # a script file
    return True


def _is_process_substitution(word: _Word) -> bool:
    return word.node is not None and word.node.type == "process_substitution"


def _inside(node: Node, kind: str, stop: Node) -> bool:
    current = node.parent
    while current is not None and current.id != stop.id:
        if current.type == kind:
            return True
        current = current.parent
    return False


def _stdin_code(node: Node) -> _Word | None:
    """Shell code fed to `node` by a here-document or here-string, if any."""
    candidates = list(node.children_by_field_name("redirect"))
    parent = node.parent
    if parent is not None and parent.type == "redirected_statement":
        body = parent.child_by_field_name("body")
        if body is not None and body.id == node.id:
            candidates += parent.children_by_field_name("redirect")
    for redirect in candidates:
        if redirect.type == "herestring_redirect":
            content = next(iter(redirect.named_children), None)
            if content is not None:
                return _word(content)
        if redirect.type == "heredoc_redirect":
            body_node = next((c for c in redirect.named_children if c.type == "heredoc_body"), None)
            if body_node is not None:
                return _Word(_text(body_node), _text(body_node), body_node)
    return None
