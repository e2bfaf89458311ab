"""`warpwatch diff A B` and `warpwatch evidence diff SOURCE` (issue 45, "Say why"): what changed per
kernel between two traces, on HTA's real trace_diff pair and on small traces written here."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from support.agent import Agent, run_cli
from support.paths import HTA
from support.tracebuild import A100, kernel, span, trace_doc, write
from warpwatch.analysis.kerneldiff import KernelChange, TraceDiff, diff_traces
from warpwatch.commands.diff import table_lines, what_changed
from warpwatch.commands.evidence_diff import pick_pair
from warpwatch.errors import WarpwatchError
from warpwatch.evidence.store import META_SUFFIX, TRACE_SUFFIX
from warpwatch.trace import read_trace

CONTROL = HTA / "trace_diff" / "control" / "control.json.gz"
TEST = HTA / "trace_diff" / "test" / "test.json.gz"

HISTOGRAM = "void cub::DeviceRadixSortHistogramKernel<cub::DeviceRadixSortPolicy<long, int, int>::Policy800"
RECAT = "void recat_copy_async_kernel<float>("
PERMUTE = "void permute_pooled_embs_kernel<float>("
CTA_PER_ROW = (
    "void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<float, float, float, "
)


def one(diff: TraceDiff, prefix: str) -> KernelChange:
    (found,) = [c for c in diff.kernels if c.name.startswith(prefix)]
    return found


@pytest.fixture(scope="module")
def real() -> TraceDiff:
    return diff_traces(read_trace(CONTROL), read_trace(TEST))


# --- HTA's trace_diff pair (an A100 run against a V100 run of the same model)


def test_the_real_pair_matches_the_one_gpu_of_each_trace_and_counts_kernels_as_the_events_name_them(
    real: TraceDiff,
) -> None:
    """Read by hand with the json module from the events of `cat` "kernel": every kernel of control ran
    on device 3 (args.device), every one of test on device 1, so those two GPUs are matched. By name:
    170 distinct in control, 131 in test, 104 in both, 66 only in control, 27 only in test."""
    assert real.device_pairs == ((3, 1),)
    statuses = [c.status for c in real.kernels]
    assert len(real.kernels) == 104 + 66 + 27
    assert statuses.count("vanished") == 66
    assert statuses.count("appeared") == 27
    assert [c.max_share for c in real.kernels] == sorted((c.max_share for c in real.kernels), reverse=True)


def test_the_real_pair_names_the_resources_the_histogram_kernel_changed_and_what_they_cost(real: TraceDiff) -> None:
    """cub::DeviceRadixSortHistogramKernel<...<long, int, int>...>, one configuration on each side, read
    from its events' args: control (A100, 108 SMs) grid [864,1,1], block [128,1,1], registers per thread
    64, shared memory 8192; test (V100, 80 SMs) grid [240,1,1], block [256,1,1], 80 registers, 32768.

    By hand (CUDA's calculator, 65536 registers and 64 warps per SM on both): A100: 64·32 = 2048
    registers a warp, 4 warps a block: 8192 a block, 65536 / 8192 = 8 blocks; shared memory
    (8192 + 1024 reserved) allows 167936 / 9216 = 18, warps 64 / 4 = 16: 8 blocks, limited by
    registers, theoretical 8·4/64 = 0.5. V100: 80·32 = 2560 registers a warp (a multiple of the
    256-register unit), 8 warps: 20480 a block, 65536 / 20480 = 3; shared memory 98304 / 32768 = 3
    (no reserve before 8.0); warps 64 / 8 = 8: 3 blocks, limited by registers and shared memory,
    theoretical 3·8/64 = 0.375. Waves: 864 / (8·108) = 1 and 240 / (3·80) = 1, unchanged."""
    c = one(real, HISTOGRAM)
    assert c.a is not None and c.b is not None
    assert (c.a.config.grid, c.a.config.block, c.a.config.registers_per_thread, c.a.config.shared_memory) == (
        (864, 1, 1),
        (128, 1, 1),
        64,
        8192,
    )
    assert (c.b.config.grid, c.b.config.block, c.b.config.registers_per_thread, c.b.config.shared_memory) == (
        (240, 1, 1),
        (256, 1, 1),
        80,
        32768,
    )
    assert (c.a.config.max_active_blocks_per_sm, c.b.config.max_active_blocks_per_sm) == (8, 3)
    assert (c.a.config.limiting_factors, c.b.config.limiting_factors) == (
        ("registers",),
        ("registers", "shared_memory"),
    )
    assert (c.a.config.theoretical_occupancy, c.b.config.theoretical_occupancy) == (0.5, 3 * 8 / 64)
    assert c.code == ("block", "registers_per_thread", "shared_memory")
    assert c.load == ("grid",)
    assert "waves_per_sm" not in c.changed
    assert what_changed(c).startswith(
        "block 128→256, regs 64→80, smem 8 KiB→32 KiB, blocks/SM 8→3 (limiter registers→registers+shared memory), "
        "theor. occ 50%→38%"
    )


def test_the_real_pair_tells_a_change_of_the_load_from_one_of_the_code(real: TraceDiff) -> None:
    """recat_copy_async_kernel<float>: one configuration each side, args grid [256,1,1] in control and
    [64,1,1] in test, block [32,32,1], 24 registers, 0 shared memory on both: the load changed, not the
    code. permute_pooled_embs_kernel<float>: grid [31,1024,1], block [1024,1,1], 32 registers, 0 bytes
    on both: nothing of the launch changed (its waves do: 31744 blocks over 108 SMs, then over 80)."""
    recat = one(real, RECAT)
    assert recat.code == () and "grid" in recat.load and not recat.resources_changed
    assert recat.a is not None and recat.b is not None
    assert (recat.a.config.grid, recat.b.config.grid) == ((256, 1, 1), (64, 1, 1))
    permute = one(real, PERMUTE)
    assert permute.code == () and "grid" not in permute.changed and not permute.resources_changed
    assert permute.a is not None and permute.a.configurations == 1


def test_the_real_pair_names_the_kernels_that_vanished_and_appeared(real: TraceDiff) -> None:
    """By name in the events: ampere_sgemm_128x128_tn and the `..., 2ul>` embedding backward kernel
    only in control; volta_sgemm_128x32_nt and the `..., 5ul>` one only in test."""
    assert one(real, "ampere_sgemm_128x128_tn").status == "vanished"
    assert one(real, CTA_PER_ROW + "2ul>").status == "vanished"
    assert one(real, "volta_sgemm_128x32_nt").status == "appeared"
    assert one(real, CTA_PER_ROW + "5ul>").status == "appeared"


# --- small traces written here: one kernel's registers double


def pair(tmp_path: Path, *, old_regs: int = 64, new_regs: int = 128) -> tuple[Path, Path]:
    """Two A100 windows of 1 ms: `gemm` (432 blocks of 256 threads) with `old_regs` then `new_regs`
    registers, `copy` alike in both, `old` only in A, `new` only in B."""

    def doc(regs: int, extra: str) -> dict[str, Any]:
        return trace_doc(
            [
                span(0, 1000),
                kernel("gemm", ts=100, dur=200, grid=(432, 1, 1), block=(256, 1, 1), regs=regs, sms=108),
                kernel("copy", ts=400, dur=100, grid=(108, 1, 1), block=(128, 1, 1), regs=16, sms=108),
                kernel(extra, ts=600, dur=50, grid=(108, 1, 1), block=(128, 1, 1), regs=32, sms=108),
            ],
            devices=[A100],
        )

    return write(tmp_path / "a.json", doc(old_regs, "old")), write(tmp_path / "b.json", doc(new_regs, "new"))


def test_doubled_registers_halve_the_blocks_per_sm_and_the_diff_names_registers(tmp_path: Path) -> None:
    """A100: 65536 registers and 2048 threads (64 warps) per SM; a 256-thread block is 8 warps.
    64 registers: 64·32 = 2048 a warp, 16384 a block, 65536 / 16384 = 4 blocks (warps would allow
    64 / 8 = 8, shared memory 167936 / 1024 = 164): limited by registers, theoretical 4·8/64 = 0.5.
    128 registers: 32768 a block, 2 blocks, theoretical 2·8/64 = 0.25. 432 blocks on 108 SMs:
    432 / (4·108) = 1 wave, then 432 / (2·108) = 2; resident warps 8·432 / (108·1) = 32, then
    8·432 / (108·2) = 16: estimated occupancy 32/64 = 0.5, then 16/64 = 0.25."""
    a, b = pair(tmp_path)
    diff = diff_traces(read_trace(a), read_trace(b))
    gemm = one(diff, "gemm")
    assert gemm.a is not None and gemm.b is not None
    assert (gemm.a.config.max_active_blocks_per_sm, gemm.b.config.max_active_blocks_per_sm) == (4, 2)
    assert gemm.a.config.limiting_factors == gemm.b.config.limiting_factors == ("registers",)
    assert (gemm.a.config.theoretical_occupancy, gemm.b.config.theoretical_occupancy) == (0.5, 0.25)
    assert (gemm.a.waves_per_sm, gemm.b.waves_per_sm) == (1.0, 2.0)
    assert (gemm.a.estimated_occupancy, gemm.b.estimated_occupancy) == (0.5, 0.25)
    assert gemm.changed == (
        "registers_per_thread",
        "max_active_blocks_per_sm",
        "theoretical_occupancy",
        "waves_per_sm",
        "estimated_occupancy",
    )
    assert gemm.code == ("registers_per_thread",)
    assert what_changed(gemm) == (
        "regs 64→128, blocks/SM 4→2 (limiter registers), theor. occ 50%→25%, est. occ 50%→25%, waves 1.00→2.00"
    )
    assert one(diff, "copy").status == "unchanged"
    assert (one(diff, "old").status, one(diff, "new").status) == ("vanished", "appeared")


def test_the_table_shows_the_changed_kernel_and_the_ones_that_came_and_went_but_not_the_unchanged(
    tmp_path: Path,
) -> None:
    """Time shares: gemm 200 µs of a 1000 µs window, weighted 1000 / (1000 - 200) = 1.25: 25.0 %;
    copy 100 µs · 1000 / 900: 11.1 %; old and new 50 µs · 1000 / 950: 5.3 %."""
    a, b = pair(tmp_path)
    lines = table_lines(diff_traces(read_trace(a), read_trace(b)), width=200)
    rows = [
        line.split() for line in lines if line.startswith("  ") and line.split()[0] in ("gemm", "copy", "old", "new")
    ]
    assert [(r[0], r[1]) for r in rows] == [("gemm", "25.0→25.0"), ("new", "-→5.3"), ("old", "5.3→-")]
    assert "copy" not in "\n".join(lines)
    assert any("1 kernel not shown" in line for line in lines)
    every = table_lines(diff_traces(read_trace(a), read_trace(b)), show_all=True)
    assert any(line.split()[:3] == ["copy", "11.1→11.1", "no"] for line in every)


def test_the_json_form_has_both_sides_and_what_changed(tmp_path: Path) -> None:
    a, b = pair(tmp_path)
    result = run_cli("diff", str(a), str(b), "--format", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == "warpwatch.diff/1"
    assert (doc["a"]["path"], doc["b"]["path"]) == (str(a), str(b))
    assert doc["device_pairs"] == [{"a": 0, "b": 0}]
    gemm = next(k for k in doc["kernels"] if k["name"] == "gemm")
    assert gemm["status"] == "changed" and gemm["notable"] is True
    assert gemm["code_changed"] == ["registers_per_thread"]
    assert "registers_per_thread" in gemm["changed"] and "max_active_blocks_per_sm" in gemm["changed"]
    assert (gemm["a"]["registers_per_thread"], gemm["b"]["registers_per_thread"]) == (64, 128)
    assert (gemm["a"]["max_active_blocks_per_sm"], gemm["b"]["max_active_blocks_per_sm"]) == (4, 2)
    assert gemm["b"]["limiting_factors"] == ["registers"]
    old = next(k for k in doc["kernels"] if k["name"] == "old")
    assert old["status"] == "vanished" and old["b"] is None and old["a"]["grid"] == [108, 1, 1]


def test_a_trace_that_cannot_be_read_exits_1_naming_it_without_a_traceback(tmp_path: Path) -> None:
    a, _ = pair(tmp_path)
    missing = tmp_path / "missing.json"
    result = run_cli("diff", str(a), str(missing))
    assert result.returncode == 1
    assert result.stderr == f"warpwatch: error: {missing}: no such file\n"
    assert result.stdout == ""


# --- warpwatch evidence diff


def kept(folder: Path, kid: str, reason: str, trace: Path, age_s: float = 60.0) -> None:
    """One window as `warpwatch evidence pull` writes it: `ID.trace.json.gz` and `ID.meta.json`."""
    folder.mkdir(exist_ok=True)
    data = trace.read_bytes()
    if data[:2] == b"\x1f\x8b":
        (folder / (kid + TRACE_SUFFIX)).write_bytes(data)
    else:
        write(folder / (kid + TRACE_SUFFIX), json.loads(data), gz=True)
    meta = {"id": kid, "time": time.time() - age_s, "reason": reason, "gpus": [0]}
    (folder / (kid + META_SUFFIX)).write_text(json.dumps(meta))


def test_pick_pair_takes_the_newest_degraded_and_the_newest_baseline_before_it() -> None:
    windows = [
        {"id": "20251205T060000Z-000001", "time": 100.0, "reason": "baseline"},
        {"id": "20251205T070000Z-000002", "time": 200.0, "reason": "baseline"},
        {"id": "20251205T080000Z-000003", "time": 300.0, "reason": "degraded"},
        {"id": "20251205T090000Z-000004", "time": 400.0, "reason": "degraded"},
        {"id": "20251205T100000Z-000005", "time": 500.0, "reason": "baseline"},
        {"id": "20251205T110000Z-000006", "time": 600.0, "reason": "artifact"},
    ]
    baseline, degraded = pick_pair(windows, 0.0, "here")
    assert (baseline["id"], degraded["id"]) == ("20251205T070000Z-000002", "20251205T090000Z-000004")
    with pytest.raises(WarpwatchError, match=r"here: no window kept as degraded within --since \(kept windows: "):
        pick_pair(windows, 450.0, "here")


def test_evidence_diff_of_a_pulled_folder_compares_the_baseline_before_the_newest_degraded_window(
    tmp_path: Path,
) -> None:
    a, b = pair(tmp_path)
    (tmp_path / "older").mkdir()
    _, older = pair(tmp_path / "older", new_regs=32)
    ev = tmp_path / "ev"
    kept(ev, "20251205T060000Z-000001", "baseline", older, age_s=4000)
    kept(ev, "20251205T070000Z-000002", "baseline", a, age_s=3000)
    kept(ev, "20251205T080000Z-000003", "degraded", b, age_s=2000)
    kept(ev, "20251205T090000Z-000004", "low_confidence", older, age_s=1000)
    result = run_cli("evidence", "diff", str(ev))
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout.startswith("Degraded window 20251205T080000Z-000003 (kept ")
        and "against the baseline window 20251205T070000Z-000002" in result.stdout
    )
    (gemm,) = [line for line in result.stdout.splitlines() if line.split()[:1] == ["gemm"]]
    assert "regs 64→128, blocks/SM 4→2 (limiter registers), theor. occ 50%→25%" in gemm


def test_evidence_diff_says_so_when_no_baseline_was_kept_before_the_degraded_window(tmp_path: Path) -> None:
    a, b = pair(tmp_path)
    ev = tmp_path / "ev"
    kept(ev, "20251205T080000Z-000003", "degraded", b, age_s=2000)
    kept(ev, "20251205T090000Z-000004", "baseline", a, age_s=1000)
    result = run_cli("evidence", "diff", str(ev))
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"warpwatch: error: {ev}: no baseline window kept before the degraded window 20251205T080000Z-000003 "
    )
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # a real agent serves the folder, and two command-line runs
def test_evidence_diff_from_a_real_agent_serving_hta_pair_as_its_kept_windows(tmp_path: Path) -> None:
    """The agent takes in the windows kept in its --evidence-dir before it started and lists them at
    /evidence: control as the baseline, test as the degraded window. The histogram kernel's registers
    (64 in control, 80 in test, read from the events' args) are named in the JSON form."""
    ev = tmp_path / "ev"
    kept(ev, "20251205T070000Z-000001", "baseline", CONTROL, age_s=3000)
    kept(ev, "20251205T080000Z-000002", "degraded", TEST, age_s=2000)
    (tmp_path / "traces").mkdir()
    agent = Agent("--source", f"dir:{tmp_path / 'traces'}", "--evidence-dir", str(ev), "--period", "1h")
    try:
        result = run_cli("evidence", "diff", agent.url, "--format", "json")
        table = run_cli("evidence", "diff", agent.url, "--top", "3")
    finally:
        agent.stop()
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["evidence"]["source"] == agent.url
    assert (doc["evidence"]["baseline"]["id"], doc["evidence"]["degraded"]["id"]) == (
        "20251205T070000Z-000001",
        "20251205T080000Z-000002",
    )
    assert doc["a"]["path"] == f"{agent.url}/evidence/20251205T070000Z-000001"
    (hist,) = [k for k in doc["kernels"] if k["name"].startswith(HISTOGRAM)]
    assert (hist["a"]["registers_per_thread"], hist["b"]["registers_per_thread"]) == (64, 80)
    assert "registers_per_thread" in hist["code_changed"]
    assert table.returncode == 0, table.stderr
    assert f"A: {agent.url}/evidence/20251205T070000Z-000001" in table.stdout


def test_a_copy_of_the_real_pair_in_a_pulled_folder_diffs_like_the_files(tmp_path: Path, real: TraceDiff) -> None:
    ev = tmp_path / "ev"
    ev.mkdir()
    for kid, reason, src in (
        ("20251205T070000Z-000001", "baseline", CONTROL),
        ("20251205T080000Z-000002", "degraded", TEST),
    ):
        shutil.copyfile(src, ev / (kid + TRACE_SUFFIX))
        (ev / (kid + META_SUFFIX)).write_text(json.dumps({"id": kid, "time": time.time() - 60, "reason": reason}))
    result = run_cli("evidence", "diff", str(ev), "--format", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [k["name"] for k in doc["kernels"]] == [c.name for c in real.kernels]
    assert [k["changed"] for k in doc["kernels"]] == [list(c.changed) for c in real.kernels]
