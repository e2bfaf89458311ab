"""Faults of the trace files the agent reads from a folder (`dir:`): a file still growing is
waited for, a truncated one is given up on and fails its window once, a full trace volume (a real
tmpfs where mounting is allowed, else a writer under RLIMIT_FSIZE) fails the window, a read error
keeps the last snapshot. Each counted in `warpwatch_errors_total{stage,reason}` or
`warpwatch_windows_total{outcome}`, logged once, and the agent goes on (test_faults.py: the traced
process, NVML)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.agent import (
    ALEXNET,
    CONTROL,
    ERRORS,
    Agent,
    StubSource,
    no_traceback,
    parse,
    sample,
    series,
    service_for,
    windows,
)
from support.patience import hang_guard
from support.tracebuild import kernel, span, trace_doc
from warpwatch.capture import CapturedWindow
from warpwatch.export import metricdefs as md
from warpwatch.service import reading as reading_module
from warpwatch.service.agent import Service


def exposed(svc: Service, name: str, labels: dict[str, str] | None = None) -> float | None:
    """A sample of the service's /metrics, as a scrape reads it."""
    return sample(parse(svc.render("text/plain")[0].decode()), name, **(labels or {}))


def errors(samples: Any, stage: str, reason: str) -> float:
    return sample(samples, ERRORS, stage=stage, reason=reason) or 0.0


def dir_agent(folder: Path, collect_timeout: str, *more: str) -> Agent:
    """An agent reading the traces dropped in `folder`: a 20-ms window every 300 ms, each file
    given up on after `collect_timeout`."""
    return Agent(
        "--source",
        f"dir:{folder}",
        "--period",
        "300ms",
        "--window",
        "20ms",
        "--jitter",
        "0",
        "--allow-high-duty",
        "--collect-timeout",
        collect_timeout,
        *more,
    )


@pytest.mark.slow
def test_a_growing_file_is_waited_for_until_it_is_complete(tmp_path: Path) -> None:
    """A trace written slowly, in pieces, is never handed over half-written. The give-up time (the
    collect timeout) is a hang guard: however long a loaded machine leaves between two pieces, the
    agent waits for the file to be complete, not for a time."""
    folder = tmp_path / "traces"
    folder.mkdir()
    data = CONTROL.read_bytes()
    growing = folder / "growing.json.gz"
    agent = dir_agent(folder, f"{hang_guard():g}s")
    try:
        step = len(data) // 8 + 1
        pieces = [data[i : i + step] for i in range(0, len(data), step)]
        with growing.open("wb") as f:  # written slowly, in pieces, for over a second
            for piece in pieces[:-1]:
                f.write(piece)
                f.flush()
                time.sleep(0.15)
                samples = agent.scrape()
                assert windows(samples, "ok") == windows(samples, "failed") == 0  # never handed over half-written
            f.write(pieces[-1])
        samples = agent.wait_for(lambda s: windows(s, "ok") == 1, timeout=20)
        assert windows(samples, "failed") == 0
    finally:
        rc, _ = agent.stop()
    assert rc == 0
    [window] = [x for x in agent.lines if "event=window " in x]
    assert "file=growing.json.gz" in window and "outcome=ok" in window


@pytest.mark.slow
def test_a_truncated_file_is_given_up_on_and_fails_once(tmp_path: Path) -> None:
    """A trace that never completes is handed over once the give-up time (the 1 s collect timeout)
    is over, fails as truncated, and is not handed over again."""
    folder = tmp_path / "traces"
    folder.mkdir()
    data = CONTROL.read_bytes()
    (folder / "cut.json.gz").write_bytes(data[: len(data) // 3])  # never completes
    agent = dir_agent(folder, "1s")
    try:
        samples = agent.wait_for(lambda s: windows(s, "failed") == 1, timeout=20)
        assert errors(samples, "read", "invalid_trace") == 1
        time.sleep(1)  # a few more rounds: it is not handed over again (a check that nothing happens)
        samples = agent.scrape()
        assert windows(samples, "failed") == 1 and windows(samples, "ok") == 0
    finally:
        rc, _ = agent.stop()
    assert rc == 0
    failed = [x for x in agent.lines if "outcome=failed" in x]
    assert len(failed) == 1 and "file=cut.json.gz" in failed[0] and "truncated" in failed[0]


@contextlib.contextmanager
def small_volume(path: Path) -> Iterator[str]:
    """A 64 KiB tmpfs at `path` ("tmpfs"), or a plain folder whose writers get RLIMIT_FSIZE ("rlimit")."""
    path.mkdir()
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)], capture_output=True, check=False
        ).returncode
        == 0
    )
    try:
        yield "tmpfs" if mounted else "rlimit"
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)


WRITER = """
import signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
data = open(sys.argv[1], "rb").read()
try:
    with open(sys.argv[2], "wb") as f:
        f.write(data)
except OSError as exc:
    print(exc.errno)
"""


def write_on_volume(kind: str, source: Path, target: Path) -> int:
    """Write `source` to `target` as a traced process would; the errno it got (0 if none)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    proc = subprocess.run(
        [sys.executable, "-c", WRITER, str(source), str(target)],
        capture_output=True,
        text=True,
        preexec_fn=limit if kind == "rlimit" else None,
        timeout=hang_guard(30),
        check=False,
    )
    return int(proc.stdout.strip() or 0)


@pytest.mark.slow
def test_a_full_trace_volume_fails_the_window_and_the_agent_goes_on(tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    big = tmp_path / "big.json"
    big.write_text(json.dumps(trace_doc([span(0, 10**6)] + [kernel(f"k{i}", ts=10 + i, dur=1) for i in range(400)])))
    assert big.stat().st_size > 128 * 1024
    with small_volume(volume) as kind:
        agent = dir_agent(volume, "1s", "--delete-processed")
        try:
            assert write_on_volume(kind, big, volume / "big.json") in (errno.ENOSPC, errno.EFBIG)
            samples = agent.wait_for(lambda s: errors(s, "read", "invalid_trace") == 1, timeout=20)
            assert windows(samples, "failed") == 1
            # The partial file was deleted once analysed: the volume has room again.
            deadline = time.monotonic() + hang_guard(5)
            while os.listdir(volume):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            small = tmp_path / "small.json"
            small.write_text(json.dumps(trace_doc([span(0, 1000), kernel("k", ts=10, dur=5)])))
            assert write_on_volume(kind, small, volume / "good.json") == 0
            samples = agent.wait_for(lambda s: windows(s, "ok") == 1, timeout=20)
            assert series(samples, md.KERNEL_TIME_SHARE.name)
        finally:
            rc, _ = agent.stop()
    assert rc == 0
    no_traceback(agent)


def test_a_read_error_is_counted_and_the_last_snapshot_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    src = StubSource()
    src.queue.append([CapturedWindow(source="stub:1", path=ALEXNET)])
    svc = service_for(src)
    svc.run_round()
    good = svc.render("text/plain")[0]

    def eio(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(reading_module, "read_trace", eio)
    src.queue.append([CapturedWindow(source="stub:1", path=ALEXNET)])
    svc.run_round()
    assert exposed(svc, ERRORS, {"stage": "read", "reason": "io_error"}) == 1
    after = parse(svc.render("text/plain")[0].decode())
    before = parse(good.decode())
    assert series(after, md.KERNEL_TIME_SHARE.name) == series(before, md.KERNEL_TIME_SHARE.name)
