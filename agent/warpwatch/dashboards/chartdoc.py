"""The values table of the Helm chart's README, generated from the comments in values.yaml.

One source for each value's documentation: the `# --` comment right above it in
`helm/warpwatch/values.yaml` (the helm-docs convention), continued by the `#` lines that follow;
its default is the value itself. A documented map is one row (and when its first key is documented
too, each of its keys is a row as well); an undocumented map is descended into, and every value
under it needs its own description: an undocumented value is an error, so the table is complete or
it is not written.

    # -- Time between two capture windows [60s].       ->  | `warpwatch.config.period` | `null` | Time ... |
    period: null

`render(values_text)` returns the table; `deploysync` writes it into the chart README between
`BEGIN` and `END` (`warpwatch dashboards build` calls it) and `check` reports a stale copy.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from ..errors import WarpwatchError

BEGIN = (
    "<!-- BEGIN values table: generated from values.yaml by `warpwatch dashboards build`; edit the comments there -->"
)
END = "<!-- END values table -->"
MAX_DEFAULT_CHARS = 100
"""Defaults longer than this (as JSON) are shown as "see values.yaml"."""

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?:\s|$)")


class ChartDocError(WarpwatchError):
    """values.yaml cannot be documented: a value has no `# --` description, or the file is malformed."""


@dataclass(frozen=True, slots=True)
class Row:
    """One documented value: its dotted key, its default and its description."""

    key: str
    default: Any
    description: str


def rows(values_text: str) -> list[Row]:
    """The documented values of a values.yaml text, in file order (ChartDocError when one is not)."""
    try:
        data = yaml.safe_load(values_text) or {}
    except yaml.YAMLError as exc:
        raise ChartDocError(f"values.yaml is not YAML: {exc}") from None
    out: list[Row] = []
    undocumented: list[str] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the maps being descended into
    comment: list[str] | None = None  # the `# --` block above the next key
    skip_deeper_than: int | None = None  # inside a leaf's value (lists, block scalars, documented maps)
    lines = values_text.splitlines()
    for n, raw in enumerate(lines):
        stripped = raw.strip()
        indent = len(raw) - len(raw.lstrip(" "))
        if skip_deeper_than is not None:
            if not stripped or indent > skip_deeper_than:
                continue
            skip_deeper_than = None
        if not stripped:
            comment = None
            continue
        if stripped.startswith("#"):
            text = stripped.lstrip("#").strip()
            if stripped.startswith("# --"):
                comment = [text.removeprefix("--").strip()]
            elif comment is not None:
                comment.append(text)
            continue
        m = _KEY.match(raw)
        if not m:
            raise ChartDocError(f"values.yaml: cannot place line {raw!r} (a key: value line was expected)")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [m.group("key")]
        value = _lookup(data, path)
        if comment is None and isinstance(value, dict) and value:
            stack.append((indent, m.group("key")))
            continue
        dotted = ".".join(path)
        if comment is None or not " ".join(comment).strip():
            undocumented.append(dotted)
        else:
            out.append(Row(dotted, value, " ".join(c for c in comment if c)))
        comment = None
        if isinstance(value, dict) and value and _next_is_description(lines, n + 1):
            stack.append((indent, m.group("key")))  # a documented map whose keys are documented too
        else:
            skip_deeper_than = indent
    if undocumented:
        raise ChartDocError("values.yaml: no `# --` description for " + ", ".join(undocumented))
    return out


def _next_is_description(lines: list[str], start: int) -> bool:
    """Whether the first non-blank line from `start` opens a `# --` description."""
    for line in lines[start:]:
        if line.strip():
            return line.strip().startswith("# --")
    return False


def _lookup(data: Any, path: list[str]) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            raise ChartDocError(f"values.yaml: {'.'.join(path)} is not where its indentation puts it")
        data = data[key]
    return data


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _default(value: Any) -> str:
    if isinstance(value, str) and "\n" in value.strip():
        return "multi-line string (see values.yaml)"
    text = json.dumps(value, separators=(", ", ": "))
    if len(text) > MAX_DEFAULT_CHARS:
        return "see values.yaml"
    return f"`{_cell(text)}`"


def render(values_text: str) -> str:
    """The Markdown table of every value, between the BEGIN and END markers (ends with a newline)."""
    lines = [BEGIN, "", "| value | default | description |", "|---|---|---|"]
    lines += [f"| `{r.key}` | {_default(r.default)} | {_cell(r.description)} |" for r in rows(values_text)]
    lines += ["", END]
    return "\n".join(lines) + "\n"


def replace_table(readme_text: str, values_text: str) -> str:
    """README text with the part from BEGIN to END replaced by a fresh table."""
    start, end = readme_text.find(BEGIN), readme_text.find(END)
    if start < 0 or end < start:
        raise ChartDocError(f"the chart README has no values table markers ({BEGIN!r} ... {END!r})")
    return readme_text[:start] + render(values_text) + readme_text[end + len(END) :].removeprefix("\n")
