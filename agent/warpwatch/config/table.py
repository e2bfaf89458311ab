"""Settings of `warpwatch run`: one table, one frozen `Config`.

Every setting has exactly one name, spelled three ways that are derived from it and never
written by hand: the flag `--top-kernels`, the environment variable `WARPWATCH_TOP_KERNELS`
and the YAML key `top_kernels` (in the file named by `--config` / `WARPWATCH_CONFIG`). The
flags, the help and the README's table are derived here; reading the three spellings, parsing
their values and validating them against each row's check: `load`.

A row holds all a setting is: its kind (the type of its value: `KIND_TYPES`), its default, its
bounds (`check`, one of the checks in `units` that every source's own arguments use too) and its
help. `Config` declares the same fields by hand, so that mypy knows their types; its defaults are
read from the table, and a test proves names, types and defaults agree (`tests/test_settings_table.py`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from .units import Check, Count, FilePath, Seconds, Share, Text

ENV_PREFIX = "WARPWATCH_"
CONFIG_FILE_ENV = "WARPWATCH_CONFIG"
MAX_GPUS = 64
"""GPUs exported at once when `max_gpus` is not set: 8 GPUs with MIG's 7 instances each fit."""
MAX_DUTY = 0.10
"""Largest window/period accepted without `allow_high_duty`: profiling slows the workload."""
MAX_PERIOD_S = 24 * 3600.0
"""Longest period accepted: one window a day (a longer one is a typo, e.g. 1e12)."""
MAX_WINDOW_S = 600.0
"""Longest window accepted: Kineto's daemon protocol caps an on-demand trace at 10 minutes, and a
longer trace would not fit any memory limit anyway."""
MAX_COLLECT_TIMEOUT_S = 3600.0
"""Longest wait for a window's trace beyond the window itself."""
MAX_OVERHEAD_BUDGET = 1.0
DEFAULT_OVERHEAD_BUDGET = 0.01
"""The share of the server's time the agent may cost when --overhead-budget is not set."""
DEFAULT_JITTER_S = 5.0
"""Jitter when none is set: min(this, period / 10)."""


def default_jitter(period: float) -> float:
    """The jitter used when none is set: min(5 s, period / 10), so that a short period keeps its
    rhythm (a 2 s period gets 0.2 s, not 5 s, which would be refused as longer than the period)."""
    return min(DEFAULT_JITTER_S, period / 10.0)


Kind = Literal["str", "int", "duration", "size", "bool", "list", "path", "choice", "ratio"]
KIND_TYPES: dict[Kind, Any] = {
    "str": str,
    "int": int,
    "duration": float,
    "size": int,
    "bool": bool,
    "list": tuple[str, ...],
    "path": Path,
    "choice": str,
    "ratio": float,
}
"""The type of a setting's value once parsed, by kind (durations in seconds, sizes in bytes)."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One row of the settings table; the three spellings derive from `name`."""

    name: str
    kind: Kind
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    default_text: str | None = None
    """How the default reads in the help and the README, when it is derived from other settings."""
    check: Check | None = None
    """The value's bounds, checked once it is parsed (`load.validate`); None: any value of its kind."""

    @property
    def type(self) -> Any:
        """The type of the value in `Config`: the kind's, or None too for a path that may be unset."""
        base = KIND_TYPES[self.kind]
        return base | None if self.kind == "path" and self.default is None else base

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def key(self) -> str:
        """The YAML key."""
        return self.name


