"""An alert's definition (`AlertDef`), its runbook page beyond the rule itself, its severities."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from .settings import Settings


@dataclass(frozen=True, slots=True)
class Runbook:
    """What a runbook page says beyond the rule itself (which it quotes)."""

    meaning: str
    impact: str
    diagnosis: tuple[str, ...]
    mitigation: tuple[str, ...]


Severity = Literal["info", "warning", "critical"]


@dataclass(frozen=True, slots=True)
class AlertDef:
    """One alert, rendered as a Prometheus rule, a Grafana rule and a runbook.

    `summary` and `description` are Go templates restricted to `{{ $labels.NAME }}`,
    `{{ printf "%.Nf" $value }}` and `{{ humanizePercentage $value }}`, so the promtool test
    file can state their exact expansion (see `rules.render_template`).
    """

    name: str
    group: str
    expr: str
    for_: str
    severity: Severity
    summary: str
    description: str
    runbook: Runbook
    thresholds: tuple[tuple[str, str], ...] = ()
    """(setting, value) pairs the runbook lists, so a reader sees the bounds in force."""
    evidence_verb: Literal["pull", "diff"] = "pull"
    """What the `evidence` annotation of an alert about a deployment runs on each pod's agent: `pull`
    its kept traces, or `diff` the window kept for the drop against the last baseline window."""

    @property
    def slug(self) -> str:
        """Kebab-case name without the project prefix: runbook file stem and Grafana uid tail."""
        bare = self.name.removeprefix("Warpwatch")
        return re.sub(r"(?<!^)(?=[A-Z])", "-", bare).lower()

    @property
    def uid(self) -> str:
        """Stable Grafana rule uid (at most 40 characters)."""
        return f"warpwatch-{self.slug}"

    def runbook_url(self, s: Settings) -> str:
        return f"{s.runbook_url_base}{self.slug}.md"
