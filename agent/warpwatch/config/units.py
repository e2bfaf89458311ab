"""Values as people write them in flags, environment variables and YAML: durations (`500ms`, `2m`),
sizes (`512MiB`, `2GiB`), booleans, lists. Each parser raises ValueError with what it expected; each
check (`Seconds`, `Count`, `Share`, `FilePath`, `Text`) says why a parsed value is out of its bounds."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|h|d)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
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
    """`500ms`, `10s`, `2m`, `1h`, `1d` or plain seconds -> seconds. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 500ms, 10s, 2m, 1h, 1d")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = _DURATION.match(str(value))
        if m is None:
            raise ValueError("expected a duration such as 500ms, 10s, 2m, 1h, 1d")
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


# ---------------------------------------------------------------------------------------------
# Checks: one per kind of bound, shared by the settings table (`config.SETTINGS`) and every source's
# and option's keyword arguments, so that a value is refused by the same rule wherever it is set.
# `problem` says why a parsed value is refused, after the value as the user typed it
# (`--period 0: must be greater than 0`); `require` checks a keyword argument, whose type is not
# known yet, and names what it must be (`period_s: 0 must be a positive number of seconds`).


def _number(value: object) -> bool:
    """A finite int or float (not a bool, which Python counts as an int)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class Seconds:
    """A duration in seconds: finite, above 0 (0 too with `zero`), at most `most` (`why` says why)."""

    zero: bool = False
    most: float | None = None
    why: str = ""

    def problem(self, value: object) -> str | None:
        if not _number(value):
            return f"must be {self.expected()}"
        assert isinstance(value, int | float)
        if value < 0 or (value == 0 and not self.zero):
            return "must not be negative" if self.zero else "must be greater than 0"
        if self.most is not None and value > self.most:
            return f"must be at most {self.most:g}s ({self.why})"
        return None

    def expected(self) -> str:
        what = "zero or more seconds" if self.zero else "a positive number of seconds"
        return what if self.most is None else f"{what}, at most {self.most:g}"

    def require(self, value: object, setting: str, prefix: str = "") -> float:
        """`value` as a float, else a ConfigError naming `setting` (after `prefix`, e.g. the source)."""
        _require(self, value, setting, prefix)
        assert isinstance(value, int | float)
        return float(value)


@dataclass(frozen=True, slots=True)
class Count:
    """A whole number (of files, bytes, GPUs, retries...) from `least` to `most`; `zero_means` says
    what 0 stands for where it is allowed as "no bound"."""

    least: int = 1
    most: int | None = None
    zero_means: str = ""

    def problem(self, value: object) -> str | None:
        if not _whole(value):
            return "must be a whole number"
        assert isinstance(value, int)
        if self.most is not None and not self.least <= value <= self.most:
            return f"must be between {self.least} and {self.most}"
        if value >= self.least:
            return None
        if self.least == 0:
            return "must not be negative" + (f" ({self.zero_means})" if self.zero_means else "")
        return "must be greater than 0" if self.least == 1 else f"must be at least {self.least}"

    def expected(self) -> str:
        if self.most is not None:
            return f"a whole number between {self.least} and {self.most}"
        return f"a whole number, {self.least} or more"

    def require(self, value: object, setting: str, prefix: str = "") -> int:
        """`value`, else a ConfigError naming `setting` (after `prefix`, e.g. the source)."""
        _require(self, value, setting, prefix)
        assert isinstance(value, int)
        return value


@dataclass(frozen=True, slots=True)
class Share:
    """A share of something: above 0 and at most `most` (1.0: 100%)."""

    most: float = 1.0

    def problem(self, value: object) -> str | None:
        if isinstance(value, int | float) and _number(value) and 0 < value <= self.most:
            return None
        return f"must be {self.expected()}; e.g. 1% or 0.01"

    def expected(self) -> str:
        return f"a share above 0 and at most {self.most:.0%}"

    def require(self, value: object, setting: str, prefix: str = "") -> float:
        _require(self, value, setting, prefix)
        assert isinstance(value, int | float)
        return float(value)


@dataclass(frozen=True, slots=True)
class FilePath:
    """A file that exists (None: not set, which passes)."""

    def problem(self, value: object) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str | Path):
            return f"must be {self.expected()}"
        return None if Path(value).is_file() else "does not exist or is not a file"

    def expected(self) -> str:
        return "the path of an existing file"

    def require(self, value: object, setting: str, prefix: str = "") -> Path | None:
        _require(self, value, setting, prefix)
        return Path(value) if isinstance(value, str | Path) else None


@dataclass(frozen=True, slots=True)
class Text:
    """A string that is not empty; `hint` says what to give instead of nothing."""

    hint: str = ""

    def problem(self, value: object) -> str | None:
        if isinstance(value, str) and value:
            return None
        return "must not be empty" + (f" ({self.hint})" if self.hint else "")

    def expected(self) -> str:
        return "a string that is not empty"


Check = Seconds | Count | Share | FilePath | Text
"""A setting's bounds: the settings table carries one per row that has any."""


def _require(check: Check, value: object, setting: str, prefix: str) -> None:
    if check.problem(value) is not None:
        raise ConfigError(f"{prefix}{setting}: {value!r} must be {check.expected()}")


def check_seconds(value: float, setting: str, *, zero: bool = False, prefix: str = "") -> float:
    """`value` when it is a finite number of seconds above 0 (0 too with `zero`), else a ConfigError
    naming `setting` (after `prefix`, e.g. the source). NaN and infinity are refused."""
    return Seconds(zero=zero).require(value, setting, prefix)


def check_count(value: int, setting: str, *, least: int = 1, most: int | None = None, prefix: str = "") -> int:
    """`value` when it is a whole number (not a bool) from `least` to `most`, else a ConfigError naming
    `setting` (after `prefix`, e.g. the source), as `check_seconds` does for seconds."""
    return Count(least, most).require(value, setting, prefix)
