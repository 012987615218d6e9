"""Command policy: parse a shell command and classify what it would do.

The command is parsed with tree-sitter-bash, never matched as a string, so the policy sees
what bash would run: every simple command in pipelines, lists (`;`, `&&`, `||`), subshells,
command and process substitutions (`$(...)`, backticks, `<(...)`), function bodies, loops and
conditionals; every redirection; wrappers (`sudo`, `env VAR=x cmd`, `command`, `nice`,
`timeout`, `xargs`, `find -exec`, ...) are unwrapped to the command they start; code handed to
another shell (`bash -c "..."`, `eval`, `trap`, here-documents fed to `sh`) is parsed again.

Each finding has a risk level and names the command segment that caused it:

- **low** — runs: inspection commands, and writes whose target is inside the workspace;
- **medium** — needs approval: deletions and permission changes inside the workspace, network
  clients, interpreters and scripts (their effect cannot be seen from the command line),
  commands the policy has no rule for, targets computed at run time;
- **high** — refused unless the deployment allows high risk (then it needs approval like
  medium): privilege escalation, recursive deletes outside the workspace (`rm -rf /`, `~`, `*`
  after `cd /`), raw device writes (`dd of=/dev/sda`), file-system and disk tools (`mkfs`),
  downloads piped into an interpreter (`curl … | sh`), fork bombs, any write outside the
  workspace (redirections, `tee`, `cp`/`mv` targets, `chmod -R 777 /`), shutdown/reboot and
  other system administration, code or command names computed at run time, and input that
  does not parse.

The working directory is followed through `cd`: after `cd /tmp; rm -rf *` the `*` may be in
/tmp. Where a command may or may not have changed directory, every candidate is checked.

This is one layer, not the sandbox: an interpreter or a compiled program can do anything its
sandbox allows, whatever its command line says.
"""

from __future__ import annotations

import codecs
import fnmatch
import os
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

__all__ = [
    "DEFAULT_LOW_RISK_COMMANDS",
    "CommandPolicy",
    "CommandVerdict",
    "Decision",
    "Finding",
    "RiskLevel",
]

RiskLevel = Literal["low", "medium", "high"]
Decision = Literal["run", "needs_approval", "refuse"]
_RANK: dict[RiskLevel, int] = {"low": 0, "medium": 1, "high": 2}
_SEGMENT_MAX = 200


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


DEFAULT_LOW_RISK_COMMANDS: frozenset[str] = _names(
    """
    ls dir vdir cat tac head tail less more wc grep egrep fgrep rg ag ack echo printf pwd date
    cal whoami id groups uname uptime hostname df du free file stat which whereis type true
    false test [ : sort uniq cut tr paste join comm column fold fmt nl rev expand unexpand diff
    cmp sdiff basename dirname realpath readlink printenv seq sleep tree jq yq xxd od hexdump
    strings md5sum sha1sum sha224sum sha256sum sha384sum sha512sum b2sum cksum sum base64 base32
    expr bc factor numfmt ps pgrep nproc arch locale getconf lscpu lsblk zcat bzcat xzcat zgrep
    mkdir touch cd pushd popd dirs set shift exit return break continue wait read help
    """
)
"""Commands that only inspect, print or create (their write targets are still checked)."""

