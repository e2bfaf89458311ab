"""Loading `warpwatch run`'s settings (the table: `table`): flags, environment, file, validated.

Precedence: flag > environment > file > default. `load_config` validates everything at
start and raises `ConfigError` that starts with the value as the user gave it (`Origin`): the flag
and its value (`--period -5s`), the environment variable (`WARPWATCH_PERIOD=-5s`), or the YAML key
and the file (`period: -5s (in /etc/warpwatch.yml)`).

Value syntax:
- durations: `500ms`, `10s`, `2m`, `1h`, `1d`, or plain seconds (`1.5`);
- sizes: `512MiB`, `2GiB`, `10GB`, `4096` (bytes); binary (KiB, MiB, GiB, TiB) and decimal
  (kB, MB, GB, TB) units;
- shares: `1%` or a fraction (`0.01`);
- booleans: `true/false`, `yes/no`, `on/off`, `1/0` (flags: `--allow-high-duty` and
  `--no-allow-high-duty`);
- `source` is repeatable (`--source A --source B`); in the environment, specs are separated by
  whitespace; in YAML, a string or a list of strings;
- a duration or a size may start with a minus (`-5s`): it is read, then refused by its bound
  ("must be greater than 0"), so that the error is the bound's, not a syntax error.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError
from .table import (
    CONFIG_FILE_ENV,
    MAX_DUTY,
    SETTINGS,
    SETTINGS_BY_NAME,
    Config,
    Setting,
    default_jitter,
)
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
        "duration": _signed(parse_duration),
        "size": _signed(parse_size),
        "bool": parse_bool,
        "list": parse_list,
        "path": parse_path,
        "ratio": parse_ratio,
    }
    return table[setting.kind]


def _signed(parse: Callable[[object], Any]) -> Callable[[object], Any]:
    """`parse`, and a leading minus: `-5s` reads as -5 seconds, so that the bounds refuse it as a
    bound ("must be greater than 0"), not as a typo."""

    def signed(value: object) -> Any:
        if isinstance(value, str) and value.strip().startswith("-"):
            return -parse(value.strip()[1:])
        return parse(value)

    return signed


Where = Literal["flag", "env", "file", "default", "value"]


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a setting's value came from, spelled as the user wrote it, to start its error with:
    `--period -5s`, `WARPWATCH_PERIOD=-5s`, `period: -5s (in /etc/warpwatch.yml)`; `the default
    period 60s`; `period 60s` when nothing is known of where it came from."""

    setting: Setting
    where: Where
    raw: object
    file: str = ""

    def __str__(self) -> str:
        return self.said(self.raw)

    def said(self, raw: object) -> str:
        """How `raw` reads from this origin (`part` of a list: one item of it)."""
        s = self.setting
        if self.where == "flag" and isinstance(raw, list | tuple):
            return " ".join(self.said(item) for item in raw)
        if self.where == "flag":
            return f"{s.flag} {typed(raw)}"
        if self.where == "env":
            return f"{s.env}={typed(raw)}"
        if self.where == "file":
            return f"{s.key}: {typed(raw)} (in {self.file})"
        return ("the default " if self.where == "default" else "") + f"{s.name} {typed(raw)}"

    def part(self, item: str) -> str:
        """One item of a list setting (a `--source` spec) as the user gave it: the flag or the key with
        that item; for the environment, which holds them all, the item in the whole variable."""
        if self.where != "env":
            return self.said(item)
        return str(self) if str(self.raw).split() == [item] else f"{typed(item)} in {self}"


def typed(raw: object) -> str:
    """A value as the user typed it: quoted as a shell would need it, cut to `SHOWN` characters (a value
    may be a whole file, but a path must show whole); YAML's own values as YAML writes them."""
    if isinstance(raw, str):
        text = shlex.quote(raw) if raw.isprintable() else repr(raw)
    elif isinstance(raw, bool):
        text = "true" if raw else "false"
    elif raw is None:
        text = "null"
    elif isinstance(raw, list | tuple):
        text = "[" + ", ".join(typed(item) for item in raw) + "]"
    else:
        text = str(raw)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


SHOWN = 240
"""The longest value an error repeats (paths under a test runner's temporary folders reach 150)."""


