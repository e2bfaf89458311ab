"""`warpwatch run`'s command line as its users type it: the choices in the help, one exit status (2)
for every bad value with the value as the user gave it (flag, environment variable, or key and
file), values that start with a minus, and `--check`, which checks and starts nothing."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest

from support.paths import ROOT
from warpwatch.commands import run as run_module
from warpwatch.commands.cli import main
from warpwatch.config.table import SETTINGS

SAMPLE = ROOT / "agent" / "warpwatch" / "samples" / "a100_alexnet.json.gz"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No WARPWATCH_* of the machine's leaks into these runs."""
    for name in list(os.environ):
        if name.startswith("WARPWATCH_"):
            monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The service never runs here: an error, or `--check`, must come before it."""

    class Refused:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise AssertionError("the service was started")

    monkeypatch.setattr(run_module, "Service", Refused)


def error_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """(exit status, the last line on stderr) of `warpwatch ARGV`."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    return code, capsys.readouterr().err.strip().splitlines()[-1]


def test_flags_with_a_fixed_set_of_values_list_them_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "--log-level {debug,info,warning,error}" in text
    assert "--log-format {text,json}" in text
    for s in SETTINGS:
        if s.choices:
            assert f"{s.flag} {{{','.join(s.choices)}}}" in text


def test_a_choice_is_checked_as_any_value_and_case_does_not_matter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert error_of(["run", "--source", f"dir:{tmp_path}", "--log-level", "verbose"], capsys) == (
        2,
        "warpwatch: error: --log-level verbose: expected one of debug, info, warning, error",
    )
    assert main(["run", "--check", "--source", f"dir:{tmp_path}", "--log-level", "DEBUG"]) == 0


