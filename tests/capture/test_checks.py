"""The checks every source shares: seconds, the start folder, the confined trace listing."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

from warpwatch.capture.daemon import KinetoDaemonSource
from warpwatch.capture.dirsource import DirSource
from warpwatch.capture.folders import check_start_folder, list_traces
from warpwatch.capture.inprocess import attach
from warpwatch.capture.registry import sglang_source, vllm_source
from warpwatch.config.units import check_seconds
from warpwatch.errors import CaptureError, ConfigError


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 0.0, -1.0])
def test_positive_seconds_refuse_infinity_nan_zero_and_negatives(value: float) -> None:
    with pytest.raises(ConfigError, match=f"^x: source: wait_s: {value!r} must be a positive number of seconds$"):
        check_seconds(value, "wait_s", prefix="x: source: ")


def test_zero_seconds_are_allowed_where_asked_and_infinity_never() -> None:
    assert check_seconds(0, "pause_s", zero=True) == 0.0
    assert check_seconds(2, "pause_s") == 2.0
    with pytest.raises(ConfigError, match="pause_s: inf must be zero or more seconds"):
        check_seconds(math.inf, "pause_s", zero=True)


SOURCES_WITH_SECONDS: list[tuple[str, Any]] = [
    ("kineto-daemon", lambda inf: KinetoDaemonSource(Path("/tmp/t"), socket_dir="/tmp/unused", start_lead_s=inf)),
    ("kineto-daemon", lambda inf: KinetoDaemonSource(Path("/tmp/t"), socket_dir="/tmp/unused", client_ttl_s=inf)),
    ("in-process", lambda inf: attach(period_s=inf, window_s=1.0, trace_dir="/tmp/x")),
    ("in-process", lambda inf: attach(period_s=10.0, window_s=1.0, trace_dir="/tmp/x", first_delay_s=inf)),
    ("vllm", lambda inf: vllm_source("http://h:1", "/tmp/t", flush_timeout_s=inf)),
    ("vllm", lambda inf: vllm_source("http://h:1", "/tmp/t", retry_pause_s=inf)),
    ("sglang", lambda inf: sglang_source("http://h:1", "/tmp/t", request_timeout_s=inf)),
    ("dir", lambda inf: DirSource("/tmp/t", give_up_s=inf)),
    ("dir", lambda inf: DirSource("/tmp/t", json_settle_s=inf)),
]


@pytest.mark.parametrize(("kind", "build"), SOURCES_WITH_SECONDS)
def test_every_source_kind_refuses_infinite_seconds(kind: str, build: Any) -> None:
    with pytest.raises(ConfigError, match="inf must be"):
        build(math.inf)


def test_a_start_folder_is_a_readable_folder_or_not_there_yet(tmp_path: Path) -> None:
    assert check_start_folder("dir:x", tmp_path) is True
    assert check_start_folder("dir:x", tmp_path / "later") is False
    (tmp_path / "f").write_text("x")
    with pytest.raises(CaptureError, match=f"^vllm:a: trace folder {tmp_path / 'f'} is not a folder$"):
        check_start_folder("vllm:a", tmp_path / "f", "trace folder")


def test_a_listing_checks_confinement_as_it_lists(tmp_path: Path) -> None:
    folder, outside = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    outside.mkdir()
    (outside / "secret.json").write_text("{}")
    (folder / "a.json").write_text("{}")
    (folder / "alias.json").symlink_to("a.json")
    (folder / "escape.json").symlink_to(outside / "secret.json")
    os.mkfifo(folder / "pipe.json")
    (folder / "dir.json").mkdir()
    (folder / "notes.txt").write_text("x")
    listing = list_traces(folder, lambda name: name.endswith(".json"))
    assert sorted(p.name for p in listing.files) == ["a.json", "alias.json", "dir.json", "escape.json", "pipe.json"]
    assert sorted(p.name for p in listing.refused) == ["dir.json", "escape.json", "pipe.json"]
    assert sorted(listing.allowed()) == ["a.json", "alias.json"]
    with pytest.raises(FileNotFoundError):
        list_traces(tmp_path / "missing", lambda name: True)
