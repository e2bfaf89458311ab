"""Reading a server's inter-token latency histogram around windows (`capture.servers.servedlatency`)."""

from __future__ import annotations

import logging

import pytest

from warpwatch.capture.servers import SglangDialect, VllmDialect
from warpwatch.capture.servers.servedlatency import ServedLatency, histogram_sums
from warpwatch.overhead import slowdown

VLLM_ITL, VLLM_TTFT = VllmDialect.inter_token_histograms, VllmDialect.first_token_histograms
SGLANG_ITL = SglangDialect.inter_token_histograms

VLLM = """\
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="m"} 3.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} %s
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} %s
vllm:inter_token_latency_seconds_count{engine="1",model_name="m"} 10.0
vllm:inter_token_latency_seconds_sum{engine="1",model_name="m"} 1.0
vllm:inter_token_latency_seconds_created{engine="0",model_name="m"} 1.7e9
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 99.0
"""


def exposition(count: float, total: float) -> str:
    return VLLM % (count, total)


def test_totals_add_every_label_set_of_the_newest_name_present() -> None:
    assert histogram_sums(exposition(90, 2.5), VLLM_ITL) == (3.5, 100.0)
    old = "vllm:time_per_output_token_seconds_sum 4.0\nvllm:time_per_output_token_seconds_count 8\n"
    assert histogram_sums(old, VLLM_ITL) == (4.0, 8.0)
    sglang = (
        'sglang:inter_token_latency_seconds_sum{tp_rank="0"} 1.5\n'
        'sglang:inter_token_latency_seconds_count{tp_rank="0"} 3\n'
    )
    assert histogram_sums(sglang, SGLANG_ITL) == (1.5, 3.0)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage",
        "vllm:inter_token_latency_seconds_sum NaN\nvllm:inter_token_latency_seconds_count 3\n",
        'vllm:inter_token_latency_seconds_sum{a="b"} x\nvllm:inter_token_latency_seconds_count 1\n',
        "vllm:inter_token_latency_seconds_sum 1\n",
    ],
)
def test_no_histogram_or_a_malformed_one_gives_none(text: str) -> None:
    assert histogram_sums(text, VLLM_ITL) is None


class Script:
    """Readings served in order, and a clock moved by hand."""

    def __init__(self, texts: list[str | None]) -> None:
        self.texts = texts
        self.now = 0.0
        self.reads = 0

    def read(self) -> str | None:
        self.reads += 1
        return self.texts.pop(0)

    def clock(self) -> float:
        return self.now


def test_windows_split_the_latency_inside_and_between_them() -> None:
    # engine 1 adds a constant (10 tokens, 1 s) to every reading: it cancels in the differences
    script = Script([exposition(0, 0), exposition(10, 0.5), exposition(60, 1.5), exposition(70, 2.0)])
    served = ServedLatency(VLLM_ITL, script.read, name="vllm:x", clock=script.clock)
    served.started()
    script.now = 2.0
    served.ended()  # inside: 10 tokens, 0.5 s, 2 s of wall time
    first = served.split()  # the first window alone: nothing measured between windows yet
    assert first is not None and (first.inside_tokens, first.outside_tokens, first.windows) == (10, 0, 1)
    script.now = 10.0
    served.started()  # outside: 50 tokens, 1 s
    script.now = 13.0
    served.ended()  # inside: 10 tokens, 0.5 s, 3 s of wall time
    split = served.split()
    assert split is not None
    assert (split.inside_tokens, split.inside_s, split.outside_tokens, split.outside_s) == (20, 1.0, 50, 1.0)
    assert (split.inside_wall_s, split.windows) == (5.0, 2)


def with_first_tokens(itl: tuple[float, float], ttft: tuple[float, float]) -> str:
    """An exposition with both histograms: (count, sum) of each."""
    return (
        f"vllm:inter_token_latency_seconds_count {itl[0]}\nvllm:inter_token_latency_seconds_sum {itl[1]}\n"
        f"vllm:time_to_first_token_seconds_count {ttft[0]}\nvllm:time_to_first_token_seconds_sum {ttft[1]}\n"
    )


def test_a_stall_on_first_tokens_is_counted_with_the_inter_token_waits() -> None:
    # Window 1: 4 streams between requests when the stop stalls the engine 20 s: the inter-token
    # histogram gains 40 tokens over 0.2 s, the first-token one 4 requests that waited 20.1 s each.
    # Between windows: 400 gaps of 5 ms (2 s) and 2 first tokens of 50 ms (0.1 s).
    # Window 2: 40 gaps of 5 ms (0.2 s) and no new request.
    readings = [((0, 0.0), (0, 0.0)), ((40, 0.2), (4, 80.4)), ((440, 2.2), (6, 80.5)), ((480, 2.4), (6, 80.5))]
    script = Script([with_first_tokens(*r) for r in readings])
    served = ServedLatency(
        VLLM_ITL,
        script.read,
        name="vllm:x",
        first_token=VLLM_TTFT,
        clock=script.clock,
    )
    for _ in range(2):
        served.started()
        served.ended()
    split = served.split()
    assert split is not None
    # inside: 80 + 4 tokens over 0.2 + 80.4 + 0.2 s; outside: 402 tokens over 2.1 s
    assert (split.inside_tokens, split.inside_s) == (84, pytest.approx(80.8))
    assert (split.outside_tokens, split.outside_s) == (402, pytest.approx(2.1))
    # mean wait inside 80.8 / 84 = 0.962 s, outside 2.1 / 402 = 5.22 ms: 183x; the inter-token
    # histogram alone would read (0.4 / 80) / (2.0 / 400) = 1x, no slowdown at all.
    assert slowdown(split) == pytest.approx((80.8 / 84) / (2.1 / 402) - 1)
    itl_only = ServedLatency(VLLM_ITL, Script([with_first_tokens(*r) for r in readings]).read, name="v")
    for _ in range(2):
        itl_only.started()
        itl_only.ended()
    alone = itl_only.split()
    assert alone is not None and slowdown(alone) == pytest.approx(0.0)


