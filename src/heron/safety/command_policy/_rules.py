"""The per-command rules: what `rm`, `cp`, `dd`, `chmod`, `git`, `curl`, `sudo`'s targets ... do.

A rule is a function `(analysis, cmd) -> None` that adds findings for one simple command (after
unwrapping) or, for `cd`, changes the working directories that follow. `_RULES` maps every
command name with a rule to it; `_rule_for` also knows names by their shape (versioned
interpreters like `python3.12`, `mkfs.*`) and falls back to the low-risk list. The name tables
the rules use sit next to them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Sequence

from heron.safety.command_policy._bash import (
    _DOWNLOADERS,
    _INTERPRETER,
    _SHELLS,
    _has_downloader,
    _is_process_substitution,
    _join,
    _literal,
    _names,
    _operands,
    _short_flags,
    _split_options,
    _Word,
)
from heron.safety.command_policy._walk import _Analysis, _Cmd, _Rule

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
_SED_EXEC_OR_WRITE = re.compile(
    r"(?:^|[;\n{}])\s*(?:[\d,$~+]+|/[^/]*/)?\s*!?\s*[ewW](?:\s|$)"
    r"|s(.)(?:(?!\1).)*\1(?:(?!\1).)*\1[gpiImM0-9]*[ew]"
)
_AWK_EXEC_OR_WRITE = re.compile(r"\bsystem\s*\(|\||\bprintf?\b[^;}]*>")


def _cd(analysis: _Analysis, cmd: _Cmd) -> None:
    _, operands = _split_options(cmd.args, ())
    targets = analysis.resolve_dirs(operands[0], cmd.scope) if operands else {None}
    cmd.scope.cwds = cmd.scope.cwds | targets


def _popd(analysis: _Analysis, cmd: _Cmd) -> None:
    cmd.scope.cwds = cmd.scope.cwds | {None}


def _rm(analysis: _Analysis, cmd: _Cmd) -> None:
    options, targets = _operands(cmd.args, ())
    recursive = "--recursive" in options or bool({"r", "R"} & _short_flags(options))
    if "--no-preserve-root" in options:
        analysis.add(
            "high",
            "recursive-delete-outside-workspace",
            "`--no-preserve-root` disables the guard against deleting /",
            cmd.seg,
        )
    for target in targets:
        analysis.delete(target, cmd, recursive=recursive)


def _delete_each(analysis: _Analysis, cmd: _Cmd) -> None:
    _, targets = _operands(cmd.args, {"-n", "--iterations", "-s", "--size"})
    for target in targets:
        analysis.delete(target, cmd, recursive=False)


def _destination(cmd: _Cmd, with_value: Collection[str]) -> tuple[list[_Word], _Word | None]:
    options, operands = _operands(cmd.args, {"-t", "--target-directory", *with_value})
    target = options.get("-t") or options.get("--target-directory")
    if target is not None:
        return operands, target
    if len(operands) >= 2:
        return operands[:-1], operands[-1]
    if cmd.name == "ln" and operands:
        return operands, _literal(".")  # `ln -s target` links into the current directory
    return operands, None


def _copy(analysis: _Analysis, cmd: _Cmd) -> None:
    _, target = _destination(cmd, {"-S", "--suffix", "-m", "--mode", "-o", "-g"})
    if target is not None:
        analysis.write(target, cmd.scope, cmd.seg, f"`{cmd.name}` writes to")


def _move(analysis: _Analysis, cmd: _Cmd) -> None:
    sources, target = _destination(cmd, {"-S", "--suffix"})
    for source in sources:
        place = analysis.locate(source, cmd.scope)
        if place.kind in ("outside", "device"):
            analysis.add(
                "high",
                "delete-outside-workspace",
                f"moves {place.shown} away, outside the workspace",
                cmd.seg,
            )
        elif place.kind == "unknown":
            analysis.add(
                "medium",
                "delete-unresolved",
                f"moves {place.shown}, known only at run time",
                cmd.seg,
            )
    if target is not None:
        analysis.write(target, cmd.scope, cmd.seg, "`mv` writes to")


def _remote_copy(analysis: _Analysis, cmd: _Cmd) -> None:
    analysis.add("medium", "network", f"`{cmd.name}` can copy over the network", cmd.seg)
    with_value = {"-e", "--rsh", "-f", "--filter", "-T", "--temp-dir", "-P", "-i", "-o", "-F"}
    _, target = _destination(cmd, with_value)
    if target is not None and not (target.value and re.match(r"^[^/]*:", target.value)):
        analysis.write(target, cmd.scope, cmd.seg, f"`{cmd.name}` writes to")


def _tee(analysis: _Analysis, cmd: _Cmd) -> None:
    _, targets = _operands(cmd.args, {"--output-error"})
    for target in targets:
        analysis.write(target, cmd.scope, cmd.seg, "`tee` writes to")


def _touch(analysis: _Analysis, cmd: _Cmd) -> None:
    with_value = {"-r", "--reference", "-d", "--date", "-t", "-m", "--mode", "-s", "--size"}
    _, targets = _operands(cmd.args, with_value)
    for target in targets:
        analysis.write(target, cmd.scope, cmd.seg, f"`{cmd.name}` writes to")


def _dd(analysis: _Analysis, cmd: _Cmd) -> None:
    for word in cmd.args:
        if word.value is None:
            analysis.add("medium", "write-unresolved", f"dd operand `{word.text}`", cmd.seg)
        elif word.value.startswith("of="):
            target = _literal(word.value[3:])
            if analysis.locate(target, cmd.scope).kind == "device":
                analysis.add(
                    "high",
                    "raw-device-write",
                    f"`dd` writes raw data to the device {word.value[3:]}",
                    cmd.seg,
                )
            else:
                analysis.write(target, cmd.scope, cmd.seg, "`dd` writes to")


def _chmod(analysis: _Analysis, cmd: _Cmd) -> None:
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
        place = analysis.locate(target, cmd.scope)
        if place.kind in ("outside", "device"):
            analysis.add(
                "high",
                "permission-change-outside-workspace",
                f"{how} {place.shown}, outside the workspace",
                cmd.seg,
            )
        elif place.kind in ("inside", "unknown"):
            analysis.add("medium", "permission-change", f"{how} {place.shown}", cmd.seg)


def _sed(analysis: _Analysis, cmd: _Cmd) -> None:
    options, operands = _operands(
        cmd.args, {"-e", "--expression", "-f", "--file", "-l", "--line-length"}
    )
    scripts = [w for k, w in options.items() if k in ("-e", "--expression") and w is not None]
    if not scripts and "-f" not in options and "--file" not in options and operands:
        scripts, operands = [operands[0]], operands[1:]
    for script in scripts:
        if script.value is None or _SED_EXEC_OR_WRITE.search(script.value):
            analysis.add(
                "medium",
                "sed-exec-or-write",
                "the sed script may run commands (`e`) or write files (`w`)",
                cmd.seg,
            )
    in_place = any(
        k.startswith(("-i", "--in-place")) or (not k.startswith("--") and "i" in k) for k in options
    )
    if in_place:
        for target in operands:
            analysis.write(target, cmd.scope, cmd.seg, "`sed -i` rewrites")


def _awk(analysis: _Analysis, cmd: _Cmd) -> None:
    options, operands = _operands(
        cmd.args, {"-F", "-v", "-f", "--field-separator", "--assign", "--file"}
    )
    if "-f" in options or "--file" in options:
        analysis.add("medium", "runs-code", "`awk` runs a program file", cmd.seg)
    elif operands:
        program = operands[0].value
        if program is None or _AWK_EXEC_OR_WRITE.search(program):
            analysis.add(
                "medium",
                "awk-exec-or-write",
                "the awk program may run commands or write files",
                cmd.seg,
            )


def _find(analysis: _Analysis, cmd: _Cmd) -> None:
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
                analysis.delete(root, cmd, recursive=True, how="deletes what it finds under")
        elif value in ("-fprint", "-fprint0", "-fprintf", "-fls") and index < len(args):
            analysis.write(args[index], cmd.scope, cmd.seg, "`find` writes to")
        elif value in ("-exec", "-execdir", "-ok", "-okdir"):
            inner: list[_Word] = []
            while index < len(args) and args[index].value not in (";", "+"):
                inner.append(args[index])
                index += 1
            index += 1
            for root in roots:
                match = _Word(None if root.value is None else os.path.join(root.value, "*"), "{}")
                words = [match if w.value == "{}" else w for w in inner]
                if words:
                    analysis.simple(words, cmd.seg, cmd.scope.fork(), cmd.depth, None)


def _git(analysis: _Analysis, cmd: _Cmd) -> None:
    with_value = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path"}
    _, rest = _split_options(cmd.args, with_value)
    sub = rest[0].value if rest else None
    if sub is None and rest:
        analysis.dynamic(rest[0], cmd.seg, "the git subcommand")
    elif sub is not None and sub not in _GIT_READ and not _git_read_only(sub, rest[1:]):
        analysis.add(
            "medium",
            "git-mutation",
            f"`git {sub}` changes the repository or talks to a remote",
            cmd.seg,
        )


def _shell(analysis: _Analysis, cmd: _Cmd) -> None:
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
            analysis.run_code(rest[0], cmd.seg, cmd.scope, cmd.depth)
        return
    if rest and not from_stdin and rest[0].value not in ("-", "/dev/stdin"):
        _script(analysis, rest[0], cmd)
    elif cmd.stdin is not None:
        analysis.run_code(cmd.stdin, cmd.seg, cmd.scope, cmd.depth)
    else:
        analysis.add("medium", "runs-code", f"`{cmd.name}` runs commands read from stdin", cmd.seg)


def _script(analysis: _Analysis, script: _Word, cmd: _Cmd) -> None:
    if _is_process_substitution(script) and _has_downloader(script.node):
        analysis.add("high", "download-to-interpreter", "runs downloaded content", cmd.seg)
        return
    analysis.add("medium", "runs-code", f"`{cmd.name}` runs the script {script.text}", cmd.seg)


def _interpreter(analysis: _Analysis, cmd: _Cmd) -> None:
    if any(_is_process_substitution(w) and _has_downloader(w.node) for w in cmd.args):
        analysis.add("high", "download-to-interpreter", "runs downloaded content", cmd.seg)
        return
    analysis.add("medium", "runs-code", f"`{cmd.name}` runs arbitrary code", cmd.seg)


def _source(analysis: _Analysis, cmd: _Cmd) -> None:
    if cmd.args:
        _script(analysis, cmd.args[0], cmd)


def _eval(analysis: _Analysis, cmd: _Cmd) -> None:
    if cmd.args:
        analysis.run_code(_join(cmd.args), cmd.seg, cmd.scope, cmd.depth)


def _trap(analysis: _Analysis, cmd: _Cmd) -> None:
    _, operands = _split_options(cmd.args, ())
    if len(operands) >= 2 and operands[0].value not in ("-", ""):
        analysis.run_code(operands[0], cmd.seg, cmd.scope, cmd.depth)


def _network(analysis: _Analysis, cmd: _Cmd) -> None:
    analysis.add("medium", "network", f"`{cmd.name}` reaches the network", cmd.seg)
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
            analysis.write(target, cmd.scope, cmd.seg, f"`{cmd.name}` writes to")
    remote_name = cmd.name == "curl" and (
        "-O" in options or "--remote-name" in options or "O" in _short_flags(options)
    )
    implicit = cmd.name == "wget" and not options.keys() & {"-O", "--output-document"}
    if (remote_name or implicit) and not options.keys() & set(directories):
        analysis.write(_literal("."), cmd.scope, cmd.seg, f"`{cmd.name}` saves files in")


def _kill(analysis: _Analysis, cmd: _Cmd) -> None:
    args = list(cmd.args)
    if args and args[0].value in ("-l", "-L", "--list"):
        return
    if args and args[0].value in ("-s", "-n"):
        args = args[2:]
    elif args and args[0].value is not None and args[0].value.startswith("-"):
        args = args[1:]  # -9, -TERM, -1 (signal 1) or --
    pids = [w.value for w in args if w.value != "--"]
    if "-1" in pids:
        analysis.add("high", "signal-all", "signals every process heron can reach", cmd.seg)
    elif "1" in pids:
        analysis.add("high", "signal-all", "signals init (process 1)", cmd.seg)
    else:
        _signal(analysis, cmd)


def _signal(analysis: _Analysis, cmd: _Cmd) -> None:
    analysis.add("medium", "signal-process", f"`{cmd.name}` signals other processes", cmd.seg)


def _systemctl(analysis: _Analysis, cmd: _Cmd) -> None:
    _, rest = _split_options(cmd.args, {"-H", "--host", "-M", "--machine", "-t", "--type"})
    verb = rest[0].value if rest else None
    if verb in _POWER_VERBS or verb in ("rescue", "emergency", "default"):
        analysis.add(
            "high", "system-power", f"`systemctl {verb}` changes the machine's state", cmd.seg
        )
    else:
        analysis.add("high", "system-admin", "`systemctl` controls system services", cmd.seg)


def _package(analysis: _Analysis, cmd: _Cmd) -> None:
    if any(w.value in _PACKAGE_VERBS for w in cmd.args):
        analysis.add(
            "high",
            "package-manager",
            f"`{cmd.name}` installs or removes system packages",
            cmd.seg,
        )
    else:
        analysis.add("medium", "package-manager", f"`{cmd.name}` queries system packages", cmd.seg)


def _git_read_only(sub: str, rest: Sequence[_Word]) -> bool:
    """`git branch`, `git tag`, `git remote`, `git config` only list when given no operands."""
    if sub in ("branch", "tag", "remote", "stash"):
        values = [w.value for w in rest]
        listing = {"-a", "--all", "-l", "--list", "-v", "-vv", "-r", "--remotes", "list", "show"}
        return all(v is not None and (v in listing or v.startswith("--format")) for v in values)
    if sub == "config":
        return any(w.value in ("--get", "--list", "-l", "--get-all") for w in rest)
    return False


def _power(analysis: _Analysis, cmd: _Cmd) -> None:
    analysis.add(
        "high", "system-power", f"`{cmd.name}` shuts down or restarts the machine", cmd.seg
    )


def _disk(analysis: _Analysis, cmd: _Cmd) -> None:
    rule_id = "filesystem-format" if cmd.name.startswith(("mkfs", "mke2fs")) else "disk-tool"
    analysis.add("high", rule_id, f"`{cmd.name}` rewrites disks or file systems", cmd.seg)


def _admin(analysis: _Analysis, cmd: _Cmd) -> None:
    analysis.add("high", "system-admin", f"`{cmd.name}` changes system configuration", cmd.seg)


def _unlisted(analysis: _Analysis, cmd: _Cmd) -> None:
    if cmd.name not in analysis.policy.low_risk_commands:
        analysis.add(
            "medium",
            "unknown-command",
            f"`{cmd.name}` is not on the low-risk list, so its effect is unknown",
            cmd.seg,
        )


# Later keys win: rsync and scp are network clients that also copy files, so their own rule
# (which reports the network use too) replaces the plain network one.
_RULES: dict[str, _Rule] = {
    **dict.fromkeys(_SHELLS, _shell),
    **dict.fromkeys(_NETWORK, _network),
    **dict.fromkeys(_POWER, _power),
    **dict.fromkeys(_DISK, _disk),
    **dict.fromkeys(_ADMIN, _admin),
    **dict.fromkeys(_PACKAGE_MANAGERS, _package),
    "cd": _cd,
    "pushd": _cd,
    "popd": _popd,
    "rm": _rm,
    "rmdir": _delete_each,
    "unlink": _delete_each,
    "shred": _delete_each,
    "cp": _copy,
    "install": _copy,
    "ln": _copy,
    "mv": _move,
    "rsync": _remote_copy,
    "scp": _remote_copy,
    "tee": _tee,
    "touch": _touch,
    "mkdir": _touch,
    "truncate": _touch,
    "dd": _dd,
    "chmod": _chmod,
    "chown": _chmod,
    "chgrp": _chmod,
    "chattr": _chmod,
    "setfacl": _chmod,
    "sed": _sed,
    "awk": _awk,
    "gawk": _awk,
    "mawk": _awk,
    "nawk": _awk,
    "find": _find,
    "git": _git,
    "eval": _eval,
    "source": _source,
    ".": _source,
    "trap": _trap,
    "kill": _kill,
    "pkill": _signal,
    "killall": _signal,
    "systemctl": _systemctl,
}


def _rule_for(name: str) -> _Rule:
    """The rule for the command `name`: by name; else by the shape of the name (`python3.12`,
    `mkfs.ext4`); else the one for commands without a rule (low risk if listed as such)."""
    rule = _RULES.get(name)
    if rule is not None:
        return rule
    if _INTERPRETER.match(name):
        return _interpreter
    if name.startswith("mkfs"):
        return _disk
    return _unlisted
