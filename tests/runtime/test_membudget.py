"""The memory budget: the cgroup limit found in v1 and v2 layouts, and what a read may take under it."""

from __future__ import annotations

from pathlib import Path

from warpwatch.runtime.membudget import MemoryBudget, cgroup_memory_limit

MiB = 1024**2


def fake(tmp_path: Path, cgroup: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc = tmp_path / "proc"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text(cgroup)
    root = tmp_path / "sys"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return proc, root


def test_v2_takes_the_tightest_limit_of_the_cgroup_and_its_ancestors(tmp_path: Path) -> None:
    proc, root = fake(
        tmp_path,
        "0::/kubepods/pod1/agent\n",
        {
            "kubepods/memory.max": "max\n",
            "kubepods/pod1/memory.max": "536870912\n",
            "kubepods/pod1/agent/memory.max": "1073741824\n",
        },
    )
    found = cgroup_memory_limit(proc, root)
    assert found.limit == 512 * MiB
    assert found.where == str(root / "kubepods/pod1/memory.max")


def test_v2_in_a_container_reads_its_own_root(tmp_path: Path) -> None:
    proc, root = fake(tmp_path, "0::/\n", {"memory.max": "268435456\n"})
    assert cgroup_memory_limit(proc, root).limit == 256 * MiB


def test_v1_reads_memory_limit_in_bytes_and_treats_the_huge_default_as_no_limit(tmp_path: Path) -> None:
    proc, root = fake(
        tmp_path,
        "4:memory:/process_api/x\n3:cpuset:/\n0::/\n",
        {
            "memory/memory.limit_in_bytes": "9223372036854771712\n",
            "memory/process_api/x/memory.limit_in_bytes": "268435456\n",
        },
    )
    assert cgroup_memory_limit(proc, root).limit == 256 * MiB
    proc2, root2 = fake(tmp_path / "b", "4:memory:/\n", {"memory/memory.limit_in_bytes": "9223372036854771712\n"})
    found = cgroup_memory_limit(proc2, root2)
    assert found.limit is None and found.where.startswith("no memory limit")


def test_no_cgroup_file_means_no_limit(tmp_path: Path) -> None:
    found = cgroup_memory_limit(tmp_path / "nowhere", tmp_path)
    assert found.limit is None and "no /proc/self/cgroup" in found.where


def test_a_read_under_256_mib_gets_a_piece_size_and_a_launch_cap_with_the_figures(tmp_path: Path) -> None:
    proc, root = fake(tmp_path, "0::/\n", {"memory.max": str(256 * MiB)})
    budget = MemoryBudget(cgroup_memory_limit(proc, root))
    limits = budget.read_limits(2 * 1024**3, workers=1, in_use=40 * MiB)
    # headroom: 10 % of 256 MiB = 26,843,545 B; free: 256 MiB - that - 40 MiB = 199,648,871 B;
    # piece: free / (4 x 6) = 8,318,702 B, rounded down to whole MiB = 7 MiB; one process: 6 x 7 MiB
    # for pieces; launches: (199,648,871 - 44,040,192) / 500 B = 311,217.
    assert limits.piece_bytes == 7 * MiB
    assert limits.max_launches == 311_217
    assert limits.max_bytes == 2 * 1024**3
    assert "memory limit 256 MiB" in limits.budget and "40 MiB in use" in limits.budget


def test_a_limit_too_small_for_anything_keeps_no_launch_and_the_smallest_pieces(tmp_path: Path) -> None:
    proc, root = fake(tmp_path, "0::/\n", {"memory.max": str(64 * MiB)})
    limits = MemoryBudget(cgroup_memory_limit(proc, root)).read_limits(workers=1, in_use=60 * MiB)
    assert limits.max_launches == 0 and limits.piece_bytes == 1 * MiB


def test_without_a_limit_only_max_bytes_applies(tmp_path: Path) -> None:
    proc, root = fake(tmp_path, "0::/\n", {})
    limits = MemoryBudget(cgroup_memory_limit(proc, root)).read_limits(1000)
    assert (limits.max_bytes, limits.max_launches) == (1000, None)
