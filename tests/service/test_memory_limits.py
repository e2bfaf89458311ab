"""The agent and the CLI under a real memory cgroup: hostile files never take them past the limit.

Each case runs the real process in a fresh cgroup (v2 `memory.max` or v1
`memory.limit_in_bytes`, whichever this machine has; `memcg.py`), where going over the limit is
an OOM kill by the kernel, as in a Kubernetes pod. Inputs are made here, quickly:

- a 3 GiB gzip bomb: concatenated gzip members of valid trace events (a 3 MB file), so that
  the reader decodes every piece until `max_trace_bytes` (2 GiB) refuses it;
- a 1.5 GiB sparse file `{` + NULs + `}`;
- a ~470 MB valid trace: the events of HTA's df_index_resolver trace written 10 times
  (193,700 kernels; the benchmarks' reference file is the same with each copy shifted in time).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from support import memcg
from support.agent import ERRORS, ROOT, WINDOWS, Agent, no_traceback, sample, windows
from support.agent import agent_env as _env
from support.paths import HTA

MiB = 1024**2
GiB = 1024**3
SOURCE = HTA / "df_index_resolver" / "df_index_resolver.json.gz"
GOOD = HTA / "trace_diff" / "control" / "control.json.gz"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

_WHY_NOT = memcg.unavailable()


@pytest.fixture(autouse=True)
def needs_a_cgroup() -> None:
    if _WHY_NOT:
        pytest.skip(f"no memory cgroup here: {_WHY_NOT}")


def write_bomb(path: Path, size: int = 3 * GiB) -> None:
    """`size` bytes of a valid trace once decompressed: the same gzip member written again and again."""
    line = b'{"ph": "i", "s": "t", "name": "tick", "pid": 1, "tid": 1, "ts": 1},\n'
    block = line * (64 * MiB // len(line))
    member = gzip.compress(block, compresslevel=1)
    with path.open("wb") as fh:
        fh.write(gzip.compress(b'{"traceEvents": [\n'))
        for _ in range(size // len(block)):
            fh.write(member)
        fh.write(gzip.compress(line.rstrip(b",\n") + b"\n]}"))


def write_sparse_junk(path: Path, size: int = 3 * GiB // 2) -> None:
    with path.open("wb") as fh:
        fh.write(b"{")
        fh.truncate(size - 1)
        fh.seek(size - 1)
        fh.write(b"}")


def write_big_trace(path: Path, copies: int = 10) -> int:
    """HTA's df_index_resolver trace with its events written `copies` times; returns the kernel count."""
    with gzip.open(SOURCE, "rb") as fh:
        doc: dict[str, Any] = json.load(fh)
    events = doc.pop("traceEvents")
    kernels = sum(1 for ev in events if ev.get("cat") == "kernel")
    block = ",\n".join(json.dumps(ev) for ev in events).encode()
    head = json.dumps(doc)[:-1].encode() + b', "traceEvents": [\n'
    with path.open("wb") as fh:
        fh.write(head)
        for i in range(copies):
            fh.write(block + (b",\n" if i < copies - 1 else b"\n]}"))
    return kernels * copies


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("big") / "df_index_resolver_x10.json"
    return path, write_big_trace(path)


class Peak:
    """Samples the PSS of a process tree every 50 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.kb = max(self.kb, memcg.tree_pss_kb(self.pid))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.kb


class CgroupAgent(Agent):
    """`test_agent.Agent`, started inside a memory cgroup."""

    def __init__(self, cg: memcg.MemoryCgroup, *args: str) -> None:
        cmd = [sys.executable, "-m", "warpwatch", "run", "--address", "127.0.0.1", "--port", "0", *args]
        self.proc = cg.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env())
        self.lines = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        line = self.wait_for_line(r"event=listening", 30)
        self.port = int(line.split("port=")[1].split()[0])
        self.url = f"http://127.0.0.1:{self.port}"


def test_the_agent_in_256_mib_survives_a_gzip_bomb_sparse_junk_and_a_500_mb_window(
    tmp_path: Path, big_trace: tuple[Path, int]
) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    write_bomb(folder / "a_bomb.json.gz")
    write_sparse_junk(folder / "b_junk.json")
    big, _ = big_trace
    try:
        os.link(big, folder / "c_big.json")
    except OSError:  # another file system
        shutil.copyfile(big, folder / "c_big.json")
    with memcg.MemoryCgroup(256 * MiB) as cg:
        # The dir source checks that a .gz is complete by decompressing all of it (3 GiB here): on a
        # loaded machine that outlasts a short collect timeout, and a capture that timed out never
        # hands its files over again; the timeout is long so that the reader is what is tested.
        agent = CgroupAgent(
            cg,
            "--source",
            f"dir:{folder}",
            "--period",
            "2s",
            "--window",
            "100ms",
            "--jitter",
            "0",
            "--collect-timeout",
            "120s",
        )
        peak = Peak(agent.proc.pid)
        try:
            t0 = time.monotonic()
            samples = agent.wait_for(lambda s: windows(s, "ok") + windows(s, "failed") >= 3, timeout=600)
            seconds = time.monotonic() - t0
            assert agent.proc.poll() is None and cg.oom_kills() == 0
            # The bomb is refused at max_trace_bytes, the junk is not JSON; the big window is
            # processed, or refused by the memory budget: counted either way, never killed.
            assert sample(samples, ERRORS, stage="read", reason="too_large") is not None
            assert (sample(samples, ERRORS, stage="read", reason="invalid_trace") or 0) >= 1
            big_ok = windows(samples, "ok") == 1
            if not big_ok:
                assert sample(samples, ERRORS, stage="read", reason="too_large") == 2
            (folder / "d_good.json.gz").write_bytes(GOOD.read_bytes())
            samples = agent.wait_for(lambda s: windows(s, "ok") >= 1 + big_ok, timeout=120)
            assert agent.proc.poll() is None and cg.oom_kills() == 0
        finally:
            rc, _ = agent.stop(timeout=60)
            pss = peak.stop()
        print(
            f"\nagent in 256 MiB: 3 hostile windows in {seconds:.1f} s, peak tree PSS {pss / 1024:.0f} MB, "
            f"cgroup peak {cg.peak() / MiB:.0f} MiB (page cache included)"
        )
        for line in agent.lines:
            if "event=window" in line or "event=memory_budget" in line:
                print(line)
    assert rc == 0
    assert sample(samples, WINDOWS, outcome="ok") == 1 + big_ok
    no_traceback(agent)


def test_analyze_reads_the_470_mb_trace_in_512_mib(big_trace: tuple[Path, int]) -> None:
    big, kernels = big_trace
    with memcg.MemoryCgroup(512 * MiB) as cg:
        t0 = time.monotonic()
        proc = cg.popen(
            [sys.executable, "-m", "warpwatch", "analyze", "--format", "json", str(big)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=_env(),
        )
        peak = Peak(proc.pid)
        out, err = proc.communicate(timeout=600)
        pss = peak.stop()
        seconds = time.monotonic() - t0
        kills = cg.oom_kills()
    print(f"\nanalyze in 512 MiB: {seconds:.1f} s, peak tree PSS {pss / 1024:.0f} MB, rc {proc.returncode}")
    assert kills == 0, err.decode()[-2000:]
    assert proc.returncode == 0, err.decode()[-2000:]
    assert json.loads(out)["traces"][0]["launch_count"] == kernels == 193_700
