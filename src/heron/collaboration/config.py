"""The configuration of reaching people: `[identity]`, `[user]`, `[people.NAME]`,
`[channels.*]` and `[messages]` in `heron.toml`.

```toml
[identity]                       # the agent as itself (heron.collaboration.identity)
name = "Heron (Ana's assistant)"
address = "heron@example.com"
signature = "Heron, Ana's assistant — an AI agent. Reply to this mail to answer."
workspace = "/workspace/shared"  # files are exchanged by path inside it

[user]                           # the operator: who send_message reaches by default
name = "ana"
channels = ["console", "im", "mail"]  # in order of preference
mail = "ana@example.com"
im = "https://chat.example.com/hooks/T0/B0/x"   # an incoming-webhook URL
webhook = "https://ops.example.com/heron"        # heron's signed JSON
quiet_hours = { start = "22:00", end = "07:00", timezone = "Europe/Berlin" }
urgent_breaks_quiet = true       # urgent messages go out in quiet hours too
recall_after_s = 900             # an unread urgent message moves to the next channel

[people.bob]                     # others the agent may write to (send_message to="bob")
channels = ["mail"]
mail = "bob@example.com"

[channels.mail]                  # SMTP out; credentials from the environment
host = "smtp.example.com"
port = 587
username_env = "HERON_SMTP_USER"
password_env = "HERON_SMTP_PASSWORD"
trusted_authserv_ids = ["mx.example.com"]   # whose DKIM verdicts count (high risk, consent)

[channels.webhook]
secret_env = "HERON_NOTIFY_SECRET"  # signs heron's JSON (X-Heron-Signature)

[messages]
notify_after_s = 600             # a turn or job that ran longer ends with a notification
```
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from heron.collaboration.identity import AgentIdentity

__all__ = [
    "CHANNELS",
    "ChannelName",
    "ChannelsConfig",
    "IdentityConfig",
    "MailChannelConfig",
    "MessagesConfig",
    "PersonConfig",
    "QuietHours",
    "SignedPostConfig",
    "UserConfig",
]

ChannelName = Literal["console", "mail", "webhook", "im"]
CHANNELS: tuple[ChannelName, ...] = ("console", "mail", "webhook", "im")
_CLOCK = re.compile(r"^([01][0-9]|2[0-3]):[0-5][0-9]$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class IdentityConfig(_Section):
    """`[identity]`: the agent's own name, address, signature and shared workspace."""

    name: str = "heron"
    address: str = "heron@localhost"
    signature: str = ""
    workspace: str | None = None

    def identity(self) -> AgentIdentity:
        workspace = Path(self.workspace).expanduser() if self.workspace else None
        return AgentIdentity(
            name=self.name, address=self.address, signature=self.signature, workspace=workspace
        )


class QuietHours(_Section):
    """From `start` to `end` (local wall-clock `HH:MM` in `timezone`; may wrap midnight)
    nothing but urgent messages is pushed; the console still gets everything."""

    start: str
    end: str
    timezone: str = "UTC"

    @field_validator("start", "end")
    @classmethod
    def _clock(cls, value: str) -> str:
        if not _CLOCK.match(value):
            raise ValueError("a time of day is HH:MM, 00:00 to 23:59")
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (an IANA name: Europe/Berlin)") from None
        return value

    def _minutes(self, value: str) -> int:
        hours, minutes = value.split(":")
        return int(hours) * 60 + int(minutes)

    def contains(self, now: float) -> bool:
        """Whether the Unix time `now` falls inside the quiet hours."""
        local = dt.datetime.fromtimestamp(now, ZoneInfo(self.timezone))
        minute = local.hour * 60 + local.minute
        start, end = self._minutes(self.start), self._minutes(self.end)
        if start == end:
            return False
        if start < end:
            return start <= minute < end
        return minute >= start or minute < end

    def ends_after(self, now: float) -> float:
        """The Unix time the quiet hours containing `now` end (`now` if they do not)."""
        if not self.contains(now):
            return now
        zone = ZoneInfo(self.timezone)
        local = dt.datetime.fromtimestamp(now, zone)
        hours, minutes = (int(p) for p in self.end.split(":"))
        end = local.replace(hour=hours, minute=minutes, second=0, microsecond=0)
        if end <= local:
            end += dt.timedelta(days=1)
        # Wall-clock arithmetic in the zone (a DST change keeps "07:00" at 07:00).
        return end.replace(tzinfo=None).replace(tzinfo=zone).timestamp()


class PersonConfig(_Section):
    """`[people.NAME]` (and `[user]`): where and when one person is reached."""

    channels: list[ChannelName] = Field(default_factory=lambda: list[ChannelName](["console"]))
    """In order of preference (see docs/collaboration.md for what urgency does with it)."""
    mail: str | None = None
    webhook: str | None = None
    """A URL that receives heron's signed JSON."""
    im: str | None = None
    """A chat service's incoming-webhook URL (`{"text": …, "blocks": […]}`)."""
    quiet_hours: QuietHours | None = None
    urgent_breaks_quiet: bool = True
    recall_after_s: float = Field(default=900.0, gt=0)

    @model_validator(mode="after")
    def _addresses(self) -> PersonConfig:
        if not self.channels:
            raise ValueError("channels must name at least one channel")
        for channel in self.channels:
            if channel != "console" and getattr(self, channel) is None:
                raise ValueError(f"channel {channel!r} is listed but no {channel} is given")
        for url in (self.webhook, self.im):
            if url is not None and not url.startswith(("https://", "http://")):
                raise ValueError(f"{url!r} is not an http(s) URL")
        return self


class UserConfig(PersonConfig):
    """`[user]`: the operator, the one `send_message` reaches when it names nobody."""

    name: str = "user"


class MailChannelConfig(_Section):
    """`[channels.mail]`: the SMTP server outbound mail goes through."""

    host: str
    port: int = 587
    username_env: str | None = None
    password_env: str | None = None
    starttls: bool = True
    timeout_s: float = Field(default=30.0, gt=0)
    trusted_authserv_ids: list[str] = Field(default_factory=list)
    """The `Authentication-Results` authserv-ids of your own receiving mail server, whose DKIM
    and DMARC verdicts heron trusts: a high-risk call is approved, and an MCP OAuth consent
    answered, by mail only with one (`heron.collaboration.mail_auth`; that server must strip
    such headers from incoming mail)."""


class SignedPostConfig(_Section):
    """`[channels.webhook]`, `[channels.im]`: how the POSTs are signed."""

    secret_env: str | None = None
    """The variable with the HMAC secret (heron's scheme); unset: unsigned."""
    timeout_s: float = Field(default=10.0, gt=0)


class ChannelsConfig(_Section):
    """`[channels]`: the transports; the addresses are each person's."""

    mail: MailChannelConfig | None = None
    webhook: SignedPostConfig = Field(default_factory=SignedPostConfig)
    im: SignedPostConfig = Field(default_factory=SignedPostConfig)


class MessagesConfig(_Section):
    """`[messages]`: the runtime's own notices and how long a card's buttons work."""

    notify_after_s: float | None = Field(default=600.0, gt=0)
    """A turn or background job that ran at least this long ends with a notification to the
    user (unless the turn sent one itself); unset: never."""
    action_ttl_s: float = Field(default=7 * 86_400.0, gt=0)
    """How long a card's buttons stay valid."""
