"""Command line: flags and environment in, one config out, then hand over. Only this module exits."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from . import __version__
from .errors import WarpwatchError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="warpwatch",
        description="Per-kernel GPU occupancy from PyTorch profiler traces, corrected for profiler artefacts.",
    )
    parser.add_argument("--version", action="version", version=f"warpwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    from . import analyze_command, dashboards, fix_command, service

    analyze_command.register(sub)
    fix_command.register(sub)
    service.register(sub)
    dashboards.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Building the parser imports every subcommand (a second or two): a Ctrl-C meanwhile ends the
    # process by the signal's default action, silently (a KeyboardInterrupt raised inside an
    # import can surface as another exception, with a traceback).
    quiet = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_DFL) if quiet else None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    finally:
        if quiet:
            signal.signal(signal.SIGINT, previous)
    try:
        code: int = args.func(args)
    except WarpwatchError as exc:
        print(f"warpwatch: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
