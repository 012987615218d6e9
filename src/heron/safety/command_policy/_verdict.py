"""What the command policy answers: risk levels, findings and the verdict that lists them.

They sit below the walker and the rules, which make findings, so that nothing in the package
imports its own `__init__`; `heron.safety.command_policy` exports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

RiskLevel = Literal["low", "medium", "high"]
Decision = Literal["run", "needs_approval", "refuse"]
_RANK: dict[RiskLevel, int] = {"low": 0, "medium": 1, "high": 2}


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