def test_a_server_without_the_histogram_is_asked_once(caplog: pytest.LogCaptureFixture) -> None:
    script = Script([""])
    served = ServedLatency(VLLM_ITL, script.read, name="vllm:x", clock=script.clock)
    with caplog.at_level(logging.INFO, logger="warpwatch.capture.servers"):
        for _ in range(3):
            served.started()
            served.ended()
    assert script.reads == 1 and served.split() is None
    assert "no vllm:inter_token_latency_seconds or vllm:time_per_output_token_seconds histogram" in caplog.text


def test_a_failed_read_or_a_restarted_server_leaves_that_span_out() -> None:
    script = Script(
        [exposition(*r) for r in ((0, 0), (10, 0.5))]
        + [None]
        + [exposition(*r) for r in ((20, 0.9), (30, 1.4), (5, 0.1), (15, 0.6), (25, 1.1), (35, 1.6))]
    )
    served = ServedLatency(VLLM_ITL, script.read, name="vllm:x", clock=script.clock)
    served.started()
    served.ended()  # inside: 10 tokens
    served.started()  # the read failed: this window is not measured (its end is not even read)
    served.ended()
    served.started()  # 20: no span before it (the last window was not measured)
    served.ended()  # 30: inside 10
    served.started()  # 5: the counters went back (a restart): no span before it
    served.ended()  # 15: inside 10
    served.started()  # 25: outside 10 tokens, 0.5 s
    served.ended()  # 35: inside 10
    split = served.split()
    assert split is not None and script.texts == []
    assert (split.windows, split.inside_tokens) == (4, 40)
    assert (split.outside_tokens, split.outside_s) == (10, pytest.approx(0.5))


def test_sums_over_label_sets_ignore_longer_names_and_fail_on_a_sample_without_a_value() -> None:
    text = (
        "# HELP vllm:inter_token_latency_seconds x\n"
        'vllm:inter_token_latency_seconds_sum{engine="0",model_name="m}x"} 2.5\n'
        'vllm:inter_token_latency_seconds_count{engine="0"} 10\n'
        "vllm:inter_token_latency_seconds_sum_extra 99\n"
        'vllm:inter_token_latency_seconds_sum{engine="1"} 1.5\n'
        'vllm:inter_token_latency_seconds_count{engine="1"} 5\n'
    )
    assert histogram_sums(text, VLLM_ITL) == (4.0, 15.0)
    assert histogram_sums(text + 'vllm:inter_token_latency_seconds_count{engine="2"}\n', VLLM_ITL) is None


def with_generated(itl: tuple[float, float], generated: float) -> str:
    """An exposition with the inter-token histogram (count, sum) and the generated-token counter,
    on two engines (the counter's values add)."""
    return (
        f"vllm:inter_token_latency_seconds_count {itl[0]}\nvllm:inter_token_latency_seconds_sum {itl[1]}\n"
        "# TYPE vllm:generation_tokens counter\n"
        f'vllm:generation_tokens_total{{engine="0"}} {generated - 7}\n'
        'vllm:generation_tokens_total{engine="1"} 7\n'
        'vllm:generation_tokens_created{engine="0"} 1.7e9\n'
    )


def test_the_span_before_the_first_window_and_the_generated_tokens_are_measured() -> None:
    # baseline at t=0: 100 tokens generated; first window 5-7 s (1,100 -> 1,300); second 20-22 s
    # (7,800 -> 8,100). Between windows: 5 s with 1,000 tokens, then 13 s with 6,500.
    readings = [((0, 0.0), 100), ((100, 1.0), 1100), ((120, 1.4), 1300), ((770, 7.9), 7800), ((800, 8.3), 8100)]
    script = Script([with_generated(*r) for r in readings])
    served = ServedLatency(
        VLLM_ITL, script.read, name="vllm:x", generated=VllmDialect.generated_counters, clock=script.clock
    )
    assert served.begin_baseline()
    assert not served.begin_baseline()  # once
    for start, end in ((5.0, 7.0), (20.0, 22.0)):
        script.now = start
        served.started()
        script.now = end
        served.ended()
    assert not served.begin_baseline()
    split = served.split()
    assert split is not None and script.texts == []
    assert (split.outside_generated, split.outside_wall_s) == (7500, 18.0)
    assert (split.inside_generated, split.inside_wall_s, split.windows) == (500, 4.0, 2)
    assert (split.outside_tokens, split.outside_s) == (750, pytest.approx(7.5))


def test_no_baseline_is_taken_from_a_server_without_the_histogram() -> None:
    script = Script([""])
    served = ServedLatency(VLLM_ITL, script.read, name="vllm:x", clock=script.clock)
    assert not served.begin_baseline()
    assert not served.begin_baseline() and script.reads == 1
