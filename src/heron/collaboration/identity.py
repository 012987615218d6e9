"""The agent's own identity: who it is on every channel it writes to.

heron acts as itself, never as the user — a secretary with their own phone and mailbox rather
than someone holding the employer's keys. A mistake or a compromise then exposes the agent's
accounts, not the user's whole digital identity, and the people it writes to always know they
are talking to an agent. `[identity]` in `heron.toml` names it; every outbound message on every
channel carries it (the mail From header and signature, the webhook's `from`, the IM context
line, the console's header). `workspace` is the agent's own shared folder (`/workspace/shared`
in the seed's sense): files are exchanged by path, never copied into a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from email.headerregistry import Address
from pathlib import Path

__all__ = ["AgentIdentity"]


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentIdentity:
    """The agent as the people it writes to see it."""

    name: str = "heron"
    """The display name: `Heron (Ana's assistant)`."""
    address: str = "heron@localhost"
    """Its own mail address: the From of its mail, where replies come back."""
    signature: str = ""
    """A line or two under every message; empty: `<name> — an AI agent`."""
    workspace: Path | None = None
    """Its own shared folder; attachments are paths inside it."""

    def __post_init__(self) -> None:
        for label, value in (("name", self.name), ("address", self.address)):
            if not value.strip() or "\n" in value or "\r" in value:
                raise ValueError(f"identity {label} must be one non-empty line")

    @property
    def sign_off(self) -> str:
        """The signature shown under every message."""
        return self.signature.strip() or f"{self.name} — an AI agent"

    @property
    def display(self) -> str:
        """`Heron <heron@example.com>`, as people read it."""
        return f"{self.name} <{self.address}>"

    @property
    def from_header(self) -> str:
        """`Heron <heron@example.com>`, encoded as a mail header needs it."""
        local, _, domain = self.address.partition("@")
        return str(Address(display_name=self.name, username=local, domain=domain))

    @property
    def mail_domain(self) -> str:
        return self.address.rpartition("@")[2] or "localhost"

    def to_data(self) -> dict[str, str]:
        """`{"name", "address", "signature"}`: the identity as a webhook shows it."""
        return {"name": self.name, "address": self.address, "signature": self.sign_off}
