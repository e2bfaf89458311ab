"""Helpers of tests/deploy/test_deploy.py and test_compose.py."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from warpwatch.config.table import SETTINGS, SETTINGS_BY_NAME

ROOT = Path(__file__).resolve().parents[2]


DEPLOY = ROOT / "deploy"


DASHBOARDS = ROOT / "dashboards"


AGENT_UID = 65532


DEFAULT_PORT = SETTINGS_BY_NAME["port"].default


ENV_NAMES = {s.env for s in SETTINGS}


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, instruction: str) -> list[str]:
        return [args for ins, args in self.instructions if ins == instruction]

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for args in self.all("ENV"):
            for item in shlex.split(args):
                key, _, value = item.partition("=")
                out[key] = value
        return out

    def labels(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for args in self.all("LABEL"):
            for item in shlex.split(args):
                key, _, value = item.partition("=")
                out[key] = value
        return out


def read_dockerfile(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages) of a Dockerfile."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        instruction, _, rest = line.partition(" ")
        instruction, rest = instruction.upper(), rest.strip()
        if instruction == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            assert m, line
            base = re.sub(r"\$\{(\w+)\}", lambda g: args[g.group(1)], m.group(1))
            stages.append(Stage(base, m.group(2)))
        elif instruction == "ARG" and not stages:
            key, _, value = rest.partition("=")
            args[key] = value
        else:
            assert stages, f"{instruction} before FROM"
            stages[-1].instructions.append((instruction, rest))
    return args, stages


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), f"not exec form: {args}"
    return value
