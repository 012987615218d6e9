"""How an attempt's outcome is judged: evidence of an escape, or None when it was held.

Most checks look at the host, not at what the command printed: a file under the rig's
directory, a token a listener received, a process still alive after the call.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from heron.sandbox.base import RunResult
from heron.sandbox.escape.attempt import Check
from heron.sandbox.escape.rig import SUITE_LIMITS, EscapeRig, alive

BOMB_TIMEOUT_S = 3.0


def leaks_env(rig: EscapeRig, result: RunResult) -> str | None:
    text = result.stdout.decode(errors="replace")
    for canary in rig.canaries:
        if canary in text:
            return f"heron's variable {canary.split('=', 1)[0]} was read"
    return None


def printed(word: str) -> Check:
    def check(rig: EscapeRig, result: RunResult) -> str | None:
        text = result.stdout.decode(errors="replace")
        return f"printed {word!r}: {text.strip()[:80]}" if word in text else None

    return check


def host_file(*relative: str) -> Check:
    """Escaped when one of these files (under `outside/open`, with the attempt's marker)
    exists on the host."""

    def check(rig: EscapeRig, result: RunResult) -> str | None:
        for name in relative:
            path = Path(name.format(out=rig.outside, tok=rig.token))
            if path.exists():
                path.unlink()
                return f"{path} was created on the host"
        return None

    return check


def unchanged(name: str) -> Check:
    def check(rig: EscapeRig, result: RunResult) -> str | None:
        path = rig.outside / name
        if not path.exists():
            return f"{path} was deleted"
        text = path.read_text()
        if text != f"untouched-{rig.token}\n":
            path.write_text(f"untouched-{rig.token}\n")
            return f"{path} was changed"
        return None

    return check


def reached(suffix: str) -> Check:
    def check(rig: EscapeRig, result: RunResult) -> str | None:
        token = f"{rig.token}-{suffix}"
        return f"the listener received {token}" if token in rig.received else None

    return check


def survivor(attempt: str) -> Check:
    def check(rig: EscapeRig, result: RunResult) -> str | None:
        survivors = alive(sleep_arg(rig, attempt))
        for pid in survivors:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        return f"processes {survivors} outlived the call" if survivors else None

    return check


def sleep_arg(rig: EscapeRig, attempt: str) -> str:
    return f"300.{int(rig.token, 16) % 10**6:06d}{len(attempt):02d}"


def none_created(*paths: str) -> Check:
    def check(rig: EscapeRig, result: RunResult) -> str | None:
        for raw in paths:
            path = Path(raw.format(out=rig.outside, tok=rig.token, home=Path.home()))
            if path.exists():
                with contextlib.suppress(OSError):
                    path.unlink()
                return f"{path} was created on the host"
        return None

    return check


def home_listed(rig: EscapeRig, result: RunResult) -> str | None:
    shown = set(result.stdout.decode(errors="replace").split())
    seen = [n for n in rig.home_entries if n in shown]
    return f"heron's home was listed ({', '.join(seen[:3])})" if seen else None


def cmdline_seen(rig: EscapeRig, result: RunResult) -> str | None:
    text = result.stdout.decode(errors="replace")
    if "heron-is-visible" in text:
        return f"/proc/{rig.heron_pid} (heron) is visible"
    if rig.heron_cmdline and rig.heron_cmdline[:60] in text:
        return "heron's command line was read"
    return None


def output_over(limit: int) -> Check:
    def check(rig: EscapeRig, result: RunResult) -> str | None:
        kept = len(result.stdout)
        return f"{kept} bytes of output were kept" if kept > limit else None

    return check


def number_over(limit: int) -> Check:
    def check(rig: EscapeRig, result: RunResult) -> str | None:
        words = result.stdout.decode(errors="replace").split()
        numbers = [int(w) for w in words if w.isdigit()]
        return f"reached {max(numbers)}" if numbers and max(numbers) > limit else None

    return check


def bomb_held(rig: EscapeRig, result: RunResult) -> str | None:
    # Held: the call ended (its timeout at worst) and nothing of the bomb outlived it.
    if result.duration_s > BOMB_TIMEOUT_S + 2 * SUITE_LIMITS.kill_grace_s + 2:
        return f"the call took {result.duration_s:.1f} s"
    bombs = alive(f"heron-bomb-{rig.token}")
    return f"{len(bombs)} bomb processes outlived the call" if bombs else None


def outside_visible(rig: EscapeRig) -> str | None:
    return None if rig.outside_visible else "no directory outside the workspace is visible here"
