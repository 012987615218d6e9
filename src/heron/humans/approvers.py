"""Who may answer a request to a human: approver identities, one per channel.

An identity is `channel:name` — `console:alice` (an operator answering with `heron approvals
… --as alice`), `mail:ops@example.com`, `gateway:<token principal>`, `webhook:<sender id>`,
`acp:alice` (the user of an editor that drives `heron acp --as alice`). `console:*` is the
local operator: whoever can run `heron approvals` on the state directory (the state
directory's file permissions are the boundary). With nothing configured, that is the one
approver.

A request stores the identities that were configured and reachable when it was opened, and
an answer is checked against that list, so a terminal without the project's `heron.toml`
enforces the same approvers as the process that asked. Not the model, not a chat member, not
a third-party event: only an identity on the list.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from heron.humans.config import APPROVER_CHANNELS

__all__ = ["ANY_LOCAL_OPERATOR", "LOCAL_OPERATOR", "Approvers", "describe", "may_answer"]

ANY_LOCAL_OPERATOR = "*"
LOCAL_OPERATOR = f"console:{ANY_LOCAL_OPERATOR}"


def _split(identity: str) -> tuple[str, str]:
    channel, _, name = identity.partition(":")
    return channel, name


def may_answer(approvers: Collection[str], channel: str, name: str) -> bool:
    """True when `name` answering on `channel` is one of `approvers` (or the channel admits
    any local operator)."""
    if not name or ":" in channel:
        return False
    return f"{channel}:{name}" in approvers or (
        channel == "console" and f"console:{ANY_LOCAL_OPERATOR}" in approvers
    )


def describe(approvers: Sequence[str]) -> str:
    """`the local operator (heron approvals)`, `console:alice, mail:ops@example.com`, …"""
    shown = [
        "the local operator (heron approvals)" if a == LOCAL_OPERATOR else a for a in approvers
    ]
    return ", ".join(shown) if shown else "nobody"


@dataclass(frozen=True, slots=True)
class Approvers:
    """The configured approver identities, in configuration order."""

    identities: tuple[str, ...]

    @classmethod
    def from_config(cls, approvers: Mapping[Any, Iterable[str]]) -> Approvers:
        """From `[approvals.approvers]` (channel → names); nothing configured → the local
        operator. `ValueError` for an unknown channel or an empty or malformed name."""
        identities: list[str] = []
        for channel, names in approvers.items():
            if channel not in APPROVER_CHANNELS:
                raise ValueError(f"unknown approver channel {channel!r}")
            for name in names:
                if not name.strip() or name != name.strip():
                    raise ValueError(f"approver names must be non-empty words: {name!r}")
                if name == ANY_LOCAL_OPERATOR and channel != "console":
                    raise ValueError(f"'*' is only an approver on the console, not {channel}")
                identities.append(f"{channel}:{name}")
        return cls(tuple(dict.fromkeys(identities)) or (LOCAL_OPERATOR,))

    def reachable(self, channels: Collection[str]) -> tuple[str, ...]:
        """The identities whose channel is open in this process, in order."""
        return tuple(i for i in self.identities if _split(i)[0] in channels)

    def console_names(self) -> tuple[str, ...]:
        return tuple(_split(i)[1] for i in self.identities if _split(i)[0] == "console")
