"""The dir: source under hostile files (issue 20): a plain .json truncated by its writer while
the real agent checks it, and deep nesting. (The completeness check itself: test_files_jsonscan.py.)"""

from __future__ import annotations

import gzip
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from support.agent import Agent, parse, sample
from support.paths import HTA
from support.patience import hang_guard
from warpwatch.capture import files
from warpwatch.capture.confine import ConfinedFile
from warpwatch.capture.dirsource import DirSource
from warpwatch.config.table import Config
from warpwatch.export import metricdefs as md
from warpwatch.service.agent import Service

ALEXNET = HTA / "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
DEEP = 100_000


# --------------------------------------------------------------------------------------------- deep nesting


def _kernel_trace() -> bytes:
    return gzip.decompress(ALEXNET.read_bytes())


def test_deep_nesting_fails_that_file_and_the_source_carries_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue: a 100k-deep file raised RecursionError out of the dir: source's completeness check
    (msgspec), so every round failed as "capture raised" and no file in the folder was read."""
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "deep.json").write_bytes(b'{"traceEvents": [], "x": ' + b"[" * DEEP + b"]" * DEEP + b"}")
    event = b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2, "args": '
    (folder / "deep_args.json").write_bytes(
        b'{"traceEvents": [' + event + b'{"a":' * DEEP + b"1" + b"}" * DEEP + b"}]}"
    )
    (folder / "good.json").write_bytes(_kernel_trace())
    now = time.time_ns()
    for p in folder.iterdir():  # fresh files: only the completeness check can hand them over now
        os.utime(p, ns=(now, now))
    src = DirSource(folder, json_settle_s=3600.0, give_up_s=3600.0)
    cfg = Config(
        source=(f"dir:{folder}",),
        address="127.0.0.1",
        port=0,
        period=10.0,
        window=0.05,
        jitter=0.0,
        collect_timeout=5.0,
    )
    svc = Service(cfg, sources=[src])
    with caplog.at_level(logging.INFO):
        svc.run_round()

    def count(m: md.MetricDef, **labels: str) -> float:
        return sample(parse(svc.render("text/plain")[0].decode()), md.exposed_name(m), **labels) or 0.0

    assert count(md.ERRORS, stage="capture", reason="raised") == 0
    assert count(md.WINDOWS, outcome="ok") == 1  # good.json, in the same round
    windows = {
        r.warpwatch_fields.get("file"): r.warpwatch_fields
        for r in caplog.records  # type: ignore[attr-defined]
        if r.msg == "window"
    }
    assert windows["good.json"]["outcome"] == "ok"
    for name in ("deep.json", "deep_args.json"):  # whole, so handed over at once, and failed by the reader
        assert windows[name]["outcome"] == "failed"
        assert "nested too deeply" in windows[name]["error"]
    assert count(md.ERRORS, stage="read", reason="invalid_trace") == 2
    assert count(md.WINDOWS, outcome="failed") == 2


@pytest.mark.parametrize("how", ["truncate", "append", "replace"])
def test_a_json_changed_while_it_is_checked_waits_for_the_next_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The source has opened the file for the completeness check when its writer changes it: not
    handed over now (try again later); a whole file is handed over at the next look, once."""
    folder = tmp_path / "traces"
    folder.mkdir()
    target = folder / "t.json"
    body = _kernel_trace()
    target.write_bytes(body)
    real_open = files.open_confined
    opens = 0

    @contextmanager
    def changing(path: Path, folder: Path | None = None) -> Iterator[ConfinedFile]:
        nonlocal opens
        with real_open(path, folder) as opened:
            opens += 1
            if opens == 2:  # the first open is the cheap `{` ... `}` look, the second the full check
                if how == "truncate":
                    os.truncate(target, len(body) - 3)
                elif how == "append":
                    with target.open("ab") as f:
                        f.write(b"\n")
                else:
                    tmp = target.with_name("t.json.tmp")
                    tmp.write_bytes(body + b"  ")
                    os.replace(tmp, target)
            yield opened

    monkeypatch.setattr(files, "open_confined", changing)
    src = DirSource(folder, json_settle_s=3600.0, give_up_s=3600.0)
    assert src.capture(0.01, 1.0) == []
    assert opens == 2
    windows = src.capture(0.01, 1.0)
    if how == "truncate":  # cut for good: it waits (until give_up_s, then fails as truncated)
        assert windows == []
    else:
        assert [w.path for w in windows] == [target]
        windows[0].done(True)
        assert src.capture(0.01, 1.0) == []


