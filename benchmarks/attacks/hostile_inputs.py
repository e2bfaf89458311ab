"""Hostile inputs and resources, as rows of `python benchmarks/attacks`'s table (run them from there).

    python benchmarks/attacks --only hostile                        # this checkout
    python benchmarks/attacks --only hostile --agent-path DIR/agent # e.g. a clone at 4ac2651
    python benchmarks/attacks --only daemon_slash,gpus_1500

This module holds the rows on traces, kernel names, GPU ids and descriptors, and the list of all
the hostile rows; `hostile_daemon.py` the kineto-daemon rows; `cgroup.py` the harness. Each row starts a
fresh agent inside a fresh memory cgroup of `cgroup.CAP_MIB` (or `--rss-cap`, if lower), so
a reader or label loop that grows without bound is OOM-killed there and reported so, never
swapping the shared machine; the observer also kills it above the cap. The daemon rows use a
private socket folder under /tmp (KINETO_IPC_SOCKET_DIR; never the abstract `dynolog` name other
tests and a real dynolog use) and real torch processes started with KINETO_USE_DAEMON=1 beside
protocol-faithful fake senders; the HTTP rows use 127.0.0.x only. Every wait has a deadline and
every loop a count. The outcome column says what happened, measured from the agent's log lines and
its /metrics, never from its code. `ATTACKS_LOG_DIR=DIR` keeps each row's agent log there.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from support.tracebuild import kernel, span, trace_doc, write

from .cgroup import (
    Capped,
    describe,
    errors_counted,
    metric,
    wait_until,
    window_for,
    windows_total,
)
from .hostile_daemon import (
    attack_daemon_gap,
    attack_daemon_late,
    attack_daemon_mute,
    attack_daemon_registry,
    attack_daemon_slash,
)
from .kit import ROOT, Row, close_all, connect_many, scrape_body

HTA_TRACE = (
    ROOT.parent
    / "shared"
    / "traces"
    / "facebookresearch__HolisticTraceAnalysis"
    / "tests"
    / "data"
    / "df_index_resolver"
    / "df_index_resolver.json.gz"
)
"""A real 54 MB trace (19,370 launches; Kineto's one-event-per-line layout): several 8 MiB pieces."""
NORMAL_KERNEL = (
    "_ZN2at6native54_GLOBAL__N__d8ceb000_21_DistributionNormal_cu_17e44f7d43distribution_elementwise_grid_"
    "stride_kernelIfLi4EZNS0_9templates4cuda20normal_and_transformIffLm4EPNS_17CUDAGeneratorImplEZZZNS4_13"
    "normal_kernelIS7_EEvRKNS_10TensorBaseEddT_ENKUlvE_clEvENKUlvE0_clEvEUlfE_EEvRNS_18TensorIteratorBaseET2_"
    "T3_EUlP24curandStatePhilox4_32_10E0_ZNS1_27distribution_nullary_kernelIffLi4ES7_SM_SF_EEvSH_SI_RKSJ_T4_"
    "EUlifE_EEviNS_15PhiloxCudaStateET1_SI_"
)
"""torch's normal_ kernel, verbatim from DeepSeek's published H800 training trace: local lambdas."""
NON_ASCII_KERNEL = "void at::native::café_kernel<float>(int)"
DIR_ARGS = ["--period", "1s", "--window", "50ms"]
"""dir: rows: a file is picked up after two unchanged looks, so looks come every second."""


# --------------------------------------------------------------------------------------------- HTTP and files


def attack_gpus(path: Path, rss_cap: float) -> list[Row]:
    """Two traces naming 1,500 GPU ids each (0-1,499, then 1,500-2,999), one kernel per id."""
    run = Capped(Row("gpus: 2 traces x 1,500 GPU ids"), DIR_ARGS, path, rss_cap)
    sizes = []
    with run.observed() as agent:
        for n, ids in enumerate((range(1500), range(1500, 3000))):
            name = f"gpus{n}.json"
            events_ = [span(0, 1_000_000), *(kernel(f"gemm_{i % 3}", ts=100 + i % 1000, dur=10, device=i) for i in ids)]
            write(agent.tmp / "traces" / name, trace_doc(events_))
            wait_until(lambda name=name: window_for(agent, name) is not None or run.dead(), 30)  # type: ignore[misc]
            time.sleep(1.5)  # the snapshot is built after the round
            status, body = scrape_body(agent.port)
            sizes.append(f"{len(body.encode()) / 1024:,.0f} KiB" if status == 200 else f"status {status}")
        _, body = scrape_body(agent.port)
        gpus = len(set(re.findall(r'gpu="([^"]*)"', body)))
    return [run.finish(f"/metrics {' then '.join(sizes)}; {gpus} distinct gpu labels")]


def attack_nofile(path: Path, rss_cap: float) -> list[Row]:
    """1,200 idle connections at once against an agent under ulimit -n 256, and a trace to read."""
    run = Capped(Row("fds: 1,200 idle connections, ulimit -n 256"), DIR_ARGS, path, rss_cap, nofile=256)
    with run.observed() as agent:
        socks = connect_many(agent.port, 1200)
        write(agent.tmp / "traces" / "control.json", trace_doc([span(0, 1000), kernel("gemm")]))
        wait_until(lambda: window_for(agent, "control.json") is not None or run.dead(), 15)
        time.sleep(2)
        alive = not run.dead()
        status, body = scrape_body(agent.port)
        total = windows_total(agent)
    close_all(socks)
    held = metric(body, "warpwatch_http_connections") if status == 200 else None
    emfile = sum(1 for line in agent.lines if "Too many open files" in line)
    fate = (
        f"trace: {describe(window_for(agent, 'control.json'), 15)}; windows: {total}; last /metrics "
        f"{status or 'failed'}, connections held {'?' if held is None else int(held)}; "
        f"{emfile} 'Too many open files' log lines"
        if alive
        else f"agent exited {agent.proc.returncode} under {len(socks)} connections"
    )
    return [run.finish(f"{len(socks)} connected; {fate}")]


def _one_name(path: Path, rss_cap: float, title: str, name: str, wait_s: float) -> Row:
    """A trace of two kernels, one named `name`: its window, then the labels /metrics exports."""
    run = Capped(Row(title), DIR_ARGS, path, rss_cap)
    labels: list[str] = []

    def exported() -> bool:
        _, body = scrape_body(agent.port)
        labels[:] = sorted(set(re.findall(r'^warpwatch_kernel_info\{[^}]*kernel="([^"]*)"', body, re.M)))
        return len(labels) >= 2 or run.dead()

    with run.observed() as agent:
        write(agent.tmp / "traces" / "names.json", trace_doc([span(0, 1000), kernel(name), kernel("gemm", ts=200)]))
        t0 = time.monotonic()
        wait_until(lambda: window_for(agent, "names.json") is not None or run.dead(), wait_s)
        wait_until(exported, max(1.0, wait_s - (time.monotonic() - t0)), step=0.5)
        waited = time.monotonic() - t0
        _, body = scrape_body(agent.port)
        failed_rounds = sum(
            float(v) for v in re.findall(r'^warpwatch_errors_total\{[^}]*stage="round"[^}]*\} (\S+)$', body, re.M)
        )
    text = describe(window_for(agent, "names.json"), waited)
    text += f"; labels after {waited:.0f} s: {labels}"[:170] if labels else f"; no kernel labels after {waited:.0f} s"
    if failed_rounds:
        text += f"; rounds failed: {failed_rounds:.0f}"
    return run.finish(text)


def attack_label_non_ascii(path: Path, rss_cap: float) -> list[Row]:
    return [_one_name(path, rss_cap, "labels: kernel name with a non-ASCII letter", NON_ASCII_KERNEL, 40)]


def attack_label_lambda(path: Path, rss_cap: float) -> list[Row]:
    return [_one_name(path, rss_cap, "labels: mangled name with local lambdas (torch normal_)", NORMAL_KERNEL, 12)]


def _middle_byte_trace() -> bytes:
    """The real 54 MB trace with one invalid UTF-8 byte (0xff) at the first byte of the name of
    the first kernel after its middle: in a middle 8 MiB piece, neither the first nor the tail."""
    data = gzip.decompress(HTA_TRACE.read_bytes())
    at = data.index(b'"name": "', data.index(b'"cat": "kernel"', len(data) // 2)) + len(b'"name": "')
    return data[:at] + b"\xff" + data[at:]


def attack_utf8(path: Path, rss_cap: float) -> list[Row]:
    """One invalid UTF-8 byte in a middle piece of a real trace, compiled and pure-Python readers."""
    data = _middle_byte_trace()
    rows = []
    for build, env in (("compiled", {}), ("pure Python", {"WARPWATCH_PURE_PYTHON": "1"})):
        run = Capped(Row(f"trace: invalid UTF-8 byte in a middle piece ({build})"), DIR_ARGS, path, rss_cap, env=env)
        with run.observed() as agent:
            (agent.tmp / "traces" / "bad.json").write_bytes(data)
            t0 = time.monotonic()
            wait_until(lambda run=run: window_for(agent, "bad.json") is not None or run.dead(), 60)  # type: ignore[misc]
            waited = time.monotonic() - t0
            counted = errors_counted(agent)
        rows.append(run.finish(f"{describe(window_for(agent, 'bad.json'), waited)}; errors counted: {counted}"))
    return rows


def _big_plain_trace(copies: int = 4) -> bytes:
    """The real trace's events `copies` times over in one valid document (~215 MB): long enough a
    check that a truncation lands inside it."""
    data = gzip.decompress(HTA_TRACE.read_bytes())
    start = data.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    end = data.rindex(b"]")
    body = data[start:end].rstrip()
    return data[:start] + b",".join([body] * copies) + data[end:]


def _opened(pid: int, target: Path) -> tuple[bool, bool]:
    """(open, mapped): whether the agent holds `target` open, and whether it has it memory-mapped."""
    held = mapped = False
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                held = held or os.readlink(f"/proc/{pid}/fd/{fd}") == str(target)
        with open(f"/proc/{pid}/maps") as fh:
            mapped = any(line.rstrip().endswith(str(target)) for line in fh)
    return held, mapped


def _in_check(pid: int, target: Path, timeout_s: float) -> bool:
    """Wait until the agent is inside its completeness check of `target`: mapped (how older agents
    check, 4ac2651 among them), or held open for 30 ms without a map (the streamed check of this file takes most
    of a second; the size and mtime looks are stat calls, and the first/last-byte look before
    the map is a few reads). A truncation that lands in the read after the check instead fails
    that window (`truncated JSON`), which the note shows."""
    deadline = time.monotonic() + timeout_s
    since: float | None = None
    while time.monotonic() < deadline:
        held, mapped = _opened(pid, target)
        if mapped:
            return True
        if held:
            since = since or time.monotonic()
            if time.monotonic() - since > 0.03:
                return True
        else:
            since = None
        time.sleep(0.001)
    return False


def attack_truncate(path: Path, rss_cap: float) -> list[Row]:
    """A plain ~215 MB .json truncated to 1 MiB inside the agent's completeness check, then
    restored; 3 files."""
    data = _big_plain_trace()
    run = Capped(Row("dir: plain 215 MB .json truncated while checked, 3 files"), DIR_ARGS, path, rss_cap)
    caught = 0
    outcomes = []
    with run.observed() as agent:
        for i in range(3):
            target = (agent.tmp / "traces" / f"cut{i}.json").resolve()
            target.write_bytes(data)
            if not _in_check(agent.proc.pid, target, 20) or run.dead():
                outcomes.append("agent gone" if run.dead() else "not checked in 20 s")
                break
            os.truncate(target, 1024**2)
            caught += 1
            time.sleep(0.5)
            if run.dead():
                break
            target.write_bytes(data)
            wait_until(lambda name=target.name: window_for(agent, name) is not None or run.dead(), 30)  # type: ignore[misc]
            w = window_for(agent, target.name)
            outcomes.append(
                (w.get("outcome", "?") + (f" ({w['error'][:40]})" if w.get("error") else "")) if w else "no window"
            )
            if run.dead():
                break
    fate = "agent alive" if agent.proc.poll() is None else "agent gone"
    return [run.finish(f"{caught} truncated while held open; {fate}; windows: {', '.join(outcomes) or 'none'}")]


HOSTILE: dict[str, Callable[[Path, float], list[Row]]] = {
    "daemon_slash": attack_daemon_slash,
    "daemon_late": attack_daemon_late,
    "daemon_mute": attack_daemon_mute,
    "daemon_registry": attack_daemon_registry,
    "daemon_gap": attack_daemon_gap,
    "gpus_1500": attack_gpus,
    "nofile_256": attack_nofile,
    "label_non_ascii": attack_label_non_ascii,
    "label_lambda": attack_label_lambda,
    "utf8_middle": attack_utf8,
    "truncate": attack_truncate,
}
"""What `--only hostile` runs, in this order."""
