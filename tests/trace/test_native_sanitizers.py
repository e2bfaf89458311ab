"""The compiled modules under AddressSanitizer and UBSan: a hostile trace must not make the C code
read or write out of bounds, or do undefined arithmetic, however it is cut.

Both modules are built here with `-fsanitize=address,undefined` (gcc, as setup.py builds them) and
loaded into a plain Python with the sanitizer runtimes preloaded; tests/trace/native/fuzz_native.py feeds
them PIECES pieces of edited real events (a fixed seed: the same pieces on any machine). A report
from either sanitizer fails the test. The scanner is also built without SIMD (`-DWARPWATCH_NO_SIMD`:
memmem, the path of machines without SSE2), and must answer every piece as the SIMD build does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from support.paths import ROOT

SOURCES = {
    "_gpuscan": (ROOT / "agent/warpwatch/trace/_gpuscan.c", []),
    "_windowmath": (ROOT / "agent/warpwatch/analysis/_windowmath.c", []),
    "_gpuscan_plain": (ROOT / "agent/warpwatch/trace/_gpuscan.c", ["-DWARPWATCH_NO_SIMD"]),
}
PIECES = 12_000
"""Edited pieces fed to both builds (about 20 s on an idle CI machine)."""


def _runtime(gcc: str, name: str) -> str:
    return subprocess.run([gcc, f"-print-file-name={name}"], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.slow
def test_the_compiled_modules_survive_fuzzing_under_asan_and_ubsan(tmp_path: Path) -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("gcc is missing (CI installs it)")
        pytest.skip("no gcc here")
    include = sysconfig.get_paths()["include"]
    built = {}
    for name, (source, defines) in SOURCES.items():
        out = tmp_path / f"{name}.so"
        subprocess.run(
            [
                gcc,
                "-O1",
                "-g",
                "-fsanitize=address,undefined",
                "-fno-sanitize-recover=undefined",
                "-fno-omit-frame-pointer",
                "-shared",
                "-fPIC",
                "-std=c11",
                "-D_GNU_SOURCE",
                *defines,
                f"-I{include}",
                str(source),
                "-o",
                str(out),
            ],
            check=True,
        )
        built[name] = str(out)
    env = {
        **os.environ,
        "LD_PRELOAD": f"{_runtime(gcc, 'libasan.so')}:{_runtime(gcc, 'libubsan.so')}",
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
        "PYTHONPATH": str(ROOT / "agent"),
        "PYTHONMALLOC": "malloc",
    }  # every object its own malloc'd block, which ASan guards
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests/trace/native/fuzz_native.py"),
            built["_gpuscan"],
            built["_windowmath"],
            str(PIECES),
            "14",
            built["_gpuscan_plain"],
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report[-5000:]
    assert "AddressSanitizer" not in report and "runtime error" not in report, report[-5000:]
    pieces = int(report.split("fuzzed ")[1].split()[0])
    assert pieces == PIECES, report
