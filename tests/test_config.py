"""Settings of `warpwatch run`: one table, three spellings, one precedence order, clear errors."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from warpwatch.config.load import load_config
from warpwatch.config.table import (
    SETTINGS,
    Config,
    add_arguments,
    config_fields,
    default_jitter,
    settings_table_markdown,
)
from warpwatch.config.units import parse_duration, parse_size
from warpwatch.errors import ConfigError

BASE = {"WARPWATCH_SOURCE": "dir:/traces"}
"""Every valid config needs a source; tests that are not about sources take it from here."""


def parse_flags(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


# A value for each setting, as text, and what it must become. Durations and sizes use units, so
# that each spelling goes through the setting's own parser.
SAMPLES: dict[str, tuple[str, Any]] = {
    "source": ("replay:/x.json", ("replay:/x.json",)),
    "address": ("127.0.0.1", "127.0.0.1"),
    "port": ("9999", 9999),
    "period": ("2m", 120.0),
    "window": ("500ms", 0.5),
    "overhead_budget": ("2%", 0.02),
    "adaptive_window": ("on", True),
    "jitter": ("3s", 3.0),
    "top_kernels": ("7", 7),
    "kernel_gauges": ("on", True),
    "max_gpus": ("16", 16),
    "log_level": ("debug", "debug"),
    "log_format": ("json", "json"),
    "allow_high_duty": ("true", True),
    "trace_dir": ("/var/tmp/ww", Path("/var/tmp/ww")),
    "delete_processed": ("yes", True),
    "retention_files": ("100", 100),
    "retention_bytes": ("1GiB", 1024**3),
    "max_trace_bytes": ("512MiB", 512 * 1024**2),
    "collect_timeout": ("1h", 3600.0),
    "gpu_properties": ("__FILE__", None),
    "web_config": ("__FILE__", None),
    "evidence_dir": ("/var/lib/ww/evidence", Path("/var/lib/ww/evidence")),
    "evidence_bytes": ("256MiB", 256 * 1024**2),
    "evidence_files": ("50", 50),
}


def test_the_table_and_the_config_have_the_same_settings() -> None:
    assert tuple(s.name for s in SETTINGS) == config_fields()
    assert set(SAMPLES) == set(config_fields())


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_every_setting_has_a_flag_an_environment_variable_and_a_yaml_key(setting: Any, tmp_path: Path) -> None:
    text, expected = SAMPLES[setting.name]
    if text == "__FILE__":
        existing = tmp_path / "file.yml"
        existing.write_text("{}\n")
        text, expected = str(existing), existing
    assert setting.flag == "--" + setting.name.replace("_", "-")
    assert setting.env == "WARPWATCH_" + setting.name.upper()
    assert setting.key == setting.name

    base = {} if setting.name == "source" else BASE
    flag_args = [setting.flag] if setting.kind == "bool" else [setting.flag, text]
    by_flag = load_config(parse_flags(*flag_args), base)
    by_env = load_config({}, {**base, setting.env: text})
    yml = tmp_path / "warpwatch.yml"
    yml.write_text(f"{setting.key}: {text!r}\n")
    by_file = load_config({}, base, yml)

    for cfg in (by_flag, by_env, by_file):
        assert getattr(cfg, setting.name) == expected, setting.name


def test_flags_beat_the_environment_which_beats_the_file_which_beats_the_default(tmp_path: Path) -> None:
    yml = tmp_path / "w.yml"
    yml.write_text("top_kernels: 30\nport: 9000\nperiod: 90s\nsource: [dir:/from-file]\n")
    env = {"WARPWATCH_TOP_KERNELS": "20", "WARPWATCH_PORT": "9100"}
    cfg = load_config(parse_flags("--top-kernels", "10", "--config", str(yml)), env)
    assert cfg.top_kernels == 10  # flag
    assert cfg.port == 9100  # environment
    assert cfg.period == 90.0  # file
    assert cfg.window == 1.0  # default
    assert cfg.source == ("dir:/from-file",)


def test_the_config_file_can_come_from_the_environment(tmp_path: Path) -> None:
    yml = tmp_path / "w.yml"
    yml.write_text("source: replay:/a.json\ntop_kernels: 3\n")
    cfg = load_config({}, {"WARPWATCH_CONFIG": str(yml)})
    assert (cfg.source, cfg.top_kernels) == (("replay:/a.json",), 3)


def test_source_is_repeatable_and_whitespace_separated_in_the_environment() -> None:
    assert load_config(parse_flags("--source", "dir:/a", "--source", "replay:/b"), {}).source == ("dir:/a", "replay:/b")
    assert load_config({}, {"WARPWATCH_SOURCE": "dir:/a  replay:/b"}).source == ("dir:/a", "replay:/b")


def test_booleans_can_be_switched_off_by_flag_over_the_environment() -> None:
    env = {**BASE, "WARPWATCH_DELETE_PROCESSED": "1"}
    assert load_config({}, env).delete_processed is True
    assert load_config(parse_flags("--no-delete-processed"), env).delete_processed is False


def test_the_defaults() -> None:
    cfg = load_config({}, BASE)
    assert cfg == Config(source=("dir:/traces",))
    assert (cfg.address, cfg.port, cfg.period, cfg.window, cfg.top_kernels) == ("0.0.0.0", 9946, 60.0, 1.0, 16)
    assert cfg.max_trace_bytes == 2 * 1024**3
    assert cfg.duty == pytest.approx(1 / 60)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("10s", 10.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1d", 86400.0),
        ("1.5d", 129600.0),
        ("1.5", 1.5),
        ("30", 30.0),
        (" 2 m ", 120.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "size"),
    [("4096", 4096), ("512MiB", 512 * 2**20), ("2GiB", 2 * 2**30), ("10GB", 10 * 10**9), ("1kB", 1000), ("3KiB", 3072)],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"WARPWATCH_PERIOD": "10 parsecs"},
            "WARPWATCH_PERIOD='10 parsecs': expected a duration such as 500ms, 10s, 2m, 1h, 1d",
        ),
        (
            {"WARPWATCH_MAX_TRACE_BYTES": "lots"},
            "WARPWATCH_MAX_TRACE_BYTES=lots: expected a size such as 4096, 512MiB, 2GiB",
        ),
        ({"WARPWATCH_TOP_KERNELS": "many"}, "WARPWATCH_TOP_KERNELS=many: expected an integer"),
        ({"WARPWATCH_LOG_FORMAT": "xml"}, "WARPWATCH_LOG_FORMAT=xml: expected one of text, json"),
        ({"WARPWATCH_ALLOW_HIGH_DUTY": "maybe"}, "WARPWATCH_ALLOW_HIGH_DUTY=maybe: expected true or false"),
        (
            {"WARPWATCH_WINDOW": "10s"},
            "WARPWATCH_WINDOW=10s: 10s per 60s period is a capture duty of 17%, above 10%; shorten the window, "
            "lengthen the period, or pass --allow-high-duty",
        ),
        ({"WARPWATCH_WINDOW": "2m"}, "WARPWATCH_WINDOW=2m: must be shorter than the period (the default period 60s)"),
        ({"WARPWATCH_PERIOD": "0"}, "WARPWATCH_PERIOD=0: must be greater than 0"),
        ({"WARPWATCH_PERIOD": "-5s"}, "WARPWATCH_PERIOD=-5s: must be greater than 0"),
        ({"WARPWATCH_JITTER": "90s"}, "WARPWATCH_JITTER=90s: must be shorter than the period (the default period 60s)"),
        ({"WARPWATCH_PORT": "70000"}, "WARPWATCH_PORT=70000: must be between 0 and 65535"),
        ({"WARPWATCH_TOP_KERNELS": "0"}, "WARPWATCH_TOP_KERNELS=0: must be between 1 and 10000"),
        ({"WARPWATCH_RETENTION_FILES": "-1"}, "WARPWATCH_RETENTION_FILES=-1: must not be negative (0 means no bound)"),
        (
            {"WARPWATCH_RETENTION_BYTES": "-1MiB"},
            "WARPWATCH_RETENTION_BYTES=-1MiB: must not be negative (0 means no bound)",
        ),
        (
            {"WARPWATCH_WINDOW": "11m"},
            "WARPWATCH_WINDOW=11m: must be at most 600s (Kineto's on-demand traces are capped at 10 minutes)",
        ),
        ({"WARPWATCH_COLLECT_TIMEOUT": "2h"}, "WARPWATCH_COLLECT_TIMEOUT=2h: must be at most 3600s (an hour)"),
        (
            {"WARPWATCH_OVERHEAD_BUDGET": "150%"},
            "WARPWATCH_OVERHEAD_BUDGET=150%: must be a share above 0 and at most 100%; e.g. 1% or 0.01",
        ),
        ({"WARPWATCH_MAX_GPUS": "0"}, "WARPWATCH_MAX_GPUS=0: must be between 1 and 100000"),
        ({"WARPWATCH_EVIDENCE_FILES": "0"}, "WARPWATCH_EVIDENCE_FILES=0: must be greater than 0"),
        (
            {"WARPWATCH_ADDRESS": ""},
            "WARPWATCH_ADDRESS='': must not be empty (0.0.0.0 listens on every interface)",
        ),
        (
            {"WARPWATCH_GPU_PROPERTIES": "/nonexistent/props.json"},
            "WARPWATCH_GPU_PROPERTIES=/nonexistent/props.json: does not exist or is not a file",
        ),
    ],
)
def test_bad_settings_are_refused_with_a_message_naming_them(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config({}, {**BASE, **env})
    assert str(info.value) == message


def test_high_duty_is_allowed_when_asked_for() -> None:
    cfg = load_config(
        {},
        {
            **BASE,
            "WARPWATCH_WINDOW": "50ms",
            "WARPWATCH_PERIOD": "1s",
            "WARPWATCH_ALLOW_HIGH_DUTY": "on",
            "WARPWATCH_JITTER": "0",
        },
    )
    assert cfg.duty == pytest.approx(0.05)
    cfg = load_config(
        {},
        {
            **BASE,
            "WARPWATCH_WINDOW": "500ms",
            "WARPWATCH_PERIOD": "1s",
            "WARPWATCH_ALLOW_HIGH_DUTY": "on",
            "WARPWATCH_JITTER": "0",
        },
    )
    assert cfg.duty == 0.5


def test_no_source_is_an_error_that_says_what_to_add() -> None:
    with pytest.raises(ConfigError, match=r"^source: no source given; add one, e\.g\. --source dir:/var/run/traces$"):
        load_config({}, {})


def test_a_misspelt_key_in_the_file_is_an_error_with_a_suggestion(tmp_path: Path) -> None:
    yml = tmp_path / "w.yml"
    yml.write_text("source: dir:/x\ntop_kernel: 5\n")
    with pytest.raises(ConfigError) as info:
        load_config({}, {}, yml)
    assert str(info.value) == f"config file {str(yml)!r}: unknown setting 'top_kernel'; did you mean 'top_kernels'?"


def test_a_bad_value_in_the_file_names_the_key_and_the_file(tmp_path: Path) -> None:
    yml = tmp_path / "w.yml"
    yml.write_text("source: dir:/x\nperiod: soon\n")
    with pytest.raises(ConfigError) as info:
        load_config({}, {}, yml)
    assert str(info.value) == f"period: soon (in {yml}): expected a duration such as 500ms, 10s, 2m, 1h, 1d"


def test_a_missing_or_broken_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        load_config({}, {}, tmp_path / "absent.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("source: [unclosed\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config({}, {}, bad)
    listing = tmp_path / "list.yml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="expected a mapping of settings"):
        load_config({}, {}, listing)


def test_yaml_native_types_are_accepted(tmp_path: Path) -> None:
    yml = tmp_path / "w.yml"
    yml.write_text("source: [dir:/a, dir:/b]\nperiod: 120\nallow_high_duty: true\nretention_bytes: 1000\n")
    cfg = load_config({}, {}, yml)
    assert (cfg.source, cfg.period, cfg.allow_high_duty, cfg.retention_bytes) == (
        ("dir:/a", "dir:/b"),
        120.0,
        True,
        1000,
    )


def test_every_flag_is_in_the_help_with_its_environment_variable() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    text = parser.format_help()
    for s in SETTINGS:
        assert s.flag in text
        assert s.env in text


def test_the_readme_table_lists_every_spelling() -> None:
    table = settings_table_markdown()
    for s in SETTINGS:
        assert f"| `{s.flag}` | `{s.env}` | `{s.key}` |" in table


def test_config_defaults_are_the_tables() -> None:
    plain = Config()
    for setting in SETTINGS:
        expected = default_jitter(plain.period) if setting.name == "jitter" else setting.default
        assert getattr(plain, setting.name) == expected, setting.name


def test_the_docs_carry_the_settings_table_as_generated() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "agent.md").read_text(encoding="utf-8")
    assert settings_table_markdown() in page
