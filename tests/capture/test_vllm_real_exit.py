"""The real vLLM with stacks on (vLLM's default): the agent, a real process, is stopped while a
window's trace is still being written, and nothing of its sessions stays in the folder.

Issue 46, item 6: stopped after 4 minutes of windows every 5 s, the agent left one trace file,
written after it exited (18 sessions started, 17 accounted for). A stop flushes for about a minute
with stacks on (tests/capture/test_vllm_real_stacks.py), longer than the shutdown's grace: the
exiting agent says in one line what it leaves; the session's file, named by the start's
`profile_prefix`, is claimed by the agent's next start (`kind="leftover"`), and every session the
server began is accounted for.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.agent import Agent, sample
from support.vllmreal import VllmServer, serve
from warpwatch.capture.registry import vllm_source
from warpwatch.capture.servers.leftovers import QUIET_S

pytestmark = pytest.mark.slow

FILES = "warpwatch_server_trace_files_total"


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="wwexit", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[VllmServer]:
    # Stacks on (not given: vLLM's default); the API server does not profile itself, so that a
    # session is one file.
    profiler = {"profiler": "torch", "torch_profiler_dir": str(root / "profiles"), "ignore_frontend": True}
    with serve(root, profiler=profiler) as s:
        yield s


def traces(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".pt.trace.json" in p.name) if folder.exists() else []


def spec(server: VllmServer, profiles: Path) -> str:
    return f"vllm:{server.url},dir={profiles},max_steps=0"


def agent(server: VllmServer, profiles: Path) -> Agent:
    # Whole-window sessions (max_steps=0): the stop flushes the window's trace, about a minute
    # with stacks on; rounds give up on it after 5 s (the window timed out, its stop awaited).
    return Agent(
        "--source",
        spec(server, profiles),
        "--period",
        "3",
        "--window",
        "0.5",
        "--jitter",
        "0",
        "--collect-timeout",
        "5",
        "--delete-processed",
        "--allow-high-duty",
        startup_timeout=60,
    )


def files(a: Agent, source: str, kind: str) -> int:
    return int(sample(a.scrape(), FILES, source=source, kind=kind) or 0)


def handed_at_exit(a: Agent) -> int:
    """Files the agent handed over at exit (none where it was stopped in a window: that window's
    session is left to its next start)."""
    (line,) = [x for x in a.lines if "at exit:" in x]
    m = re.search(r"at exit: (\d+) trace file", line)
    assert m or "a window still in progress" in line, line
    return int(m.group(1)) if m else 0


def flushed(server: VllmServer) -> None:
    """Whatever the agent asked is done: a stop of ours (a no-op when nothing runs) waits behind
    it in vLLM's profiler queue."""
    assert server.post("/stop_profile", timeout_s=400) == 200


@pytest.mark.timeout(900)
def test_a_session_written_after_the_agent_exited_is_claimed_at_its_next_start(server: VllmServer, root: Path) -> None:
    profiles = root / "profiles"
    source = spec(server, profiles)
    first = agent(server, profiles)
    try:
        # A window timed out: its stop is unanswered, the server still writes its trace.
        first.wait_for_line(r"not answered within", 120)
        counted = files(first, source, "worker") + files(first, source, "late")
    finally:
        rc, _ = first.stop(timeout=60)
    assert rc == 0, first.lines
    flushed(server)
    left = traces(profiles)
    # The flush (about a minute) outlasted the shutdown's grace: written after the agent exited.
    assert left, ("nothing written after the agent exited", first.lines[-20:])

    # The next start claims them: deleted unread, counted. (The source as the next run makes it:
    # its start claims what is complete; a second agent process would add a window and its flush.)
    time.sleep(QUIET_S)  # the next run starts later than that (a pod's restart takes longer)
    second = vllm_source(server.url, profiles, delete_processed=True, max_steps=0)
    second.start()
    claimed = second.stats().files.get("leftover", 0)
    second.close()
    assert claimed == len(left), (claimed, left, traces(profiles))
    # Named by the start: this agent's sessions only, never a person's file.
    assert all(n.startswith("warpwatch-") for n in left), left
    # One line at exit says what was done and what is left to the next start.
    (exit_line,) = [x for x in first.lines if "at exit:" in x]
    assert "claimed by the agent's next start" in exit_line, exit_line
    counted += handed_at_exit(first)
    # Nothing of the first run is left, its key_averages tables (`*.profiler_out.txt`) included.
    assert sorted(p.name for p in profiles.iterdir()) == []
    # Every session the server began is accounted for: handed over by the run, or claimed by the next.
    assert server.starts_logged() == counted + claimed, (server.starts_logged(), counted, claimed)
