"""The catalogue of escape attempts, grouped by the aspect of containment each one tests."""

from __future__ import annotations

import sys
from pathlib import Path

from heron.sandbox.escape.attempt import Attempt
from heron.sandbox.escape.checks import (
    BOMB_TIMEOUT_S,
    bomb_held,
    cmdline_seen,
    home_listed,
    host_file,
    leaks_env,
    none_created,
    number_over,
    output_over,
    outside_visible,
    printed,
    reached,
    sleep_arg,
    survivor,
    unchanged,
)
from heron.sandbox.escape.rig import SUITE_LIMITS

__all__ = ["ATTEMPTS"]


_FILE = "{out}/open/{name}-{tok}"


def _f(name: str) -> str:
    return _FILE.replace("{name}", name)


ATTEMPTS: tuple[Attempt, ...] = (
    # heron's environment
    Attempt(
        name="proc_parent_environ",
        aspect="heron_environment",
        description="read /proc/$PPID/environ and /proc/<heron>/environ",
        script=lambda r: f"cat /proc/$PPID/environ; echo; cat /proc/{r.heron_pid}/environ",
        escaped=leaks_env,
    ),
    Attempt(
        name="proc_init_environ",
        aspect="heron_environment",
        description="read /proc/1/environ",
        script=lambda r: "cat /proc/1/environ",
        escaped=leaks_env,
    ),
    Attempt(
        name="every_environ",
        aspect="heron_environment",
        description="read the environment of every process in /proc",
        script=lambda r: "for f in /proc/[0-9]*/environ; do cat $f 2>/dev/null; echo; done",
        escaped=leaks_env,
    ),
    Attempt(
        name="ps_environ",
        aspect="heron_environment",
        description="`ps e` (environments of all processes)",
        script=lambda r: "ps eww -A -o args 2>&1 || ps e",
        escaped=leaks_env,
        tools=("ps",),
    ),
    Attempt(
        name="own_environment",
        aspect="heron_environment",
        description="`env` inside the sandbox",
        script=lambda r: "env",
        escaped=leaks_env,
    ),
    # heron's memory
    Attempt(
        name="proc_parent_maps",
        aspect="heron_memory",
        description="read /proc/<heron>/maps",
        script=lambda r: f"cat /proc/{r.heron_pid}/maps | head -n 3",
        escaped=lambda r, res: "heron's memory map was read" if b"-" in res.stdout else None,
    ),
    Attempt(
        name="proc_parent_mem",
        aspect="heron_memory",
        description="read heron's memory through /proc/<heron>/mem",
        python=True,
        script=lambda r: (
            f"f = open('/proc/{r.heron_pid}/mem', 'rb')\n"
            f"f.seek({r.memory_address})\nprint('read', f.read(16).hex())"
        ),
        escaped=printed("read "),
    ),
    Attempt(
        name="ptrace_parent",
        aspect="heron_memory",
        description="ptrace heron (PTRACE_SEIZE, which does not stop it)",
        python=True,
        script=lambda r: (
            "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            f"rc = libc.ptrace(0x4206, {r.heron_pid}, None, None)\n"
            "print('seized' if rc == 0 else f'refused {ctypes.get_errno()}')"
        ),
        escaped=printed("seized"),
    ),
    # files
    Attempt(
        name="heron_private_file",
        aspect="heron_files",
        description="read a 0600 file of heron's user outside the workspace",
        script=lambda r: f"cat {r.outside}/private.txt",
        escaped=printed("private-"),
        needs=outside_visible,
    ),
    Attempt(
        name="heron_home",
        aspect="heron_files",
        description="list heron's home directory",
        script=lambda r: f"ls -a {Path.home()}",
        escaped=home_listed,
        needs=lambda r: None if r.home_entries else "heron's home is empty",
    ),
    Attempt(
        name="etc_shadow",
        aspect="other_users_files",
        description="read /etc/shadow",
        script=lambda r: "cat /etc/shadow",
        escaped=printed("root:"),
        needs=lambda r: None if Path("/etc/shadow").exists() else "no /etc/shadow here",
    ),
    Attempt(
        name="raw_disk",
        aspect="other_users_files",
        description="read the raw block device of /",
        script=lambda r: f"head -c 4096 {r.root_device} | wc -c",
        escaped=printed("4096"),
        needs=lambda r: None if r.root_device else "/ is not on a block device here",
    ),
    Attempt(
        name="public_outside_file",
        aspect="files_outside_read",
        description="read a world-readable file outside the workspace",
        script=lambda r: f"cat {r.outside}/public.txt",
        escaped=printed("public-"),
        needs=outside_visible,
    ),
    Attempt(
        name="write_system_dirs",
        aspect="files_outside_write",
        description="write into /, /etc, /usr/local/bin and heron's home",
        script=lambda r: (
            f"for d in / /etc /usr/local/bin {Path.home()}; do "
            f"echo x > $d/heron-escape-{r.token}; done"
        ),
        escaped=none_created(
            "/heron-escape-{tok}",
            "/etc/heron-escape-{tok}",
            "/usr/local/bin/heron-escape-{tok}",
            "{home}/heron-escape-{tok}",
        ),
    ),
    Attempt(
        name="write_world_writable_dir",
        aspect="files_outside_write",
        description="write into a world-writable directory outside the workspace",
        script=lambda r: f"echo x > {r.outside}/open/w-{r.token}",
        escaped=host_file(_f("w")),
        needs=outside_visible,
    ),
    Attempt(
        name="append_world_writable_file",
        aspect="files_outside_write",
        description="append to a world-writable file outside the workspace",
        script=lambda r: f"echo pwned >> {r.outside}/target.txt",
        escaped=unchanged("target.txt"),
        needs=outside_visible,
    ),
    Attempt(
        name="delete_outside",
        aspect="files_outside_write",
        description="delete a file in a world-writable directory outside the workspace",
        script=lambda r: f"rm -f {r.outside}/open/victim",
        escaped=unchanged("open/victim"),
        needs=outside_visible,
    ),
    Attempt(
        name="symlink_write",
        aspect="files_outside_write",
        description="`ln -s OUTSIDE l && echo > l/x`",
        script=lambda r: f"ln -sfn {r.outside}/open l && echo x > l/s-{r.token}",
        escaped=host_file(_f("s")),
        needs=outside_visible,
    ),
    Attempt(
        name="tar_extract_outside",
        aspect="files_outside_write",
        description="`tar -C OUTSIDE -x`",
        script=lambda r: (
            f"echo x > t-{r.token} && tar -cf a.tar t-{r.token} && "
            f"tar -C {r.outside}/open -xf a.tar"
        ),
        escaped=host_file(_f("t")),
        tools=("tar",),
        needs=outside_visible,
    ),
    Attempt(
        name="cp_outside",
        aspect="files_outside_write",
        description="`cp` a file out of the workspace",
        script=lambda r: f"echo x > f && cp f {r.outside}/open/c-{r.token}",
        escaped=host_file(_f("c")),
        needs=outside_visible,
    ),
    Attempt(
        name="mv_outside",
        aspect="files_outside_write",
        description="`mv` a file out of the workspace",
        script=lambda r: f"echo x > m && mv m {r.outside}/open/m-{r.token}",
        escaped=host_file(_f("m")),
        needs=outside_visible,
    ),
    Attempt(
        name="hardlink_outside",
        aspect="files_outside_write",
        description="hard-link an outside file into the workspace and write through it",
        script=lambda r: f"ln -f {r.outside}/target.txt hl && echo pwned >> hl",
        escaped=unchanged("target.txt"),
        needs=outside_visible,
    ),
    Attempt(
        name="python_open_outside",
        aspect="files_outside_write",
        description="`open(OUTSIDE, 'w')` from Python (the interpreter run_python uses)",
        python=True,
        script=lambda r: f"open('{r.outside}/open/p-{r.token}', 'w').write('x')",
        escaped=host_file(_f("p")),
        needs=outside_visible,
    ),
    Attempt(
        name="plant_in_herons_python",
        aspect="files_outside_write",
        description="write into heron's own Python installation (code heron would import)",
        script=lambda r: f"echo 'raise SystemExit' > {sys.prefix}/heron-escape-{r.token}.py",
        escaped=none_created(f"{sys.prefix}/heron-escape-{{tok}}.py"),
    ),
    Attempt(
        name="tmp_then_read",
        aspect="files_outside_write",
        description="write to /tmp, /var/tmp and /dev/shm for heron to read",
        script=lambda r: (
            f"for d in /tmp /var/tmp /dev/shm; do echo x > $d/heron-escape-{r.token}; done"
        ),
        escaped=none_created(
            "/tmp/heron-escape-{tok}", "/var/tmp/heron-escape-{tok}", "/dev/shm/heron-escape-{tok}"
        ),
    ),
    # processes
    Attempt(
        name="signal_heron",
        aspect="signals",
        description="signal heron (`kill -0`, which only checks the right to)",
        script=lambda r: f"kill -0 {r.heron_pid} && echo signalled",
        escaped=printed("signalled"),
    ),
    Attempt(
        name="see_heron",
        aspect="other_processes",
        description="find heron in /proc and read its command line",
        script=lambda r: (
            f"test -d /proc/{r.heron_pid} && echo heron-is-'visible'; "
            f"cat /proc/{r.heron_pid}/cmdline | tr '\\0' ' '; echo; ps -eo args 2>/dev/null"
        ),
        escaped=cmdline_seen,
        tools=("ps",),
    ),
    Attempt(
        name="setsid_outlive",
        aspect="outliving_the_call",
        description="`setsid` a process to outlive the call",
        script=lambda r: (
            f"setsid sleep {sleep_arg(r, 'setsid_outlive')} >/dev/null 2>&1 </dev/null & "
            "echo started"
        ),
        escaped=survivor("setsid_outlive"),
        tools=("setsid",),
    ),
    Attempt(
        name="process_group_outlive",
        aspect="outliving_the_call",
        description="double fork into a process group of its own (job control)",
        script=lambda r: (
            f"set -m; ( (sleep {sleep_arg(r, 'process_group_outlive')} >/dev/null 2>&1 "
            "</dev/null &) & ); echo started"
        ),
        escaped=survivor("process_group_outlive"),
    ),
    # privileges
    Attempt(
        name="mount",
        aspect="privileges",
        description="`mount` a tmpfs (the setuid mount program)",
        script=lambda r: "mkdir -p mnt && mount -t tmpfs none mnt && echo mounted",
        escaped=printed("mounted"),
        tools=("mount",),
    ),
    Attempt(
        name="unshare_regain",
        aspect="privileges",
        description="`unshare -Ur` to regain root, then read /etc/shadow and write /etc",
        script=lambda r: (
            "cat /etc/shadow >/dev/null 2>&1 && echo shadow-readable-before; "
            f"unshare -Ur sh -c 'cat /etc/shadow; echo x > /etc/heron-escape-{r.token}' 2>&1"
        ),
        escaped=lambda r, res: (
            "read /etc/shadow only after unshare"
            if b"root:" in res.stdout and b"shadow-readable-before" not in res.stdout
            else none_created("/etc/heron-escape-{tok}")(r, res)
        ),
        tools=("unshare",),
    ),
    Attempt(
        name="chroot",
        aspect="privileges",
        description="`chroot /`",
        script=lambda r: "chroot / /bin/true && echo chrooted",
        escaped=printed("chrooted"),
        tools=("chroot",),
    ),
    Attempt(
        name="nsenter",
        aspect="privileges",
        description="`nsenter` the namespaces of PID 1",
        script=lambda r: "nsenter -t 1 -m -u -i -n -p /bin/true && echo entered",
        escaped=printed("entered"),
        tools=("nsenter",),
    ),
    Attempt(
        name="cgroup_escape",
        aspect="privileges",
        description="move the shell into a parent cgroup",
        script=lambda r: (
            "for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/pids/cgroup.procs "
            "/sys/fs/cgroup/unified/cgroup.procs; do "
            "(echo $$ > $f) 2>/dev/null && echo moved $f; done; true"
        ),
        escaped=printed("moved"),
    ),
    Attempt(
        name="device_node",
        aspect="privileges",
        description="`mknod` a device node",
        script=lambda r: "mknod ./devnode c 1 3 && echo made",
        escaped=printed("made"),
        tools=("mknod",),
    ),
    # resources
    Attempt(
        name="raise_ulimit",
        aspect="resource_limits",
        description="raise the hard limit of open files (`ulimit -Hn`)",
        script=lambda r: f"ulimit -Hn {(SUITE_LIMITS.open_files or 1024) * 64} && echo raised",
        escaped=printed("raised"),
    ),
    Attempt(
        name="huge_output",
        aspect="resource_limits",
        description="write 32 MiB to stdout",
        script=lambda r: "head -c 33554432 /dev/zero",
        escaped=output_over(SUITE_LIMITS.max_output_bytes),
    ),
    Attempt(
        name="fill_disk",
        aspect="resource_limits",
        description="write a 4 MiB file in the workspace and in /tmp (file size limit 1 MiB)",
        script=lambda r: (
            "head -c 4194304 /dev/zero > big; stat -c %s big; "
            "head -c 4194304 /dev/zero > /tmp/big; stat -c %s /tmp/big"
        ),
        escaped=number_over(SUITE_LIMITS.file_size_bytes or 0),
    ),
    Attempt(
        name="exhaust_memory",
        aspect="resource_limits",
        description="allocate 2 GiB (address space limit 1 GiB)",
        python=True,
        script=lambda r: "block = bytearray(2 * 1024**3)\nprint('allocated')",
        escaped=printed("allocated"),
    ),
    Attempt(
        name="spawn_beyond_limit",
        aspect="process_count",
        description="fork 400 times (the limit is 48)",
        python=True,
        script=lambda r: (
            "import os, time\nn = 0\ntry:\n    for _ in range(400):\n"
            "        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n"
            "        n += 1\nexcept OSError:\n    pass\nprint(n)"
        ),
        escaped=number_over(399),  # every fork succeeded: nothing bound the count
        exclusive=True,
        harmful_when_not_contained=True,
    ),
    Attempt(
        name="fork_bomb",
        aspect="process_count",
        description="a bash fork bomb (stopped at its 3 s timeout)",
        script=lambda r: (
            f"exec -a heron-bomb-{r.token} bash -c 'bomb() {{ bomb | bomb & }}; bomb; wait'"
        ),
        escaped=bomb_held,
        exclusive=True,
        timeout_s=BOMB_TIMEOUT_S,
        harmful_when_not_contained=True,
    ),
    # network
    Attempt(
        name="loopback_connect",
        aspect="loopback",
        description="connect to a listener heron started on 127.0.0.1",
        script=lambda r: (
            f"exec 3<>/dev/tcp/127.0.0.1/{r.loopback_port} && echo {r.token}-loopback >&3"
        ),
        escaped=reached("loopback"),
    ),
    Attempt(
        name="external_connect",
        aspect="network",
        description="connect to this host's non-loopback address",
        script=lambda r: (
            f"exec 3<>/dev/tcp/{r.external[0]}/{r.external[1]} && echo {r.token}-external >&3"
            if r.external
            else "false"
        ),
        escaped=reached("external"),
        needs=lambda r: None if r.external else "this host has no non-loopback IPv4 address",
    ),
)
"""Every attempt, grouped by aspect."""
