"""`warpwatch run`: flags, environment and file into one `Config`, then the service runs (or, with
`--check`, everything is checked and nothing started: `runcheck`)."""

from __future__ import annotations

import argparse
import os

from ..config.load import load_settings
from ..config.table import add_arguments
from ..logs import configure
from ..service.agent import Service
from .runcheck import build_sources, check


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `run` subcommand."""
    parser = subparsers.add_parser(
        "run",
        help="run the agent: capture windows on a schedule, export Prometheus metrics",
        description="Capture a window every period, analyse it, serve /metrics, /healthz, /readyz. "
        "Every flag can also be set as an environment variable or a YAML key "
        "(precedence: flag > environment > file > default).",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="check the settings and the sources (each --source parsed, the folders and files they name "
        "readable), print one line and exit: 0 when all is well, 2 with the error; starts nothing",
    )
    add_arguments(parser)
    parser.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    config, origins = load_settings(args, os.environ)
    sources = build_sources(config, origins)  # every bad value fails before anything is set up
    if args.check:
        print(check(config, origins, sources), flush=True)
        return 0
    configure(config.log_level, config.log_format)
    return Service(config, sources=sources).run()
