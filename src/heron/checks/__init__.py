"""Second opinions on tool calls: checks before a call runs, verification after it ran.

- `SidecarCheck` (`heron.checks.sidecar`): a light classifier — a small model or built-in rules —
  sees only the structured call and gates it, with a circuit breaker that hands the decision to
  a human after repeated refusals.
- `ReviewerCheck` (`heron.checks.reviewer`): an independent reviewer model must approve
  irreversible calls; a rejection goes back to the proposer with the reason.
- `verified(tool, FileVerifier())` (`heron.checks.verify`): after a tool changes files, check
  the effect in another modality — run the code, load the config, render the document.

Both checks plug into `heron.Agent(checks=[...])`; a verified tool goes into `tools=[...]`.
"""

from __future__ import annotations

from heron.checks.reviewer import REVIEWER_PROMPT, ReviewerCheck
from heron.checks.sidecar import (
    CLASSIFIER_PROMPT,
    Classifier,
    ModelClassifier,
    RuleClassifier,
    SidecarCheck,
)
from heron.checks.verify import FileVerifier, Finding, VerifiedTool, Verifier, verified

__all__ = [
    "CLASSIFIER_PROMPT",
    "REVIEWER_PROMPT",
    "Classifier",
    "FileVerifier",
    "Finding",
    "ModelClassifier",
    "ReviewerCheck",
    "RuleClassifier",
    "SidecarCheck",
    "VerifiedTool",
    "Verifier",
    "verified",
]
