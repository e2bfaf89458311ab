"""Command line: flags and environment in, one config out, then hand over. Only this module exits.

Exit status: 0 done; 1 the work failed (a trace could not be read, an agent could not be reached);
2 the command line or a setting is wrong (argparse's usage errors, and every `ConfigError`, whether
the value came from a flag, an environment variable or the config file); 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import re
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from .. import __version__
from ..errors import ConfigError, WarpwatchError

COMMANDS = {
    "analyze": ".analyze",
    "diff": ".diff",
    "fix": ".fix",
    "run": ".run",
    "evidence": ".evidence",
    "dashboards": "..dashboards",
}
"""Each subcommand and the module that registers it. Only the module of the command asked for is
imported (`run` brings aiohttp and prometheus_client, `dashboards` grafanalib: `warpwatch analyze`
starts in a fifth of the time); help, or no known command, imports them all."""


EXIT_FAILED = 1
EXIT_USAGE = 2
"""A bad flag, or a bad value wherever it came from (argparse exits with it too)."""


class Parser(argparse.ArgumentParser):
    """argparse, where a value that starts with a minus and a digit is a value, not a flag: both
    `--period -5s` and `--period=-5s` reach the setting's own check ("must be greater than 0"), as
    `--top -1` already does (argparse takes only plain negative numbers). Subcommands' parsers are
    of this class too (`add_subparsers` makes them of the parent's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?[0-9]")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser, for `argv` (only its command's module is imported); None: with
    every command."""
    parser = Parser(
        prog="warpwatch",
        description="Per-kernel GPU occupancy from PyTorch profiler traces, corrected for profiler artefacts.",
    )
    parser.add_argument("--version", action="version", version=f"warpwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = None if argv is None else _command_of(argv)  # (None: every command)
    if argv is not None and list(argv[:1]) == ["--version"]:
        return parser  # (prints and exits before any subcommand is needed)
    for command, module in COMMANDS.items():
        if wanted is None or wanted == command:
            importlib.import_module(module, __package__).register(sub)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named by `argv` (its first word), when it is one; None otherwise."""
    return argv[0] if argv and argv[0] in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    # Building the parser imports every subcommand (a second or two): a Ctrl-C meanwhile ends the
    # process by the signal's default action, silently (a KeyboardInterrupt raised inside an
    # import can surface as another exception, with a traceback).
    quiet = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_DFL) if quiet else None
    try:
        argv = sys.argv[1:] if argv is None else argv
        parser = build_parser(argv)
        args = parser.parse_args(argv)
    finally:
        if quiet:
            signal.signal(signal.SIGINT, previous)
    try:
        code: int = args.func(args)
    except WarpwatchError as exc:
        print(f"warpwatch: error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ConfigError) else EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
