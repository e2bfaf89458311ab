"""Run a process under a real memory cgroup (v2 `memory.max` or v1 `memory.limit_in_bytes`).

Root can create a child cgroup under /sys/fs/cgroup on this kind of machine. `MemoryCgroup`
creates one with a limit, starts processes in it (the child joins it before `exec`), and reads
what the kernel saw: the OOM kills and the peak charge. `unavailable()` says why none can be
created here (the tests then skip, saying so).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path("/sys/fs/cgroup")


def _v2_root() -> Path | None:
    """The cgroup v2 directory of this process, when its memory controller can be delegated."""
    for candidate in (ROOT, ROOT / "unified"):
        controllers = candidate / "cgroup.controllers"
        if controllers.exists() and "memory" in controllers.read_text().split():
            rel = next(
                (
                    line.split(":", 2)[2]
                    for line in Path("/proc/self/cgroup").read_text().splitlines()
                    if line.startswith("0::")
                ),
                "/",
            )
            return candidate / rel.lstrip("/")
    return None


def _v1_root() -> Path | None:
    base = ROOT / "memory"
    if not (base / "memory.limit_in_bytes").exists():
        return None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, rel = line.split(":", 2)
        if "memory" in controllers.split(","):
            here = base / rel.lstrip("/")
            return here if here.exists() else base
    return base


def unavailable() -> str:
    """'' when a memory cgroup can be created here, else why not."""
    if os.geteuid() != 0:
        return "creating a memory cgroup needs root"
    try:
        with MemoryCgroup(64 * 1024**2):
            pass
    except OSError as exc:
        return f"cannot create a memory cgroup under {ROOT}: {exc}"
    return ""


class MemoryCgroup:
    """A fresh memory cgroup with a hard limit; removed on exit (its processes killed first)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        v2 = _v2_root()
        if v2 is not None:
            self.version = 2
            self.path = v2 / f"warpwatch-test-{uuid.uuid4().hex[:12]}"
        else:
            v1 = _v1_root()
            if v1 is None:
                raise OSError("no cgroup v2 memory controller and no v1 memory hierarchy")
            self.version = 1
            self.path = v1 / f"warpwatch-test-{uuid.uuid4().hex[:12]}"

    def __enter__(self) -> MemoryCgroup:
        if self.version == 2:
            parent = self.path.parent
            control = parent / "cgroup.subtree_control"
            if "memory" not in control.read_text().split():
                control.write_text("+memory")
        self.path.mkdir()
        try:
            if self.version == 2:
                (self.path / "memory.max").write_text(str(self.limit))
                if (self.path / "memory.swap.max").exists():
                    (self.path / "memory.swap.max").write_text("0")
            else:
                (self.path / "memory.limit_in_bytes").write_text(str(self.limit))
                swap = self.path / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    swap.write_text(str(self.limit))
        except BaseException:
            self.path.rmdir()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for _ in range(50):
            pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
            time.sleep(0.1)
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start `argv` inside the cgroup (it joins before exec, so nothing runs outside it)."""
        procs = str(self.path / "cgroup.procs")

        def join() -> None:
            with open(procs, "w") as fh:
                fh.write(str(os.getpid()))

        return subprocess.Popen(argv, preexec_fn=join, **kwargs)  # (the child runs no thread before exec)

    def oom_kills(self) -> int:
        """How many processes the kernel killed for going over the limit."""
        name, key = ("memory.events", "oom_kill") if self.version == 2 else ("memory.oom_control", "oom_kill")
        for line in (self.path / name).read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
        return 0

    def peak(self) -> int:
        """Peak charge of the cgroup (page cache included), bytes."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        f = self.path / name
        return int(f.read_text()) if f.exists() else 0


def tree_pss_kb(pid: int) -> int:
    """PSS of `pid` and its descendants, kB (shared pages counted once over the tree)."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
            with open(f"/proc/{p}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
    return total