@pytest.mark.parametrize(
    ("spelled", "message"),
    [
        (["--period", "-5s"], "--period -5s: must be greater than 0"),
        (["--period=-5s"], "--period -5s: must be greater than 0"),
        (["--window", "0"], "--window 0: must be greater than 0"),
        (["--jitter", "-1s"], "--jitter -1s: must not be negative"),
        (["--retention-bytes", "-1MiB"], "--retention-bytes -1MiB: must not be negative (0 means no bound)"),
        (["--top-kernels", "-3"], "--top-kernels -3: must be between 1 and 10000"),
        (["--top-kernels", "many"], "--top-kernels many: expected an integer"),
        (["--period", "soon"], "--period soon: expected a duration such as 500ms, 10s, 2m, 1h, 1d"),
        (["--period", "500ms"], "--period 500ms: must be longer than the window (the default window 1s)"),
        (["--window", "2m"], "--window 2m: must be shorter than the period (the default period 60s)"),
    ],
)
def test_a_bad_flag_value_exits_2_naming_the_flag_as_typed(
    spelled: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert error_of(["run", "--source", f"dir:{tmp_path}", *spelled], capsys) == (2, f"warpwatch: error: {message}")


def test_a_bad_environment_value_exits_2_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WARPWATCH_SOURCE", f"dir:{tmp_path}")
    monkeypatch.setenv("WARPWATCH_PERIOD", "-5s")
    assert error_of(["run"], capsys) == (2, "warpwatch: error: WARPWATCH_PERIOD=-5s: must be greater than 0")
    monkeypatch.setenv("WARPWATCH_PERIOD", "10 parsecs")
    assert error_of(["run"], capsys) == (
        2,
        "warpwatch: error: WARPWATCH_PERIOD='10 parsecs': expected a duration such as 500ms, 10s, 2m, 1h, 1d",
    )


def test_a_bad_file_value_exits_2_naming_the_key_and_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    yml = tmp_path / "warpwatch.yml"
    yml.write_text(f"source: dir:{tmp_path}\nperiod: -5s\n")
    assert error_of(["run", "--config", str(yml)], capsys) == (
        2,
        f"warpwatch: error: period: -5s (in {yml}): must be greater than 0",
    )
    monkeypatch.setenv("WARPWATCH_CONFIG", str(tmp_path / "absent.yml"))
    assert error_of(["run"], capsys) == (
        2,
        f"warpwatch: error: WARPWATCH_CONFIG={tmp_path / 'absent.yml'}: No such file or directory",
    )


def test_a_source_spec_that_names_no_source_exits_2_naming_where_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, line = error_of(["run", "--source", f"dir:{tmp_path}", "--source", "nfs:/x"], capsys)
    assert (code, line.split(";")[0]) == (2, "warpwatch: error: --source nfs:/x: unknown kind of source")
    monkeypatch.setenv("WARPWATCH_SOURCE", f"dir:{tmp_path} nfs:/x")
    code, line = error_of(["run"], capsys)
    assert (code, line.split(";")[0]) == (
        2,
        f"warpwatch: error: nfs:/x in WARPWATCH_SOURCE='dir:{tmp_path} nfs:/x': unknown kind of source",
    )


def test_other_commands_take_values_that_start_with_a_minus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert error_of(["analyze", "--max-trace-bytes", "-5MiB", str(SAMPLE)], capsys) == (
        2,
        "warpwatch analyze: error: argument --max-trace-bytes: must be greater than 0 (got '-5MiB')",
    )
    assert error_of(["evidence", "pull", "http://127.0.0.1:1", "--since", "soon", "-o", str(tmp_path)], capsys) == (
        2,
        "warpwatch: error: --since 'soon': expected a duration such as 500ms, 10s, 2m, 1h, 1d",
    )


# --------------------------------------------------------------------------------------------- --check


def test_check_says_ok_in_one_line_and_starts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(SAMPLE, tmp_path / "a.json.gz")
    argv = ["run", "--check", "--source", f"dir:{tmp_path}", "--source", f"replay:{tmp_path}", "--port", "1"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert out.err == ""
    assert out.out == (
        f"warpwatch run --check: ok: 2 sources (dir:{tmp_path}, replay:{tmp_path}); a 1s window every 60s; "
        "HTTP on 0.0.0.0:1 (nothing started)\n"
    )


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("dir:{tmp}/absent", "--source dir:{tmp}/absent: folder {tmp}/absent does not exist"),
        ("dir:{tmp}/file.txt", "--source dir:{tmp}/file.txt: folder {tmp}/file.txt is not a folder"),
        ("replay:{tmp}/empty", "--source replay:{tmp}/empty: no trace files (*.json, *.json.gz) in folder {tmp}/empty"),
        ("replay:{tmp}/absent.json", "--source replay:{tmp}/absent.json: {tmp}/absent.json does not exist"),
        ("kineto-daemon", "--source kineto-daemon: trace folder {tmp}/file.txt is not a folder"),
        ("kineto-daemon:colour=red", "--source kineto-daemon:colour=red: unknown option 'colour=red'"),
    ],
)
def test_check_refuses_a_source_whose_folder_cannot_be_read_with_exit_2(
    source: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    argv = ["run", "--check", "--source", source.format(tmp=tmp_path), "--trace-dir", str(tmp_path / "file.txt")]
    code, line = error_of(argv, capsys)
    assert code == 2
    assert line.split(";")[0] == "warpwatch: error: " + message.format(tmp=tmp_path)


def test_check_reads_the_files_the_settings_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    props = tmp_path / "props.json"
    props.write_text("{not json")
    code, line = error_of(["run", "--check", "--source", f"dir:{tmp_path}", "--gpu-properties", str(props)], capsys)
    assert code == 2
    assert line.startswith(f"warpwatch: error: --gpu-properties {props}: GPU properties are not valid JSON")
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: /absent.pem\n")
    code, line = error_of(["run", "--check", "--source", f"dir:{tmp_path}", "--web-config", str(web)], capsys)
    assert code == 2 and str(web) in line


def test_check_of_bad_settings_exits_2_with_the_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(gzip.compress(b"{}"))
    assert error_of(["run", "--check", "--source", f"replay:{trace}", "--period", "-1m"], capsys) == (
        2,
        "warpwatch: error: --period -1m: must be greater than 0",
    )
