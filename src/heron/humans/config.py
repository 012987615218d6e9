"""`[approvals]` in `heron.toml`: who may answer requests to a human, on which channel, how
long "always" rules last and what a question's timeout does.

```toml
[approvals.approvers]          # channel → identities; nothing configured: the local operator
console = ["alice", "bob"]     # names for `heron approvals … --as NAME`; "*" = anyone local
mail = ["ops@example.com"]
acp = ["alice"]                # the editor's user in `heron acp --as alice` (docs/acp.md)

[approvals]
rule_ttl_s = 86400             # an "always" lasts a day unless the approver says otherwise

[[approvals.escalation]]       # nobody answered within after_s: these approvers are added
after_s = 900                  # (the first ones may still answer), on all their channels
approvers = { mail = ["lead@example.com"] }

[approvals.questions]
timeout_s = 300                # a question's deadline when the model names none
max_timeout_s = 3600           # the longest deadline a model may ask for
on_timeout = "default"         # "default" | "wait" (remind, keep waiting) | "halt"
```

How long an *approval* waits is `[approval] timeout_s`, the gate's own setting; its timeout is
always "no answer", never an approval.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "APPROVER_CHANNELS",
    "ApprovalsConfig",
    "EscalationStep",
    "QuestionsConfig",
    "clamp_seconds",
]

ApproverChannel = Literal["console", "mail", "gateway", "webhook", "acp"]
APPROVER_CHANNELS: tuple[ApproverChannel, ...] = ("console", "mail", "gateway", "webhook", "acp")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class QuestionsConfig(_Section):
    """`[approvals.questions]`: the timeout of a question (`request_human_input`)."""

    timeout_s: float = Field(default=300.0, gt=0)
    """The deadline of a question when the model names none."""
    max_timeout_s: float = Field(default=3600.0, gt=0)
    """The longest deadline a model may ask for; a longer one is cut to this."""
    on_timeout: Literal["default", "wait", "halt"] = "default"
    """`default`: answer with the question's default (no answer when it has none); `wait`:
    remind and keep waiting; `halt`: end the run."""
    remind_every_s: float | None = Field(default=None, gt=0)
    """With `wait`: how often to remind; unset, every `timeout_s`."""
    model_defaults: bool = True
    """Whether a default the model supplies is used; `false`: a timeout is always no answer."""


class EscalationStep(_Section):
    """One step of `[[approvals.escalation]]`: who is added to a request nobody answered."""

    after_s: float = Field(gt=0)
    """Seconds after the request was opened."""
    approvers: dict[ApproverChannel, list[str]] = Field(min_length=1)
    """The next approver group, channel → identities (as `[approvals.approvers]`)."""


class ApprovalsConfig(_Section):
    """`[approvals]`: see the module docstring."""

    durable: bool = True
    """`heron serve` keeps requests durable (answered with `heron approvals`); `false`: it
    denies every call that needs approval by policy, as with no operator."""
    approvers: dict[ApproverChannel, list[str]] = Field(default_factory=dict)
    """Approver identities per channel. Nothing configured: the local operator, on the
    console."""
    rule_ttl_s: float = Field(default=86_400.0, gt=0)
    """How long an "always" rule lasts by default."""
    rule_max_ttl_s: float = Field(default=30 * 86_400.0, gt=0)
    """The longest an approver may make one last."""
    questions: QuestionsConfig = Field(default_factory=QuestionsConfig)
    escalation: list[EscalationStep] = Field(default_factory=list)
    """The next approver groups, in order of `after_s`."""

    @model_validator(mode="after")
    def _steps_in_order(self) -> ApprovalsConfig:
        waits = [step.after_s for step in self.escalation]
        if waits != sorted(set(waits)):
            raise ValueError("[[approvals.escalation]] steps need increasing after_s")
        return self


def clamp_seconds(value: float | None, *, default: float, maximum: float) -> float:
    """A caller-supplied duration bounded by configuration: `default` when unset or not a
    positive finite number, and never above `maximum`."""
    if value is None or not 0 < value < math.inf:
        value = default
    return min(value, maximum)
