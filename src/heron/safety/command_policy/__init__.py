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

The package: `_verdict` (risk levels, findings, the verdict), `_bash` (words, options, operands,
wrapper unwrapping), `_walk` (the walk over the parsed command, working directories and paths)
and `_rules` (one rule per command name, with the name tables). This module is the facade.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import tree_sitter_bash
from tree_sitter import Language, Parser

from heron.safety.command_policy._bash import _names
from heron.safety.command_policy._rules import _rule_for
from heron.safety.command_policy._verdict import (
    _RANK,
    CommandVerdict,
    Decision,
    Finding,
    RiskLevel,
)
from heron.safety.command_policy._walk import _Analysis, _Scope
from heron.safety.command_policy.argv import simple_commands

__all__ = [
    "DEFAULT_LOW_RISK_COMMANDS",
    "CommandPolicy",
    "CommandVerdict",
    "Decision",
    "Finding",
    "RiskLevel",
    "simple_commands",
]

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
        analysis = _Analysis(self, Parser(self._language), _rule_for)
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
