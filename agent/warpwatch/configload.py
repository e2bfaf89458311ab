"""Loading `warpwatch run`'s settings (the table: `config`): flags, environment, file, validated.

Precedence: flag > environment > file > default. `load_config` validates everything at
start and raises `ConfigError` naming the setting, the spelling that set it and the value.

Value syntax:
- durations: `500ms`, `10s`, `2m`, `1h`, or plain seconds (`1.5`);
- sizes: `512MiB`, `2GiB`, `10GB`, `4096` (bytes); binary (KiB, MiB, GiB, TiB) and decimal
  (kB, MB, GB, TB) units;
- shares: `1%` or a fraction (`0.01`);
- booleans: `true/false`, `yes/no`, `on/off`, `1/0` (flags: `--allow-high-duty` and
  `--no-allow-high-duty`);
- `source` is repeatable (`--source A --source B`); in the environment, specs are separated by
  whitespace; in YAML, a string or a list of strings.
"""

from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .config import (
    CONFIG_FILE_ENV,
    MAX_COLLECT_TIMEOUT_S,
    MAX_DUTY,
    MAX_OVERHEAD_BUDGET,
    MAX_PERIOD_S,
    MAX_WINDOW_S,
    SETTINGS,
    SETTINGS_BY_NAME,
    Config,
    Setting,
    default_jitter,
)
from .errors import ConfigError
from .units import (
    parse_bool,
    parse_duration,
    parse_int,
    parse_list,
    parse_path,
    parse_ratio,
    parse_size,
    parse_str,
)


def _parser_for(setting: Setting) -> Callable[[object], Any]:
    if setting.kind == "choice":

        def choice(value: object) -> str:
            text = parse_str(value).strip().lower()
            if text not in setting.choices:
                raise ValueError("expected one of " + ", ".join(setting.choices))
            return text

        return choice
    table: dict[str, Callable[[object], Any]] = {
        "str": parse_str,
        "int": parse_int,
        "duration": parse_duration,
        "size": parse_size,
        "bool": parse_bool,
        "list": parse_list,
        "path": parse_path,
        "ratio": parse_ratio,
    }
    return table[setting.kind]


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a YAML settings file; unknown keys are an error (a typo must not pass silently)."""
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config file {os.fspath(path)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {os.fspath(path)!r}: not UTF-8 text (byte {exc.start}); save it as UTF-8"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {os.fspath(path)!r} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {os.fspath(path)!r}: expected a mapping of settings at the top level")
    for key in data:
        if key not in SETTINGS_BY_NAME:
            hint = difflib.get_close_matches(str(key), SETTINGS_BY_NAME, n=1)
            suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
            raise ConfigError(f"config file {os.fspath(path)!r}: unknown setting {key!r}{suggestion}")
    return dict(data)


def load_config(
    args: argparse.Namespace | Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    file: str | os.PathLike[str] | None = None,
) -> Config:
    """Merge flags > environment > file > defaults into a validated `Config`.

    `args` holds the flags that were given (absent ones missing, as `add_arguments` leaves
    them); `file` defaults to `args.config`, else `$WARPWATCH_CONFIG`.
    """
    given: dict[str, Any] = dict(vars(args) if isinstance(args, argparse.Namespace) else (args or {}))
    env = dict(environ if environ is not None else {})
    if file is None:
        file = given.get("config") or env.get(CONFIG_FILE_ENV) or None
    from_file = read_config_file(file) if file else {}

    values: dict[str, Any] = {}
    for s in SETTINGS:
        parse = _parser_for(s)
        if s.name in given and given[s.name] is not None:
            raw, where = given[s.name], s.flag
            if s.kind == "list" and isinstance(raw, list | tuple):
                raw = [spec for item in raw for spec in ([item] if isinstance(item, str) else item)]
        elif s.env in env:
            raw, where = env[s.env], s.env
        elif s.key in from_file:
            raw, where = from_file[s.key], f"{s.key} in {os.fspath(file or '')}"
        else:
            values[s.name] = s.default
            continue
        try:
            values[s.name] = parse(raw)
        except (ValueError, TypeError, OverflowError) as exc:
            raise ConfigError(f"{s.name} ({where}): invalid value {_shown(raw)}: {exc}") from None
    if values["jitter"] is None:
        values["jitter"] = default_jitter(values["period"])
    config = Config(**values)
    validate(config)
    return config


def _shown(raw: object) -> str:
    """A value as quoted in an error: repr, cut to 80 characters (a value may be a whole file)."""
    text = repr(raw)
    return text if len(text) <= 80 else text[:77] + "..."


def validate(config: Config) -> None:
    """Check the settings against each other and their bounds; one ConfigError naming the setting
    and what to do."""
    if not config.source:
        raise ConfigError("source: no source given; add one, e.g. --source dir:/var/run/traces")
    for name in ("period", "window"):
        if getattr(config, name) <= 0:
            raise ConfigError(f"{name}: must be greater than 0 (got {getattr(config, name):g}s)")
    for name in ("jitter", "collect_timeout"):
        if getattr(config, name) < 0:
            raise ConfigError(f"{name}: must not be negative (got {getattr(config, name):g}s)")
    for name, bound, why in (
        ("period", MAX_PERIOD_S, "one window a day"),
        ("window", MAX_WINDOW_S, "Kineto's on-demand traces are capped at 10 minutes"),
        ("collect_timeout", MAX_COLLECT_TIMEOUT_S, "an hour"),
    ):
        if getattr(config, name) > bound:
            raise ConfigError(f"{name}: must be at most {bound:g}s ({why}; got {getattr(config, name):g}s)")
    if config.window >= config.period:
        raise ConfigError(f"window: must be shorter than period (window {config.window:g}s, period {config.period:g}s)")
    if config.jitter >= config.period:
        raise ConfigError(f"jitter: must be shorter than period (jitter {config.jitter:g}s, period {config.period:g}s)")
    if config.duty > MAX_DUTY and not config.allow_high_duty:
        raise ConfigError(
            f"window: {config.window:g}s per {config.period:g}s period is a capture duty of "
            f"{config.duty:.0%}, above {MAX_DUTY:.0%}; shorten the window, lengthen the period, "
            f"or pass --allow-high-duty"
        )
    if not 0 < config.overhead_budget <= MAX_OVERHEAD_BUDGET:
        raise ConfigError(
            f"overhead_budget: must be a share above 0 and at most 100% "
            f"(got {config.overhead_budget:g}); e.g. 1% or 0.01"
        )
    if not 0 <= config.port <= 65535:
        raise ConfigError(f"port: must be between 0 and 65535 (got {config.port})")
    if not 1 <= config.top_kernels <= 10_000:
        raise ConfigError(f"top_kernels: must be between 1 and 10000 (got {config.top_kernels})")
    if not 1 <= config.max_gpus <= 100_000:
        raise ConfigError(f"max_gpus: must be between 1 and 100000 (got {config.max_gpus})")
    for name in ("retention_files", "retention_bytes"):
        if getattr(config, name) < 0:
            raise ConfigError(f"{name}: must not be negative (0 means no bound; got {getattr(config, name)})")
    for name in ("max_trace_bytes", "evidence_bytes", "evidence_files"):
        if getattr(config, name) <= 0:
            raise ConfigError(f"{name}: must be greater than 0 (got {getattr(config, name)})")
    if not config.address:
        raise ConfigError("address: must not be empty (0.0.0.0 listens on every interface)")
    for name in ("gpu_properties", "web_config"):
        path = getattr(config, name)
        if path is not None and not path.is_file():
            raise ConfigError(f"{name}: file {os.fspath(path)!r} does not exist or is not a file")
