"""Values as people write them in flags, environment variables and YAML: durations (`500ms`, `2m`),
sizes (`512MiB`, `2GiB`), booleans, lists. Each parser raises ValueError with what it expected."""

from __future__ import annotations

import math
import re
from pathlib import Path

from .errors import ConfigError

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKMGT]i?B|B)?\s*$")
_SIZE_UNITS = {
    None: 1,
    "B": 1,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
    "kB": 1000,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_duration(value: object) -> float:
    """`500ms`, `10s`, `2m`, `1h` or plain seconds -> seconds. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 500ms, 10s, 2m, 1h")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = _DURATION.match(str(value))
        if m is None:
            raise ValueError("expected a duration such as 500ms, 10s, 2m, 1h")
        seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if not math.isfinite(seconds):
        raise ValueError("expected a finite duration")
    return seconds


def parse_size(value: object) -> int:
    """`512MiB`, `2GiB`, `10GB`, `4096` -> bytes. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 4096, 512MiB, 2GiB")
    if isinstance(value, int):
        return value
    m = _SIZE.match(str(value))
    if m is None or m.group(2) not in _SIZE_UNITS:
        raise ValueError("expected a size such as 4096, 512MiB, 2GiB")
    size = float(m.group(1)) * _SIZE_UNITS[m.group(2)]
    if not math.isfinite(size):
        raise ValueError("expected a finite size")
    return int(size)


def parse_ratio(value: object) -> float:
    """`1%`, `0.5 %` or a plain fraction (`0.01`) -> a fraction. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError("expected a share such as 1% or 0.01")
    text = str(value).strip()
    percent = text.endswith("%")
    try:
        number = float(text[:-1] if percent else text)
    except ValueError:
        raise ValueError("expected a share such as 1% or 0.01") from None
    if not math.isfinite(number):
        raise ValueError("expected a finite share")
    return number / 100.0 if percent else number


def parse_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("expected true or false")


def parse_int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError("expected an integer")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError("expected an integer") from None


def parse_list(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError("expected a string or a list of strings")


def parse_str(value: object) -> str:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value)
    raise ValueError("expected a string")


def parse_path(value: object) -> Path | None:
    if value is None or value == "":
        return None
    return Path(parse_str(value))


def check_seconds(value: float, setting: str, *, zero: bool = False, prefix: str = "") -> float:
    """`value` when it is a finite number of seconds above 0 (0 too with `zero`), else a ConfigError
    naming `setting` (after `prefix`, e.g. the source). NaN and infinity are refused."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        ok = False
    else:
        ok = value >= 0 if zero else value > 0
    if not ok:
        what = "zero or more seconds" if zero else "a positive number of seconds"
        raise ConfigError(f"{prefix}{setting}: {value!r} must be {what}")
    return float(value)
