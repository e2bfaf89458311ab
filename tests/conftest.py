"""Shared fixtures: where the real traces are (tests/support/paths.py), and a clear stop without them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# tests/ on sys.path: the shared helpers are the package `support` (tests/support/)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.paths import MISSING, SHARED_TRACES


def pytest_sessionstart(session: pytest.Session) -> None:
    """Without the corpus, one clear message instead of collection errors and failures by the hundred."""
    if not SHARED_TRACES.is_dir():
        raise pytest.UsageError(MISSING)


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.fail(MISSING)
    return SHARED_TRACES


# -- running in parallel (pytest-xdist, `-n 2 --dist loadgroup`: .ci/run) ---------------------------

SERIAL_GROUPS = {
    # the real vLLM server (a few GiB and both cores each): one at a time
    "tests/capture/test_vllm_real.py": "vllm-real",
    "tests/capture/test_vllm_real_cost.py": "vllm-real",
    "tests/capture/test_vllm_real_stacks.py": "vllm-real",
    "tests/test_overhead_bench.py": "vllm-real",
    # ...but the exit test (2 min, mostly a stacks-on flush) times nothing: beside them, not after
    "tests/capture/test_vllm_real_exit.py": "vllm-exit",
    # the machine's one abstract @dynolog name (the tests that bind or squat it)
    "tests/capture/test_daemon.py::test_the_abstract_socket_name_serves_clients_by_default": "abstract-dynolog",
    "tests/capture/test_daemon.py::test_a_taken_abstract_name_is_refused": "abstract-dynolog",
}
"""Tests that must not overlap with each other when the suite runs in parallel: the ones in a group
run one after another on one worker (`--dist loadgroup`). Every other test is safe beside any other:
its ports are the kernel's (port 0), its files under its own tmp_path or a mkdtemp folder, its
sockets in its own folder or under a random abstract name."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        test = item.nodeid.split("[", 1)[0]
        group = SERIAL_GROUPS.get(test) or SERIAL_GROUPS.get(module)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