# Shell builtins that never need to be on a deployment's allow-list.
_ALWAYS_PERMITTED = _names(
    "cd pushd popd dirs : true false test [ set shift exit return break continue wait read"
)
_PRIVILEGE = frozenset({"sudo", "doas", "su", "pkexec", "runuser", "sudoedit"})
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
_NETWORK = _DOWNLOADERS | {"ssh", "scp", "sftp", "rsync", "telnet", "ping", "dig", "nslookup"}
_POWER = frozenset({"shutdown", "reboot", "halt", "poweroff", "init", "telinit"})
_POWER_VERBS = frozenset(
    {"poweroff", "reboot", "halt", "kexec", "suspend", "hibernate", "hybrid-sleep", "isolate"}
)
_DISK = _names(
    """
    mke2fs mkswap mkdosfs fdisk sfdisk cfdisk gdisk sgdisk parted wipefs blkdiscard hdparm
    badblocks cryptsetup mdadm dmsetup lvremove vgremove pvremove zpool debugfs
    """
)
_ADMIN = _names(
    """
    mount umount swapon swapoff insmod rmmod modprobe sysctl iptables ip6tables nft ufw
    firewall-cmd useradd userdel usermod groupadd groupdel groupmod passwd chpasswd chsh
    visudo chroot setenforce service update-rc.d launchctl hostnamectl timedatectl killall5
    """
)
_PACKAGE_MANAGERS = _names(
    """
    apt apt-get aptitude dpkg yum dnf rpm apk pacman zypper snap flatpak brew port emerge
    nix-env
    """
)
_PACKAGE_VERBS = _names(
    """
    install reinstall remove purge upgrade dist-upgrade full-upgrade autoremove erase add
    del uninstall -i --install -r --remove -P --purge -e -U -S -R -Syu -Rs -Rns
    """
)
_GIT_READ = _names(
    """
    status log diff show rev-parse ls-files ls-tree grep blame describe shortlog cat-file
    reflog whatchanged name-rev merge-base show-ref for-each-ref count-objects version help
    """
)
_HARMLESS_PATHS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/zero"})
_HARMLESS_FD = re.compile(r"^/(dev|proc/self)/fd/\d+$")
_WRITE_REDIRECTS = frozenset({">", ">>", "&>", "&>>", ">|", "<>"})
_SED_EXEC_OR_WRITE = re.compile(
    r"(?:^|[;\n{}])\s*(?:[\d,$~+]+|/[^/]*/)?\s*!?\s*[ewW](?:\s|$)"
    r"|s(.)(?:(?!\1).)*\1(?:(?!\1).)*\1[gpiImM0-9]*[ew]"
)
_AWK_EXEC_OR_WRITE = re.compile(r"\bsystem\s*\(|\||\bprintf?\b[^;}]*>")


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One reason a command is not plain low risk, with the segment that caused it."""

    risk: RiskLevel
    rule: str
    """A stable identifier, e.g. `recursive-delete-outside-workspace`."""
    reason: str
    segment: str
    """The part of the command (a simple command, pipeline or redirection) that caused it."""

    def describe(self) -> str:
        return f"{self.risk} [{self.rule}] {self.reason} — in `{self.segment}`"


@dataclass(frozen=True, kw_only=True, slots=True)
class CommandVerdict:
    """The classification of one command: the highest risk found and every finding."""

    command: str
    risk: RiskLevel
    findings: tuple[Finding, ...] = ()

    def explain(self) -> str:
        if not self.findings:
            return f"risk {self.risk}: nothing beyond inspection or workspace writes"
        return f"risk {self.risk}:\n" + "\n".join(f"- {f.describe()}" for f in self.findings)

    def to_data(self) -> dict[str, Any]:
        return {
            "risk": self.risk,
            "findings": [
                {"risk": f.risk, "rule": f.rule, "reason": f.reason, "segment": f.segment}
                for f in self.findings
            ],
        }


class CommandPolicy:
    """A deployment's command policy.

    - `workspace`: the only tree commands may write to (plus `writable_roots`).
    - `allowed_commands`: when given, any other command (after unwrapping `sudo`, `env`, ...)
      is high risk. Harmless shell builtins (`cd`, `true`, `test`, ...) are always allowed.
    - `low_risk_commands`: commands with no specific rule that run without approval; commands
      outside it are medium. Commands with a rule (`rm`, `cp`, `git`, `find`, ...) are judged by
      that rule.
    - `high_risk_patterns`: extra regular expressions; a simple command whose text (as written
      or unwrapped) matches one is high risk.
    - `allow_high_risk`: high-risk commands are not refused but need approval.
    """

    def __init__(
        self,
        *,
        workspace: Path,
        allowed_commands: Iterable[str] | None = None,
        low_risk_commands: Iterable[str] = DEFAULT_LOW_RISK_COMMANDS,
        high_risk_patterns: Sequence[str] = (),
        allow_high_risk: bool = False,
        writable_roots: Sequence[Path] = (),
        max_nesting: int = 8,
    ) -> None:
        self.workspace = workspace.resolve()
        self.allowed_commands = None if allowed_commands is None else frozenset(allowed_commands)
        self.low_risk_commands = frozenset(low_risk_commands)
        try:
            self.high_risk_patterns = tuple(re.compile(p) for p in high_risk_patterns)
        except re.error as exc:
            raise ValueError(f"invalid high-risk pattern: {exc}") from None
        self.allow_high_risk = allow_high_risk
        self.writable_roots = (self.workspace, *(p.resolve() for p in writable_roots))
        self.max_nesting = max_nesting
        self._language = Language(tree_sitter_bash.language())

    def classify(self, command: str, *, cwd: Path | None = None) -> CommandVerdict:
        """Parse `command` as bash run in `cwd` (default: the workspace) and classify it."""
        analysis = _Analysis(self, Parser(self._language))
        start = (cwd or self.workspace).resolve()
        if "\x00" in command:
            analysis.add("high", "unparseable", "the command contains a NUL byte", command)
        else:
            analysis.code(command, _Scope(frozenset({start})), depth=0)
        findings = tuple(dict.fromkeys(analysis.findings))
        risk: RiskLevel = max((f.risk for f in findings), key=_RANK.__getitem__, default="low")
        return CommandVerdict(command=command, risk=risk, findings=findings)

    def decide(self, verdict: CommandVerdict, *, approved: bool) -> Decision:
        """Low runs; medium runs once approved; high is refused unless high risk is allowed,
        in which case it is treated like medium."""
        if verdict.risk == "high" and not self.allow_high_risk:
            return "refuse"
        if verdict.risk == "low" or approved:
            return "run"
        return "needs_approval"


# --- parsing helpers ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Word:
    value: str | None
    """The word after quote removal, or `None` when bash computes it at run time."""
    text: str
    node: Node | None = field(default=None, compare=False)


_UNKNOWN = _Word(None, "<computed at run time>")


def _text(node: Node | None) -> str:
    return "" if node is None or node.text is None else node.text.decode("utf-8", "replace")


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SEGMENT_MAX else text[: _SEGMENT_MAX - 1] + "…"


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


# --- the analysis -------------------------------------------------------------------------


class _Analysis:
    def __init__(self, policy: CommandPolicy, parser: Parser) -> None:
        self.policy = policy
        self.parser = parser
        self.findings: list[Finding] = []
        self.rules: dict[str, Callable[[_Cmd], None]] = {
            "cd": self._cd,
            "pushd": self._cd,
            "popd": self._popd,
            "rm": self._rm,
            "rmdir": self._delete_each,
            "unlink": self._delete_each,
            "shred": self._delete_each,
            "cp": self._copy,
            "install": self._copy,
            "ln": self._copy,
            "mv": self._move,
            "rsync": self._remote_copy,
            "scp": self._remote_copy,
            "tee": self._tee,
            "touch": self._touch,
            "mkdir": self._touch,
            "truncate": self._touch,
            "dd": self._dd,
            "chmod": self._chmod,
            "chown": self._chmod,
            "chgrp": self._chmod,
            "chattr": self._chmod,
            "setfacl": self._chmod,
            "sed": self._sed,
            "awk": self._awk,
            "gawk": self._awk,
            "mawk": self._awk,
            "nawk": self._awk,
            "find": self._find,
            "git": self._git,
            "eval": self._eval,
            "source": self._source,
            ".": self._source,
            "trap": self._trap,
            "kill": self._kill,
            "pkill": self._signal,
            "killall": self._signal,
            "systemctl": self._systemctl,
        }

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
        self._simple(_command_words(node), _text(node), scope, depth, _stdin_code(node))

    def _simple(
        self,
        words: list[_Word],
        segment: str,
        scope: _Scope,
        depth: int,
        stdin_code: _Word | None,
    ) -> None:
        if words[0].value is None:
            self._dynamic(words[0], segment, "the command name")
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
            self._run_code(code, segment, scope, depth)
        if not unwrapped.argv:
            return
        if unwrapped.chdir is not None:
            scope = _Scope(frozenset(self._resolve_dirs(unwrapped.chdir, scope)))
        argv = unwrapped.argv
        if argv[0].value is None:
            self._dynamic(argv[0], segment, "the command name")
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
        self._classify(cmd)

    def _classify(self, cmd: _Cmd) -> None:
        name = cmd.name
        rule = self.rules.get(name)
        if rule is not None:
            rule(cmd)
        elif name in _SHELLS:
            self._shell(cmd)
        elif _INTERPRETER.match(name):
            self._interpreter(cmd)
        elif name in _NETWORK:
            self._network(cmd)
        elif name in _POWER:
            self.add(
                "high", "system-power", f"`{name}` shuts down or restarts the machine", cmd.seg
            )
        elif name.startswith("mkfs") or name in _DISK:
            rule_id = "filesystem-format" if name.startswith(("mkfs", "mke2fs")) else "disk-tool"
            self.add("high", rule_id, f"`{name}` rewrites disks or file systems", cmd.seg)
        elif name in _ADMIN:
            self.add("high", "system-admin", f"`{name}` changes system configuration", cmd.seg)
        elif name in _PACKAGE_MANAGERS:
            self._package(cmd)
        elif name not in self.policy.low_risk_commands:
            self.add(
                "medium",
                "unknown-command",
                f"`{name}` is not on the low-risk list, so its effect is unknown",
                cmd.seg,
            )

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
        self._write(target, scope, segment, "redirects output to")

    # -- places

    def _locate(self, word: _Word, scope: _Scope) -> _Place:
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
        if any(resolved.is_relative_to(root) for root in self.policy.writable_roots):
            return _Place("inside", shown)
        return _Place("outside", shown)

    def _resolve_dirs(self, word: _Word, scope: _Scope) -> set[Path | None]:
        """Where `cd word` may lead from each possible working directory."""
        value = word.value
        if value is None or value.startswith("~") or value == "-":
            return {None}
        path = Path(value)
        if path.is_absolute():
            return {path.resolve()}
        return {None if cwd is None else (cwd / path).resolve() for cwd in scope.cwds}

    def _write(self, word: _Word, scope: _Scope, segment: str, verb: str) -> None:
        place = self._locate(word, scope)
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

    def _delete(self, word: _Word, cmd: _Cmd, *, recursive: bool, how: str = "") -> None:
        place = self._locate(word, cmd.scope)
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

    # -- rules

    def _dynamic(self, word: _Word, segment: str, what: str) -> None:
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

    def _run_code(self, code: _Word, segment: str, scope: _Scope, depth: int) -> None:
        if code.value is None:
            self._dynamic(code, segment, "the shell code")
        else:
            self.code(code.value, scope.fork(), depth + 1)

    def _cd(self, cmd: _Cmd) -> None:
        _, operands = _split_options(cmd.args, ())
        targets = self._resolve_dirs(operands[0], cmd.scope) if operands else {None}
        cmd.scope.cwds = cmd.scope.cwds | targets

    def _popd(self, cmd: _Cmd) -> None:
        cmd.scope.cwds = cmd.scope.cwds | {None}

    def _rm(self, cmd: _Cmd) -> None:
        options, targets = _operands(cmd.args, ())
        recursive = "--recursive" in options or bool({"r", "R"} & _short_flags(options))
        if "--no-preserve-root" in options:
            self.add(
                "high",
                "recursive-delete-outside-workspace",
                "`--no-preserve-root` disables the guard against deleting /",
                cmd.seg,
            )
        for target in targets:
            self._delete(target, cmd, recursive=recursive)

    def _delete_each(self, cmd: _Cmd) -> None:
        _, targets = _operands(cmd.args, {"-n", "--iterations", "-s", "--size"})
        for target in targets:
            self._delete(target, cmd, recursive=False)

    def _destination(
        self, cmd: _Cmd, with_value: Collection[str]
    ) -> tuple[list[_Word], _Word | None]:
        options, operands = _operands(cmd.args, {"-t", "--target-directory", *with_value})
        target = options.get("-t") or options.get("--target-directory")
        if target is not None:
            return operands, target
        if len(operands) >= 2:
            return operands[:-1], operands[-1]
        if cmd.name == "ln" and operands:
            return operands, _literal(".")  # `ln -s target` links into the current directory
        return operands, None

    def _copy(self, cmd: _Cmd) -> None:
        _, target = self._destination(cmd, {"-S", "--suffix", "-m", "--mode", "-o", "-g"})
        if target is not None:
            self._write(target, cmd.scope, cmd.seg, f"`{cmd.name}` writes to")

    def _move(self, cmd: _Cmd) -> None:
        sources, target = self._destination(cmd, {"-S", "--suffix"})
        for source in sources:
            place = self._locate(source, cmd.scope)
            if place.kind in ("outside", "device"):
                self.add(
                    "high",
                    "delete-outside-workspace",
                    f"moves {place.shown} away, outside the workspace",
                    cmd.seg,
                )
            elif place.kind == "unknown":
                self.add(
                    "medium",
                    "delete-unresolved",
                    f"moves {place.shown}, known only at run time",
                    cmd.seg,
                )
        if target is not None:
            self._write(target, cmd.scope, cmd.seg, "`mv` writes to")

    def _remote_copy(self, cmd: _Cmd) -> None:
        self.add("medium", "network", f"`{cmd.name}` can copy over the network", cmd.seg)
        with_value = {"-e", "--rsh", "-f", "--filter", "-T", "--temp-dir", "-P", "-i", "-o", "-F"}
        _, target = self._destination(cmd, with_value)
        if target is not None and not (target.value and re.match(r"^[^/]*:", target.value)):
            self._write(target, cmd.scope, cmd.seg, f"`{cmd.name}` writes to")

    def _tee(self, cmd: _Cmd) -> None:
        _, targets = _operands(cmd.args, {"--output-error"})
        for target in targets:
            self._write(target, cmd.scope, cmd.seg, "`tee` writes to")

    def _touch(self, cmd: _Cmd) -> None:
        with_value = {"-r", "--reference", "-d", "--date", "-t", "-m", "--mode", "-s", "--size"}
        _, targets = _operands(cmd.args, with_value)
        for target in targets:
            self._write(target, cmd.scope, cmd.seg, f"`{cmd.name}` writes to")

    def _dd(self, cmd: _Cmd) -> None:
        for word in cmd.args:
            if word.value is None:
                self.add("medium", "write-unresolved", f"dd operand `{word.text}`", cmd.seg)
            elif word.value.startswith("of="):
                target = _literal(word.value[3:])
                if self._locate(target, cmd.scope).kind == "device":
                    self.add(
                        "high",
                        "raw-device-write",
                        f"`dd` writes raw data to the device {word.value[3:]}",
                        cmd.seg,
                    )
                else:
                    self._write(target, cmd.scope, cmd.seg, "`dd` writes to")

    def _chmod(self, cmd: _Cmd) -> None:
        with_value = (
            {"-m", "-M", "-x", "-X", "--modify", "--remove", "--set", "--set-file"}
            if cmd.name == "setfacl"
            else {"--reference", "--from"}
        )
        options, operands = _operands(cmd.args, with_value)
        recursive = "--recursive" in options or "R" in _short_flags(options)
        # The first operand is the mode/owner, unless it came as an option (`chmod -w f`,
        # `--reference`, setfacl's -m).
        spec_given = cmd.name == "setfacl" or "--reference" in options or len(operands) < 2
        targets = operands if spec_given else operands[1:]
        how = "recursively changes permissions of" if recursive else "changes permissions of"
        for target in targets:
            place = self._locate(target, cmd.scope)
            if place.kind in ("outside", "device"):
                self.add(
                    "high",
                    "permission-change-outside-workspace",
                    f"{how} {place.shown}, outside the workspace",
                    cmd.seg,
                )
            elif place.kind in ("inside", "unknown"):
                self.add("medium", "permission-change", f"{how} {place.shown}", cmd.seg)

    def _sed(self, cmd: _Cmd) -> None:
        options, operands = _operands(
            cmd.args, {"-e", "--expression", "-f", "--file", "-l", "--line-length"}
        )
        scripts = [w for k, w in options.items() if k in ("-e", "--expression") and w is not None]
        if not scripts and "-f" not in options and "--file" not in options and operands:
            scripts, operands = [operands[0]], operands[1:]
        for script in scripts:
            if script.value is None or _SED_EXEC_OR_WRITE.search(script.value):
                self.add(
                    "medium",
                    "sed-exec-or-write",
                    "the sed script may run commands (`e`) or write files (`w`)",
                    cmd.seg,
                )
        in_place = any(
            k.startswith(("-i", "--in-place")) or (not k.startswith("--") and "i" in k)
            for k in options
        )
        if in_place:
            for target in operands:
                self._write(target, cmd.scope, cmd.seg, "`sed -i` rewrites")

    def _awk(self, cmd: _Cmd) -> None:
        options, operands = _operands(
            cmd.args, {"-F", "-v", "-f", "--field-separator", "--assign", "--file"}
        )
        if "-f" in options or "--file" in options:
            self.add("medium", "runs-code", "`awk` runs a program file", cmd.seg)
        elif operands:
            program = operands[0].value
            if program is None or _AWK_EXEC_OR_WRITE.search(program):
                self.add(
                    "medium",
                    "awk-exec-or-write",
                    "the awk program may run commands or write files",
                    cmd.seg,
                )

    def _find(self, cmd: _Cmd) -> None:
        args = cmd.args
        index = 0
        while index < len(args) and args[index].value in ("-H", "-L", "-P"):
            index += 1
        roots: list[_Word] = []
        while index < len(args):
            value = args[index].value
            if value is not None and (value.startswith(("-", "(", "!")) or value == ")"):
                break
            roots.append(args[index])
            index += 1
        roots = roots or [_literal(".")]
        while index < len(args):
            value = args[index].value
            index += 1
            if value == "-delete":
                for root in roots:
                    self._delete(root, cmd, recursive=True, how="deletes what it finds under")
            elif value in ("-fprint", "-fprint0", "-fprintf", "-fls") and index < len(args):
                self._write(args[index], cmd.scope, cmd.seg, "`find` writes to")
            elif value in ("-exec", "-execdir", "-ok", "-okdir"):
                inner: list[_Word] = []
                while index < len(args) and args[index].value not in (";", "+"):
                    inner.append(args[index])
                    index += 1
                index += 1
                for root in roots:
                    match = _Word(
                        None if root.value is None else os.path.join(root.value, "*"), "{}"
                    )
                    words = [match if w.value == "{}" else w for w in inner]
                    if words:
                        self._simple(words, cmd.seg, cmd.scope.fork(), cmd.depth, None)

    def _git(self, cmd: _Cmd) -> None:
        with_value = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path"}
        _, rest = _split_options(cmd.args, with_value)
        sub = rest[0].value if rest else None
        if sub is None and rest:
            self._dynamic(rest[0], cmd.seg, "the git subcommand")
        elif sub is not None and sub not in _GIT_READ and not _git_read_only(sub, rest[1:]):
            self.add(
                "medium",
                "git-mutation",
                f"`git {sub}` changes the repository or talks to a remote",
                cmd.seg,
            )

    def _shell(self, cmd: _Cmd) -> None:
        index = 0
        inline = from_stdin = False
        args = cmd.args
        while index < len(args):
            value = args[index].value
            if value is None or not value.startswith(("-", "+")) or value in ("-", "--"):
                break
            index += 1
            if value in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
                index += 1
            elif not value.startswith("--"):
                inline = inline or "c" in value[1:]
                from_stdin = from_stdin or "s" in value[1:]
        if index < len(args) and args[index].value == "--":
            index += 1
        rest = args[index:]
        if inline:
            if rest:
                self._run_code(rest[0], cmd.seg, cmd.scope, cmd.depth)
            return
        if rest and not from_stdin and rest[0].value not in ("-", "/dev/stdin"):
            self._script(rest[0], cmd)
        elif cmd.stdin is not None:
            self._run_code(cmd.stdin, cmd.seg, cmd.scope, cmd.depth)
        else:
            self.add("medium", "runs-code", f"`{cmd.name}` runs commands read from stdin", cmd.seg)

    def _script(self, script: _Word, cmd: _Cmd) -> None:
        if _is_process_substitution(script) and _has_downloader(script.node):
            self.add("high", "download-to-interpreter", "runs downloaded content", cmd.seg)
            return
        self.add("medium", "runs-code", f"`{cmd.name}` runs the script {script.text}", cmd.seg)

    def _interpreter(self, cmd: _Cmd) -> None:
        if any(_is_process_substitution(w) and _has_downloader(w.node) for w in cmd.args):
            self.add("high", "download-to-interpreter", "runs downloaded content", cmd.seg)
            return
        self.add("medium", "runs-code", f"`{cmd.name}` runs arbitrary code", cmd.seg)

    def _source(self, cmd: _Cmd) -> None:
        if cmd.args:
            self._script(cmd.args[0], cmd)

    def _eval(self, cmd: _Cmd) -> None:
        if cmd.args:
            self._run_code(_join(cmd.args), cmd.seg, cmd.scope, cmd.depth)

    def _trap(self, cmd: _Cmd) -> None:
        _, operands = _split_options(cmd.args, ())
        if len(operands) >= 2 and operands[0].value not in ("-", ""):
            self._run_code(operands[0], cmd.seg, cmd.scope, cmd.depth)

    def _network(self, cmd: _Cmd) -> None:
        self.add("medium", "network", f"`{cmd.name}` reaches the network", cmd.seg)
        outputs = {
            "curl": ("-o", "--output", "-D", "--dump-header", "-c", "--cookie-jar", "--trace"),
            "wget": ("-O", "--output-document", "-o", "--output-file", "-a", "--append-output"),
        }.get(cmd.name, ())
        directories = {"curl": ("--output-dir",), "wget": ("-P", "--directory-prefix")}.get(
            cmd.name, ()
        )
        options, _ = _operands(cmd.args, {*outputs, *directories})
        for key in (*outputs, *directories):
            target = options.get(key)
            if target is not None:
                self._write(target, cmd.scope, cmd.seg, f"`{cmd.name}` writes to")
        remote_name = cmd.name == "curl" and (
            "-O" in options or "--remote-name" in options or "O" in _short_flags(options)
        )
        implicit = cmd.name == "wget" and not options.keys() & {"-O", "--output-document"}
        if (remote_name or implicit) and not options.keys() & set(directories):
            self._write(_literal("."), cmd.scope, cmd.seg, f"`{cmd.name}` saves files in")

    def _kill(self, cmd: _Cmd) -> None:
        args = list(cmd.args)
        if args and args[0].value in ("-l", "-L", "--list"):
            return
        if args and args[0].value in ("-s", "-n"):
            args = args[2:]
        elif args and args[0].value is not None and args[0].value.startswith("-"):
            args = args[1:]  # -9, -TERM, -1 (signal 1) or --
        pids = [w.value for w in args if w.value != "--"]
        if "-1" in pids:
            self.add("high", "signal-all", "signals every process heron can reach", cmd.seg)
        elif "1" in pids:
            self.add("high", "signal-all", "signals init (process 1)", cmd.seg)
        else:
            self._signal(cmd)

    def _signal(self, cmd: _Cmd) -> None:
        self.add("medium", "signal-process", f"`{cmd.name}` signals other processes", cmd.seg)

    def _systemctl(self, cmd: _Cmd) -> None:
        _, rest = _split_options(cmd.args, {"-H", "--host", "-M", "--machine", "-t", "--type"})
        verb = rest[0].value if rest else None
        if verb in _POWER_VERBS or verb in ("rescue", "emergency", "default"):
            self.add(
                "high", "system-power", f"`systemctl {verb}` changes the machine's state", cmd.seg
            )
        else:
            self.add("high", "system-admin", "`systemctl` controls system services", cmd.seg)

    def _package(self, cmd: _Cmd) -> None:
        if any(w.value in _PACKAGE_VERBS for w in cmd.args):
            self.add(
                "high",
                "package-manager",
                f"`{cmd.name}` installs or removes system packages",
                cmd.seg,
            )
        else:
            self.add("medium", "package-manager", f"`{cmd.name}` queries system packages", cmd.seg)


@dataclass(slots=True)
class _Cmd:
    """A simple command after unwrapping, in its scope."""

    name: str
    args: list[_Word]
    seg: str
    scope: _Scope
    depth: int
    stdin: _Word | None


def _is_process_substitution(word: _Word) -> bool:
    return word.node is not None and word.node.type == "process_substitution"


def _is_glob(part: str) -> bool:
    return any(ch in part for ch in "*?[")


def _inside(node: Node, kind: str, stop: Node) -> bool:
    current = node.parent
    while current is not None and current.id != stop.id:
        if current.type == kind:
            return True
        current = current.parent
    return False


def _git_read_only(sub: str, rest: Sequence[_Word]) -> bool:
    """`git branch`, `git tag`, `git remote`, `git config` only list when given no operands."""
    if sub in ("branch", "tag", "remote", "stash"):
        values = [w.value for w in rest]
        listing = {"-a", "--all", "-l", "--list", "-v", "-vv", "-r", "--remotes", "list", "show"}
        return all(v is not None and (v in listing or v.startswith("--format")) for v in values)
    if sub == "config":
        return any(w.value in ("--get", "--list", "-l", "--get-all") for w in rest)
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
