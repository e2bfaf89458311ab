"""`warpwatch run`: flags, environment and file into one `Config`, then the service runs."""

from __future__ import annotations

import argparse
import os

from ..config import add_arguments
from ..configload import load_config
from ..logs import configure
from ..service.agent import Service


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `run` subcommand."""
    parser = subparsers.add_parser(
        "run",
        help="run the agent: capture windows on a schedule, export Prometheus metrics",
        description="Capture a window every period, analyse it, serve /metrics, /healthz, /readyz. "
        "Every flag can also be set as an environment variable or a YAML key "
        "(precedence: flag > environment > file > default).",
    )
    add_arguments(parser)
    parser.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    config = load_config(args, os.environ)
    configure(config.log_level, config.log_format)
    return Service(config).run()