GiB = 1024**3
NO_BOUND = "0 means no bound"

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "source",
        "list",
        (),
        "where windows come from, repeatable: dir:PATH (finished trace files dropped in a folder), "
        "replay:PATH (a file or folder replayed in a loop), kineto-daemon (PyTorch processes started "
        "with KINETO_USE_DAEMON=1), vllm:URL[,dir=PATH], sglang:URL[,dir=PATH]",
        metavar="SPEC",
    ),
    Setting(
        "address",
        "str",
        "0.0.0.0",
        "address the HTTP server (/metrics, /healthz, /readyz) binds",
        check=Text("0.0.0.0 listens on every interface"),
    ),
    Setting("port", "int", 9946, "HTTP port (0 picks a free one and logs it)", check=Count(0, 65535)),
    Setting(
        "period",
        "duration",
        60.0,
        "time between the starts of two capture windows",
        check=Seconds(most=MAX_PERIOD_S, why="one window a day"),
    ),
    Setting(
        "window",
        "duration",
        1.0,
        "length of one capture window",
        check=Seconds(most=MAX_WINDOW_S, why="Kineto's on-demand traces are capped at 10 minutes"),
    ),
    Setting(
        "overhead_budget",
        "ratio",
        DEFAULT_OVERHEAD_BUDGET,
        "share of the traced server's time the agent may cost, as measured (stop stalls, served slowdown); "
        "above it the period is stretched (docs/overhead.md)",
        metavar="SHARE",
        default_text="1%",
        check=Share(MAX_OVERHEAD_BUDGET),
    ),
    Setting(
        "adaptive_window",
        "bool",
        False,
        "probe with longer windows now and then, and lengthen the window when kernels comparable to it "
        "show up, within the duty cap (sources where the agent chooses the window; docs/metrics.md)",
    ),
    Setting(
        "jitter",
        "duration",
        None,
        "random delay added to each window's start, spreads agents apart",
        default_text="min(5s, period/10)",
        check=Seconds(zero=True),
    ),
    Setting(
        "top_kernels",
        "int",
        16,
        'kernels exported per GPU (by GPU time); the rest fold into kernel="other"',
        check=Count(1, 10_000),
    ),
    Setting(
        "kernel_gauges",
        "bool",
        False,
        "also export the per-kernel last-round gauges (8 series per kernel); rates of the per-kernel "
        "counters answer the same questions (docs/metrics.md)",
    ),
    Setting(
        "max_gpus",
        "int",
        MAX_GPUS,
        "GPUs exported at once (traces may name any device id); beyond, a new GPU takes the place of "
        "the least recently updated one, or is left out and counted in warpwatch_errors_total",
        check=Count(1, 100_000),
    ),
    Setting("log_level", "choice", "info", "log level", choices=("debug", "info", "warning", "error")),
    Setting("log_format", "choice", "text", "log line format: key=value text or JSON", choices=("text", "json")),
    Setting(
        "allow_high_duty",
        "bool",
        False,
        f"allow window/period above {MAX_DUTY:.0%} (profiling slows the workload while a window is open)",
    ),
    Setting("trace_dir", "path", Path("/tmp/warpwatch"), "folder where capture sources have traces written"),
    Setting(
        "delete_processed",
        "bool",
        False,
        "delete trace files once analysed (dir:, vllm:, sglang:; kineto-daemon always deletes its own)",
    ),
    Setting(
        "retention_files",
        "int",
        0,
        "keep at most this many files in a dir: source's folder, deleting the oldest processed ones (0: no bound)",
        check=Count(0, zero_means=NO_BOUND),
    ),
    Setting(
        "retention_bytes",
        "size",
        0,
        "keep at most this many bytes in a dir: source's folder, deleting the oldest processed files (0: no bound)",
        check=Count(0, zero_means=NO_BOUND),
    ),
    Setting(
        "max_trace_bytes",
        "size",
        2 * GiB,
        "largest trace accepted, decompressed; a larger one fails its window",
        check=Count(1),
    ),
    Setting(
        "collect_timeout",
        "duration",
        30.0,
        "how long a source may wait for a window's trace beyond the window itself; a dir: source "
        "hands over a file that never looks complete after this long (its window then fails)",
        check=Seconds(zero=True, most=MAX_COLLECT_TIMEOUT_S, why="an hour"),
    ),
    Setting(
        "gpu_properties",
        "path",
        None,
        "JSON file of device properties, for traces that carry none",
        check=FilePath(),
    ),
    Setting(
        "web_config",
        "path",
        None,
        "Prometheus exporter-toolkit web config file: TLS, client certificates, basic auth, response headers",
        check=FilePath(),
    ),
    Setting(
        "evidence_dir",
        "path",
        None,
        "folder where the traces of the windows that matter are kept, gzip-compressed, with a JSON summary "
        'beside each, and served on /evidence (none: nothing kept; docs/dashboards.md, "From an alert to its trace")',
    ),
    Setting(
        "evidence_bytes", "size", GiB, "bound on the bytes kept in evidence_dir; the oldest go first", check=Count(1)
    ),
    Setting(
        "evidence_files", "int", 500, "bound on the windows kept in evidence_dir; the oldest go first", check=Count(1)
    ),
)
SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


DEFAULTS: dict[str, Any] = {s.name: s.default for s in SETTINGS}
"""Each setting's default, as the table writes it (`Config` reads its defaults from here)."""
_DEFAULT_JITTER_S = default_jitter(DEFAULTS["period"])


