"""The settings table is the one place a setting's type, default and bounds are written: `Config`
agrees with it, `validate` checks each row's bounds, and the same checks refuse the keyword
arguments of every source and option, the same way."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from warpwatch.capture.daemon import KinetoDaemonSource
from warpwatch.capture.inprocess import attach
from warpwatch.capture.registry import sglang_source, vllm_source
from warpwatch.config.load import load_config, validate
from warpwatch.config.table import SETTINGS, Config, Setting, add_arguments, default_jitter
from warpwatch.config.units import Check, Count, FilePath, Seconds, Share, Text, check_count, check_seconds
from warpwatch.errors import ConfigError
from warpwatch.export.seriesbound import GpuBound

BASE = {"WARPWATCH_SOURCE": "dir:/traces"}


def test_config_declares_the_tables_fields_in_its_order_with_its_types() -> None:
    hints = typing.get_type_hints(Config)
    assert [f.name for f in dataclasses.fields(Config)] == [s.name for s in SETTINGS]
    for s in SETTINGS:
        assert hints[s.name] == s.type, s.name


def test_config_defaults_are_read_from_the_table() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(Config)}
    for s in SETTINGS:
        # jitter's default depends on the period: the table says "derived" (None), Config holds its value
        expected = default_jitter(defaults["period"]) if s.name == "jitter" else s.default
        assert defaults[s.name] == expected, s.name
        assert s.default is None or isinstance(s.default, typing.get_origin(s.type) or s.type), s.name


CHECK_OF_KIND: dict[str, type[Any]] = {
    "duration": Seconds,
    "int": Count,
    "size": Count,
    "ratio": Share,
    "path": FilePath,
    "str": Text,
}


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.check is not None], ids=lambda s: s.name)
def test_each_check_suits_its_settings_kind(setting: Setting) -> None:
    assert isinstance(setting.check, CHECK_OF_KIND[setting.kind])


def test_the_defaults_pass_their_own_checks() -> None:
    validate(Config(source=("dir:/x",)))
    for s in SETTINGS:
        value = default_jitter(60.0) if s.name == "jitter" else s.default
        assert s.check is None or s.check.problem(value) is None, s.name


def bad_values(check: Check) -> list[str]:
    """Values just outside `check`'s bounds, as a user would type them."""
    if isinstance(check, Seconds):
        return ["-1s" if check.zero else "0"] + ([f"{2 * check.most:g}"] if check.most is not None else [])
    if isinstance(check, Count):
        return [str(check.least - 1)] + ([str(check.most + 1)] if check.most is not None else [])
    if isinstance(check, Share):
        return ["0", f"{200 * check.most:g}%"]
    if isinstance(check, FilePath):
        return ["/nonexistent/file"]
    return [""]


BOUNDED = [(s, value) for s in SETTINGS if s.check is not None for value in bad_values(s.check)]


@pytest.mark.parametrize(("setting", "text"), BOUNDED, ids=lambda v: v.name if isinstance(v, Setting) else repr(v))
def test_a_value_out_of_bounds_fails_the_same_way_wherever_it_is_set(
    setting: Setting, text: str, tmp_path: Path
) -> None:
    """Flag, environment and file: the same reason, the check's, after the value as it was given."""
    assert setting.check is not None
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    yml = tmp_path / "w.yml"
    yml.write_text(f"{setting.key}: {json.dumps(text)}\n")
    said = {
        "flag": (lambda: load_config(parser.parse_args([f"{setting.flag}={text}"]), BASE)),
        "env": (lambda: load_config({}, {**BASE, setting.env: text})),
        "file": (lambda: load_config({}, BASE, yml)),
    }
    reasons = set()
    for where, load in said.items():
        with pytest.raises(ConfigError) as info:
            load()
        message = str(info.value)
        assert message.startswith(
            {"flag": f"{setting.flag} ", "env": f"{setting.env}=", "file": f"{setting.key}: "}[where]
        ), message
        reasons.add(message.rsplit(": ", 1)[1] if where != "file" else message.split("): ", 1)[1])
    assert len(reasons) == 1, reasons


