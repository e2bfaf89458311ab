"""What is watched beside the load: the agent's process tree (CPU seconds, peak PSS, with psutil),
the trace files each window leaves, and the machine.

`TraceKeeper` hard-links every new file of a folder as soon as it shows (polled every 20 ms): the
kineto-daemon source deletes a trace once it has read it, and the link keeps its bytes for the
benchmark to measure and read. Kineto writes `NAME.tmp` and renames it: the link made from either
name is kept as NAME (one inode, complete once written).
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil


class TreeSampler:
    """Samples a process and its descendants every `every_s`: the sum of their PSS (peak kept) and
    their CPU seconds (user + system; the last reading of each process, so a child that exited
    still counts)."""

    def __init__(self, pid: int, every_s: float = 0.25) -> None:
        self.root = psutil.Process(pid)
        self.peak_pss = 0
        self._cpu: dict[int, float] = {}
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-sampler", daemon=True)
        self._thread.start()

    def cpu_seconds(self) -> float:
        return sum(self._cpu.values())

    def sample(self) -> None:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        pss = 0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                pss += p.memory_full_info().pss
                t = p.cpu_times()
                self._cpu[p.pid] = t.user + t.system
        self.peak_pss = max(self.peak_pss, pss)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self._every_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


@dataclass(frozen=True)
class TraceFile:
    name: str
    size: int
    mtime: float
    """Wall clock, when its writer last wrote it."""
    path: Path


class TraceKeeper:
    """Links each new file under `folder` into `keep` (same file system) as it shows."""

    def __init__(self, folder: Path, keep: Path) -> None:
        self.folder, self.keep = folder, keep
        keep.mkdir(parents=True, exist_ok=True)
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trace-keeper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            with contextlib.suppress(OSError):
                for entry in os.scandir(self.folder):
                    self._keep(entry)

    def _keep(self, entry: os.DirEntry[str]) -> None:
        name = entry.name.removesuffix(".tmp")  # the same inode once renamed: linked once
        if name in self._seen or not entry.is_file():
            return
        try:
            os.link(entry.path, self.keep / name)
            self._seen.add(name)
        except OSError:
            pass  # renamed or deleted meanwhile: the next pass sees what became of it

    def collect(self) -> list[TraceFile]:
        """The files kept and not yet `forget`-ten."""
        out = []
        for path in sorted(self.keep.iterdir()):
            st = path.stat()
            out.append(TraceFile(path.name, st.st_size, st.st_mtime, path))
        return out

    def forget(self, files: list[TraceFile], remove_originals: bool) -> None:
        """Removes the links of `files` (and the files themselves when `remove_originals`)."""
        for f in files:
            with contextlib.suppress(OSError):
                f.path.unlink()
            if remove_originals:
                with contextlib.suppress(OSError):
                    (self.folder / f.name).unlink()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        shutil.rmtree(self.keep, ignore_errors=True)


def machine() -> dict[str, object]:
    """The machine, for the tables' caption and the JSON."""
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": model,
        "cores_physical": psutil.cpu_count(logical=False),
        "cores_logical": psutil.cpu_count(),
        "nproc": len(os.sched_getaffinity(0)),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def describe_machine(m: dict[str, object]) -> str:
    return (
        f"{m['cpu']}, {m['cores_physical']} physical / {m['cores_logical']} logical cores, nproc {m['nproc']}, "
        f"{m['memory_gib']} GiB RAM, Linux {m['kernel']}, Python {m['python']}"
    )


class LoadAverage:
    """The 1-minute load average, read at each arm's end."""

    def __init__(self) -> None:
        self.readings: list[tuple[float, float]] = []

    def read(self) -> float:
        one = os.getloadavg()[0]
        self.readings.append((time.time(), one))
        return one

    def summary(self) -> dict[str, float | None]:
        values = [v for _, v in self.readings]
        if not values:
            return {"min": None, "mean": None, "max": None}
        return {"min": round(min(values), 2), "mean": round(sum(values) / len(values), 2), "max": round(max(values), 2)}