@dataclass(frozen=True, slots=True)
class Config:
    """Every setting of `warpwatch run`, validated. Durations in seconds, sizes in bytes. Field
    names, order, types and defaults are the table's (`SETTINGS`; a test proves it); `jitter`
    defaults to `default_jitter(period)`."""

    source: tuple[str, ...] = DEFAULTS["source"]
    address: str = DEFAULTS["address"]
    port: int = DEFAULTS["port"]
    period: float = DEFAULTS["period"]
    window: float = DEFAULTS["window"]
    overhead_budget: float = DEFAULTS["overhead_budget"]
    adaptive_window: bool = DEFAULTS["adaptive_window"]
    jitter: float = _DEFAULT_JITTER_S
    top_kernels: int = DEFAULTS["top_kernels"]
    kernel_gauges: bool = DEFAULTS["kernel_gauges"]
    max_gpus: int = DEFAULTS["max_gpus"]
    log_level: str = DEFAULTS["log_level"]
    log_format: str = DEFAULTS["log_format"]
    allow_high_duty: bool = DEFAULTS["allow_high_duty"]
    trace_dir: Path = DEFAULTS["trace_dir"]
    delete_processed: bool = DEFAULTS["delete_processed"]
    retention_files: int = DEFAULTS["retention_files"]
    retention_bytes: int = DEFAULTS["retention_bytes"]
    max_trace_bytes: int = DEFAULTS["max_trace_bytes"]
    collect_timeout: float = DEFAULTS["collect_timeout"]
    gpu_properties: Path | None = DEFAULTS["gpu_properties"]
    web_config: Path | None = DEFAULTS["web_config"]
    evidence_dir: Path | None = DEFAULTS["evidence_dir"]
    evidence_bytes: int = DEFAULTS["evidence_bytes"]
    evidence_files: int = DEFAULTS["evidence_files"]

    @property
    def duty(self) -> float:
        """Configured capture time / wall time."""
        return self.window / self.period


def config_fields() -> tuple[str, ...]:
    """Names of `Config`'s fields (a test proves they equal the table's names)."""
    return tuple(f.name for f in fields(Config))


def describe(config: Config) -> dict[str, Any]:
    """The effective settings, for the start-up log line."""
    out: dict[str, Any] = {}
    for f in fields(Config):
        value = getattr(config, f.name)
        out[f.name] = (
            " ".join(value) if isinstance(value, tuple) else (os.fspath(value) if isinstance(value, Path) else value)
        )
    return out


# ---------------------------------------------------------------------------------------------
# CLI flags and the README's table, derived from the table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per setting (plus `--config`). Unset flags stay absent from the namespace,
    so that the environment and the file can fill them."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help=f"YAML file of settings (keys as the flags, with _; env {CONFIG_FILE_ENV})",
    )
    for s in SETTINGS:
        default_text = _default_text(s)
        help_text = f"{s.help} (env {s.env}; default {default_text})".replace("%", "%%")
        if s.kind == "bool":
            parser.add_argument(
                s.flag, dest=s.name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=help_text
            )
        elif s.kind == "list":
            parser.add_argument(
                s.flag,
                dest=s.name,
                action="append",
                default=argparse.SUPPRESS,
                metavar=s.metavar or "VALUE",
                help=help_text,
            )
        else:
            # A fixed set of values shows as {a,b} in the usage and the help; `load` checks it
            # (case-insensitively, and naming the flag as the environment and the file are named).
            parser.add_argument(
                s.flag,
                dest=s.name,
                default=argparse.SUPPRESS,
                metavar=s.metavar or ("{" + ",".join(s.choices) + "}" if s.choices else s.name.upper()),
                help=help_text,
            )


def _default_text(s: Setting) -> str:
    if s.default_text is not None:
        return s.default_text
    if s.default is None or s.default == ():
        return "none"
    if s.kind == "duration":
        return f"{s.default:g}s"
    if s.kind == "size":
        return f"{s.default // GiB}GiB" if s.default and s.default % GiB == 0 else str(s.default)
    if s.kind == "bool":
        return "on" if s.default else "off"
    return str(s.default)


def settings_table_markdown(rows: Sequence[Setting] = SETTINGS) -> str:
    """The settings as a Markdown table (for the README)."""
    lines = ["| flag | environment | YAML key | default | meaning |", "|---|---|---|---|---|"]
    for s in rows:
        lines.append(f"| `{s.flag}` | `{s.env}` | `{s.key}` | {_default_text(s)} | {s.help} |")
    return "\n".join(lines)
