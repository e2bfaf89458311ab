"""The flags the docs name and the flags `warpwatch` takes are the same set.

Both ways, over README.md and docs/*.md:
- a `--flag` written after `warpwatch COMMAND` (on the same line, before a pipe, `&&`, `;`, a
  backtick or a `#` comment) must be a flag of that command; any other `--flag` must be a flag of
  some `warpwatch` command, or one of another program's that FOREIGN names;
- every flag of every `warpwatch` command (what its `--help` lists, read from the parser that prints
  it) must be named by some page.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from support.docblocks import PAGES
from warpwatch.commands.cli import build_parser

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?![\w-])")
COMMAND = re.compile(r"(?<![\w-])warpwatch ((?:dashboards|evidence) [a-z]+|[a-z]+)")
SEGMENT_END = re.compile(r"\||&&|;|`|#(?!\w)")
FOREIGN = {
    "--agent-path": "benchmarks/attacks",
    "--only": "benchmarks/attacks",
    "--designs": "benchmarks/fleet.py",
    "--pods": "benchmarks/fleet.py",
    "--hours": "benchmarks/fleet.py",
    "--seconds": "benchmarks/fuzz_trace.py",
    "--family": "tests/support/engines (route replicas)",
    "--profile-v2": "tests/support/engines (route replicas)",
    "--build": "docker compose up",
    "--create-namespace": "helm install",
    "--kube-version": "helm template",
    "--durations": "pytest",
    "--dist": "pytest-xdist",
    "--no-deps": "pip install",
    "--nofile": "prlimit",
    "--enable-feature": "prometheus",
    "--enable-metrics": "SGLang's server",
    "--enforce-eager": "vLLM's server",
    "--profiler-config": "vLLM's server",
    "--site-dir": "mkdocs build",
    "--strict": "mkdocs build",
    "--cpu": "stress-ng",
    "--random-order": "pytest-random-order",
}
"""Flags of other programs that the pages name, and whose they are."""


def warpwatch_flags() -> dict[str, set[str]]:
    """Each command ('' for `warpwatch` itself, 'run', 'dashboards build', ...) and its long flags."""
    out: dict[str, set[str]] = {}

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        out[name] = set()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, subparser in action.choices.items():
                    walk(subparser, f"{name} {sub}".strip())
            else:
                out[name].update(o for o in action.option_strings if o.startswith("--") and o != "--help")

    walk(build_parser(None), "")
    return out


def named(text: str) -> Iterator[tuple[str | None, str]]:
    """(the warpwatch command it follows or None, flag) for every flag in `text`."""
    for line in text.splitlines():
        spans = []
        for m in COMMAND.finditer(line):
            end = SEGMENT_END.search(line, m.end())
            spans.append((m.end(), end.start() if end else len(line), m.group(1)))
        for f in FLAG.finditer(line):
            command = next((c for start, end, c in spans if start <= f.start() < end), None)
            yield command, f.group(0)


def test_every_flag_a_page_names_is_one_warpwatch_or_the_program_it_belongs_to_knows() -> None:
    commands = warpwatch_flags()
    known = set().union(*commands.values())
    problems = []
    for page in PAGES:
        for command, flag in named(page.read_text(encoding="utf-8")):
            if command is not None and command in commands:
                if flag not in commands[command]:
                    problems.append(f"{page.name}: `warpwatch {command}` has no {flag}")
            elif flag not in known and flag not in FOREIGN:
                problems.append(f"{page.name}: {flag} is no flag of warpwatch, nor listed in FOREIGN")
    assert not problems, "\n".join(problems)


def test_every_flag_of_every_command_is_named_by_a_page() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    on_pages = set(FLAG.findall(text))
    missing = [f"warpwatch {c} {f}".replace("  ", " ") for c, flags in warpwatch_flags().items() for f in flags]
    missing = [m for m in missing if m.rsplit(" ", 1)[1] not in on_pages]
    assert not missing, f"flags no page names: {missing}"


def test_the_check_sees_a_wrong_flag_and_whose_it_is() -> None:
    text = (
        "warpwatch analyze --window 1s TRACE   # a flag of run, not analyze\n"
        "`warpwatch run --period 10s` and `--top` alone; `podman build --format docker`\n"
        "warpwatch dashboards build --out x | grep --count y\n"
    )
    assert list(named(text)) == [
        ("analyze", "--window"),
        ("run", "--period"),
        (None, "--top"),
        (None, "--format"),
        ("dashboards build", "--out"),
        (None, "--count"),
    ]
    commands = warpwatch_flags()
    assert "--window" in commands["run"] and "--window" not in commands["analyze"]
    assert {"--out", "--check", "--set"} <= commands["dashboards build"]
    assert "--version" in commands[""] and "--help" not in commands["run"]
    assert not set(FOREIGN) & set().union(*commands.values()), "a FOREIGN flag is warpwatch's own"