@pytest.mark.parametrize(
    ("check", "value", "reason"),
    [
        (Seconds(), 0.0, "must be greater than 0"),
        (Seconds(zero=True), -1.0, "must not be negative"),
        (Seconds(most=600.0, why="ten minutes"), 601.0, "must be at most 600s (ten minutes)"),
        (Count(1, 10), 11, "must be between 1 and 10"),
        (Count(0, zero_means="0 means no bound"), -1, "must not be negative (0 means no bound)"),
        (Count(1), 0, "must be greater than 0"),
        (Count(2), 1, "must be at least 2"),
        (Count(1), True, "must be a whole number"),
        (Count(1), 1.5, "must be a whole number"),
        (Share(), 1.5, "must be a share above 0 and at most 100%; e.g. 1% or 0.01"),
        (Share(), math.nan, "must be a share above 0 and at most 100%; e.g. 1% or 0.01"),
        (FilePath(), Path("/nonexistent"), "does not exist or is not a file"),
        (Text("say where"), "", "must not be empty (say where)"),
    ],
)
def test_each_check_says_why_a_value_is_refused(check: Check, value: object, reason: str) -> None:
    assert check.problem(value) == reason


def test_values_within_bounds_pass() -> None:
    assert Seconds().problem(0.5) is None
    assert Seconds(zero=True).problem(0) is None
    assert Count(0, 65535).problem(0) is None
    assert Share().problem(1.0) is None
    assert FilePath().problem(None) is None
    assert Text().problem("x") is None


# Every count a source or an option takes, given as a keyword argument: one helper (`check_count`),
# one message, whatever the source.
COUNTS: list[tuple[str, Callable[[Any], object]]] = [
    ("max_clients", lambda v: KinetoDaemonSource(Path("/tmp/t"), socket_dir="/tmp/unused", max_clients=v)),
    ("max_pending", lambda v: attach(period_s=10, window_s=1, trace_dir="/tmp/x", max_pending=v)),
    ("expected_files", lambda v: vllm_source("http://h:1", "/tmp/t", expected_files=v)),
    ("max_gpus", lambda v: GpuBound(v)),
]


@pytest.mark.parametrize(("name", "build"), COUNTS, ids=[name for name, _ in COUNTS])
@pytest.mark.parametrize("value", [0, -1, 1.5, True, "3"])
def test_every_count_a_source_takes_is_refused_the_same_way(
    name: str, build: Callable[[Any], object], value: Any
) -> None:
    with pytest.raises(ConfigError, match=f"{name}: {value!r} must be a whole number, 1 or more$"):
        build(value)


@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_a_count_that_may_be_zero_says_so(value: Any) -> None:
    with pytest.raises(
        ConfigError, match=rf"^sglang source: max_retries: {value!r} must be a whole number, 0 or more$"
    ):
        sglang_source("http://h:1", "/tmp/unused", max_retries=value)
    assert sglang_source("http://h:1", "/tmp/unused", max_retries=0).options.max_retries == 0


def test_the_helpers_are_the_checks_of_the_table() -> None:
    """`check_seconds` and `check_count` refuse exactly what the table's `Seconds` and `Count` refuse."""
    for value in (0, -1, 0.5, math.inf, math.nan, True):
        for zero in (False, True):
            refused = Seconds(zero=zero).problem(value) is not None
            try:
                check_seconds(value, "s", zero=zero)
            except ConfigError:
                assert refused, (value, zero)
            else:
                assert not refused, (value, zero)
    for value in (0, 1, -1, 1.5, True):
        refused = Count(1).problem(value) is not None
        try:
            check_count(value, "n")  # type: ignore[arg-type]
        except ConfigError:
            assert refused, value
        else:
            assert not refused, value