def _value_text(setting: Setting, value: object) -> str:
    """A parsed value as a default or an unknown origin shows it (durations in s)."""
    if setting.kind == "duration" and isinstance(value, int | float):
        return f"{value:g}s"
    if isinstance(value, Path):
        return os.fspath(value)
    if isinstance(value, tuple):
        return " ".join(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def read_config_file(path: str | os.PathLike[str], label: str | None = None) -> dict[str, Any]:
    """Read a YAML settings file; unknown keys are an error (a typo must not pass silently).
    `label` starts the errors about the file itself (default: `config file 'PATH'`)."""
    import yaml

    name = label or f"config file {os.fspath(path)!r}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{name}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: expected a mapping of settings at the top level")
    for key in data:
        if key not in SETTINGS_BY_NAME:
            hint = difflib.get_close_matches(str(key), SETTINGS_BY_NAME, n=1)
            suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
            raise ConfigError(f"{name}: unknown setting {key!r}{suggestion}")
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
    return load_settings(args, environ, file)[0]


def load_settings(
    args: argparse.Namespace | Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    file: str | os.PathLike[str] | None = None,
) -> tuple[Config, dict[str, Origin]]:
    """`load_config`, and where each setting that was given came from (for later errors, such as a
    `--source` spec that names no source)."""
    given: dict[str, Any] = dict(vars(args) if isinstance(args, argparse.Namespace) else (args or {}))
    env = dict(environ if environ is not None else {})
    label = None
    if file is None and given.get("config"):
        file, label = given["config"], f"--config {typed(given['config'])}"
    elif file is None and env.get(CONFIG_FILE_ENV):
        file, label = env[CONFIG_FILE_ENV], f"{CONFIG_FILE_ENV}={typed(env[CONFIG_FILE_ENV])}"
    from_file = read_config_file(file, label) if file else {}

    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    for s in SETTINGS:
        origin = _origin(s, given, env, from_file, os.fspath(file or ""))
        if origin is None:
            values[s.name] = s.default
            continue
        try:
            values[s.name] = _parser_for(s)(origin.raw)
        except (ValueError, TypeError, OverflowError) as exc:
            raise ConfigError(f"{origin}: {exc}") from None
        origins[s.name] = origin
    if values["jitter"] is None:
        values["jitter"] = default_jitter(values["period"])
    config = Config(**values)
    validate(config, origins)
    return config, origins


def _origin(
    s: Setting, given: Mapping[str, Any], env: Mapping[str, str], from_file: Mapping[str, Any], file: str
) -> Origin | None:
    """Where `s` is set, by precedence (flag > environment > file), with its raw value; None: unset."""
    if s.name in given and given[s.name] is not None:
        raw = given[s.name]
        if s.kind == "list" and isinstance(raw, list | tuple):
            raw = [spec for item in raw for spec in ([item] if isinstance(item, str) else item)]
        return Origin(s, "flag", raw)
    if s.env in env:
        return Origin(s, "env", env[s.env])
    if s.key in from_file:
        return Origin(s, "file", from_file[s.key], file)
    return None


Said = Callable[[str], str]
"""A setting's name -> its value as the user gave it (`Origin`), to start an error with."""


def validate(config: Config, origins: Mapping[str, Origin] | None = None) -> None:
    """Check each setting against its row's bounds (`Setting.check`), then the settings against each
    other; one ConfigError that starts with the value as the user gave it (`origins`, from
    `load_settings`) and says what to do."""
    known = origins or {}

    def at(name: str) -> str:
        if name in known:
            return str(known[name])
        s = SETTINGS_BY_NAME[name]
        return str(Origin(s, "default" if origins is not None else "value", _value_text(s, getattr(config, name))))

    if not config.source:
        raise ConfigError("source: no source given; add one, e.g. --source dir:/var/run/traces")
    for s in SETTINGS:
        problem = s.check.problem(getattr(config, s.name)) if s.check is not None else None
        if problem is not None:
            raise ConfigError(f"{at(s.name)}: {problem}")
    _check_together(config, at, lambda name: name in known)


def _check_together(config: Config, at: Said, given: Callable[[str], bool]) -> None:
    """The window within the period, the jitter shorter than it, and the capture duty: checks of two
    settings at once, blamed on the one the user gave (not a default)."""
    period_blamed = given("period") and not given("window")
    if config.window >= config.period:
        raise ConfigError(
            f"{at('period')}: must be longer than the window ({at('window')})"
            if period_blamed
            else f"{at('window')}: must be shorter than the period ({at('period')})"
        )
    if config.jitter >= config.period:
        raise ConfigError(f"{at('jitter')}: must be shorter than the period ({at('period')})")
    if config.duty > MAX_DUTY and not config.allow_high_duty:
        raise ConfigError(
            f"{at('period' if period_blamed else 'window')}: {config.window:g}s per {config.period:g}s period is a "
            f"capture duty of {config.duty:.0%}, above {MAX_DUTY:.0%}; shorten the window, lengthen the period, "
            f"or pass --allow-high-duty"
        )