# --------------------------------------------------------------------------------------------- SIGBUS


def _opened_by(pid: int, target: Path) -> tuple[bool, bool]:
    """(the process has `target` open, it has it memory-mapped)."""
    name = str(target)
    opened = mapped = False
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == name:
                    opened = True
                    break
            except OSError:
                continue
        with open(f"/proc/{pid}/maps") as maps:
            mapped = name in maps.read()
    except OSError:
        pass
    return opened, mapped


@pytest.mark.slow
def test_a_writer_truncating_a_json_while_the_agent_checks_it_never_kills_the_agent(tmp_path: Path) -> None:
    """Issue: the agent validated a plain .json over an mmap; a writer truncating the file under
    the map killed the agent with SIGBUS (exit -7). A real writer truncates the file each time it
    sees the real agent reading (or mapping) it; the agent must live on and read a good file."""
    folder = tmp_path / "traces"
    folder.mkdir()
    events = json.loads(_kernel_trace())["traceEvents"]
    one = json.dumps(events).encode()[1:-1]
    body = b'{"traceEvents": [' + b", ".join([one] * max(1, (48 << 20) // len(one))) + b"]}"
    target = folder / "big.json"
    agent = Agent(
        "--source",
        f"dir:{folder}",
        "--period",
        "0.4s",
        "--window",
        "0.05s",
        "--jitter",
        "0",
        "--allow-high-duty",
        "--collect-timeout",
        "20s",
    )
    pid = agent.proc.pid
    truncated_while_read = mapped_seen = 0
    delays = [0.0, 0.01, 0.03, 0.06, 0.1]
    try:
        deadline = time.monotonic() + hang_guard(90)
        cycle = 0
        while truncated_while_read < 6 and time.monotonic() < deadline and agent.proc.poll() is None:
            target.write_bytes(body)  # a fresh mtime each cycle: a new file for the source
            delay, since = delays[cycle % len(delays)], None
            cycle += 1
            until = time.monotonic() + 3
            while time.monotonic() < until and agent.proc.poll() is None:
                opened, mapped = _opened_by(pid, target)
                if opened and since is None:
                    since = time.monotonic()
                if mapped or (opened and since is not None and time.monotonic() - since >= delay):
                    os.truncate(target, 4096)  # whatever the reader has not reached yet is gone
                    mapped_seen += mapped
                    truncated_while_read += 1
                    break
                if not opened:
                    since = None
                time.sleep(0.0005)
            time.sleep(0.2)
        assert agent.proc.poll() is None, f"agent died with {agent.proc.returncode}:\n" + "\n".join(agent.lines[-20:])
        assert truncated_while_read >= 6
        print(f"truncated {truncated_while_read} times while the agent read the file, {mapped_seen} while mapped")
        target.unlink()
        good = folder / "good.json"
        tmp = folder / "good.json.tmp"
        tmp.write_bytes(_kernel_trace())
        os.replace(tmp, good)
        agent.wait_for_line(
            r"event=window .*file=good\.json .*outcome=ok|event=window .*outcome=ok.*file=good\.json", 30
        )
        assert agent.proc.poll() is None
    finally:
        rc, _ = agent.stop()
    assert rc == 0
    assert not any("Traceback" in line for line in agent.lines)
