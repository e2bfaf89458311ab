"""Reading a server's inter-token latency histogram around windows (`capture.servers.servedlatency`)."""

from __future__ import annotations

import logging

import pytest

from warpwatch.capture.servers.servedlatency import HISTOGRAMS, ServedLatency, histogram_sums

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
    assert histogram_sums(exposition(90, 2.5), HISTOGRAMS["vllm"]) == (3.5, 100.0)
    old = "vllm:time_per_output_token_seconds_sum 4.0\nvllm:time_per_output_token_seconds_count 8\n"
    assert histogram_sums(old, HISTOGRAMS["vllm"]) == (4.0, 8.0)
    sglang = (
        'sglang:inter_token_latency_seconds_sum{tp_rank="0"} 1.5\n'
        'sglang:inter_token_latency_seconds_count{tp_rank="0"} 3\n'
    )
    assert histogram_sums(sglang, HISTOGRAMS["sglang"]) == (1.5, 3.0)


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
    assert histogram_sums(text, HISTOGRAMS["vllm"]) is None


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
    served = ServedLatency(HISTOGRAMS["vllm"], script.read, name="vllm:x", clock=script.clock)
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


def test_a_server_without_the_histogram_is_asked_once(caplog: pytest.LogCaptureFixture) -> None:
    script = Script([""])
    served = ServedLatency(HISTOGRAMS["vllm"], script.read, name="vllm:x", clock=script.clock)
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
    served = ServedLatency(HISTOGRAMS["vllm"], script.read, name="vllm:x", clock=script.clock)
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
