"""A process measured as a cgroup charges it: `measure` runs one command and returns its wall time,
the CPU time of its process tree, the peak RSS of its largest process (`wait4`), and the peak PSS
summed over its process tree (`pss_kb`, sampled from /proc every 20 ms), with its output.
Used by run.py (benchmarks/ is not a package: imported from beside it)."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time


def tree(pid: int) -> list[int]:
    """pid and its descendants, from /proc/PID/task/*/children."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except OSError:
            continue
    return out


def pss_kb(pid: int) -> int:
    """The PSS of pid's process tree in kB (shared pages counted once), from /proc/PID/smaps_rollup."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                m = re.search(r"^Pss:\s+(\d+) kB", fh.read(), re.M)
        except OSError:
            continue
        total += int(m.group(1)) if m else 0
    return total


def measure(argv: list[str], env: dict[str, str], *, memory: bool) -> tuple[float, float, int, int, str, str]:
    """`argv` run with `env`, measured: (wall s, CPU s of the process tree, peak RSS of the largest
    process in kB, peak tree PSS in kB -- 0 unless `memory` --, stdout, stderr).

    Sampling PSS reads /proc/PID/smaps_rollup every 20 ms, which walks the process's page tables
    under its memory lock: it slows a reader in proportion to its memory (the msgspec floor, 1.1 GB,
    ran 2x slower sampled). So memory is measured in a run of its own, and times in unsampled runs."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    peak_pss = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak_pss
        while not stop.wait(0.02):
            peak_pss = max(peak_pss, pss_kb(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    if memory:
        sampler.start()
    out_chunks: list[bytes] = []
    err_chunks: list[bytes] = []
    readers_ = [
        threading.Thread(target=lambda s, acc: acc.append(s.read()), args=(proc.stdout, out_chunks)),
        threading.Thread(target=lambda s, acc: acc.append(s.read()), args=(proc.stderr, err_chunks)),
    ]
    for t in readers_:
        t.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    stop.set()
    for t in readers_:
        t.join()
    if memory:
        sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = b"".join(out_chunks).decode(errors="replace")
    err = b"".join(err_chunks).decode(errors="replace")
    err = f"exit {proc.returncode}: {err.strip()[-300:]}" if proc.returncode != 0 else ""
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, peak_pss, out, err
