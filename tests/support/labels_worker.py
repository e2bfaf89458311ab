"""`kernel_label` in a child process with a memory limit, each answer within a time limit.

Tests of hostile kernel names ask it instead of calling `kernel_label` in the test process, so that
a regression (a loop growing a list until out of memory, an exponential expansion) fails the test
that found it instead of hanging the suite or swapping the machine.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import textwrap
from typing import Any

_CHILD = textwrap.dedent("""
    import json, resource, sys, traceback
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from warpwatch.names.labels import KernelNamer, kernel_label
    for line in sys.stdin:
        op, arg = json.loads(line)
        try:
            if op == "label":
                answer = {"label": kernel_label(arg)}
            else:  # "namer": one KernelNamer over the names in order, a small cache (evictions)
                namer = KernelNamer(max_entries=50)
                answer = {"labels": [namer(name) for name in arg]}
        except BaseException:
            answer = {"error": traceback.format_exc()}
        print(json.dumps(answer), flush=True)
""")


class LabelWorker:
    def __init__(self, *, memory: int = 1 << 30, timeout: float = 20) -> None:
        """`memory`: bytes of address space for the child; `timeout`: seconds for each answer
        (generous: an answer takes milliseconds, at most about a second)."""
        self.timeout = timeout
        self._memory = memory
        self._proc = self._start()

    def _start(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(self._memory)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def _ask(self, op: str, arg: Any, what: str) -> Any:
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.write(json.dumps([op, arg]) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], self.timeout)
        line = proc.stdout.readline() if ready else ""
        if not line:
            proc.kill()
            err = proc.stderr.read()[-2000:]
            proc.wait()
            self._proc = self._start()  # the next question gets a fresh child
            raise AssertionError(f"no answer within {self.timeout} s (or the child died) for {what}: {err}")
        answer = json.loads(line)
        assert "error" not in answer, f"{what} raised:\n{answer['error']}"
        return answer

    def label(self, raw: str) -> str:
        label: str = self._ask("label", raw, ascii(raw[:120]))["label"]
        return label

    def namer(self, names: list[str]) -> list[str]:
        labels: list[str] = self._ask("namer", names, f"{len(names)} names")["labels"]
        return labels

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()
