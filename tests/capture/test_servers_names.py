"""The vllm/sglang sources' parsing: file names of every engine version, SGLang's version string
and server info (any answer at all: never a raise, never a start request it cannot vouch for),
the spec options, and the counters as exported."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.engines.threaded import Recorded, SglangStandIn
from warpwatch.capture.registry import build_source, sglang_source, vllm_source
from warpwatch.capture.servers import Dialect, ProfilingServerSource, VllmDialect
from warpwatch.capture.servers.sglang import DEFAULT_NUM_STEPS, SglangDialect, parse_version
from warpwatch.capture.servers.vllm import DEFAULT_MAX_STEPS
from warpwatch.config.table import Config
from warpwatch.errors import ConfigError

FAST: dict[str, Any] = {
    "poll_interval_s": 0.02,
    "retry_pause_s": 0.01,
    "request_timeout_s": 2.0,
    "max_retries": 0,
    "flush_timeout_s": 0.2,
}


# -- vLLM ----------------------------------------------------------------------------------------

V = vllm_source("http://h:1", "/tmp/unused")


@pytest.mark.parametrize(
    ("name", "labels"),
    [
        ("gpu-node-7_4242.1723456789123456789.pt.trace.json.gz", {"process": "gpu-node-7_4242"}),  # V0
        ("0a1b-rank-3.1723456789123456789.pt.trace.json.gz", {"rank": "3"}),  # V1 before 0.17
        ("worker0.pt.trace.json", {"process": "worker0"}),
        (
            "dp1_pp0_tp3_dcp0_ep2_rank7.1723456789123456789.pt.trace.json.gz",  # 0.17+
            {"dp_rank": "1", "pp_rank": "0", "tp_rank": "3", "dcp_rank": "0", "ep_rank": "2", "rank": "7"},
        ),
        (
            "run-a_dp0_pp1_tp0_dcp0_ep0_rank4.1723456789123456789.pt.trace.json",  # with profile_prefix
            {"dp_rank": "0", "pp_rank": "1", "tp_rank": "0", "dcp_rank": "0", "ep_rank": "0", "rank": "4"},
        ),
        (
            "dp0_pp0_tp1_dcp0_ep0.1723456789123456789.pt.trace.json.gz",  # no global rank given
            {"dp_rank": "0", "pp_rank": "0", "tp_rank": "1", "dcp_rank": "0", "ep_rank": "0"},
        ),
        ("rank5.1723456789123456789.pt.trace.json.gz", {"rank": "5"}),  # parallel state not up yet
    ],
)
def test_vllm_worker_names_of_every_version(name: str, labels: dict[str, str]) -> None:
    assert V.dialect.is_trace_name(name) and V.dialect.is_worker_trace(name)
    assert V.dialect.labels_for(name) == labels


def test_vllm_front_end_trace_is_not_a_worker_trace() -> None:
    name = "api-0_977.async_llm.1723456789123456789.pt.trace.json.gz"
    assert V.dialect.is_trace_name(name) and not V.dialect.is_worker_trace(name)
    assert V.dialect.is_worker_trace("0a1b-rank-0.1723456789123456789.pt.trace.json.gz")


@given(
    ranks=st.tuples(*[st.integers(0, 4095)] * 6), ts=st.integers(0, 2**63), prefix=st.sampled_from(["", "x_", "a-b_"])
)
@settings(max_examples=60, deadline=None)
def test_vllm_0_17_ranks_round_trip(ranks: tuple[int, ...], ts: int, prefix: str) -> None:
    d, p, t, c, e, r = ranks
    name = f"{prefix}dp{d}_pp{p}_tp{t}_dcp{c}_ep{e}_rank{r}.{ts}.pt.trace.json.gz"
    assert V.dialect.labels_for(name) == {
        "dp_rank": str(d),
        "pp_rank": str(p),
        "tp_rank": str(t),
        "dcp_rank": str(c),
        "ep_rank": str(e),
        "rank": str(r),
    }


@given(st.text(max_size=200))
@settings(max_examples=200, deadline=None)
def test_vllm_any_name_gives_bounded_labels(name: str) -> None:
    labels = V.dialect.labels_for(name + ".pt.trace.json.gz")
    assert labels and all(len(v) <= len(name) + 20 for v in labels.values())


# -- SGLang names and versions -------------------------------------------------------------------

S = sglang_source("http://h:1", "/tmp/unused")


@pytest.mark.parametrize(
    ("name", "labels"),
    [
        ("1723456789.123-TP-1.trace.json.gz", {"rank": "1"}),
        ("exp-1723456789.123-TP-2-DP-1-EP-3.trace.json.gz", {"rank": "2", "dp_rank": "1", "ep_rank": "3"}),
        ("1723456789.123-TP-0-PP-1-EXTEND.trace.json.gz", {"rank": "0", "pp_rank": "1"}),  # by stage, v1
        ("1723456789.123-TP-3-decode.trace.json.gz", {"rank": "3"}),  # by stage, v2
        ("rank0.trace.json.gz", {"process": "rank0"}),
    ],
)
def test_sglang_names(name: str, labels: dict[str, str]) -> None:
    assert S.dialect.is_trace_name(name)
    assert S.dialect.labels_for(name) == labels


@pytest.mark.parametrize(
    "name",
    [
        "1723456789.123-TP-1-ForwardMode.EXTEND.trace.json.gz",  # 0.4.7 era: f"-{stage}", Python 3.10
        "1723456789.123-TP-1-2.trace.json.gz",  # DECODE on Python 3.11+, where an IntEnum prints as its value
        "1723456789.123-TP-1-DECODE.trace.json.gz",  # later v1
        "1723456789.123-TP-1-DP-0-decode.trace.json.gz",  # v2
    ],
)
def test_sglang_by_stage_names_as_each_version_and_python_spell_the_stage(name: str) -> None:
    """scheduler_profiler_mixin.stop_profile appends f"-{stage.__str__()}" of a ForwardMode, an
    IntEnum: what that prints changed with Python 3.11. Every spelling is a by-stage file."""
    assert S.dialect.is_trace_name(name) and SglangDialect.is_staged(name)
    assert S.dialect.labels_for(name)["rank"] == "1"
    assert not SglangDialect.is_staged("1723456789.123-TP-1.trace.json.gz")
    assert not SglangDialect.is_staged("1723456789.123-TP-1-DP-0.trace.json.gz")


def test_sglang_names_that_are_not_traces() -> None:
    assert not S.dialect.is_trace_name("merged-1723.1.trace.json.gz")
    assert not S.dialect.is_trace_name("1723.1-TP-0-memory.pickle")


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("0.4.6.post1", (0, 4, 6)),
        ("0.5.0rc2", (0, 5, 0)),
        ("v0.4.10", (0, 4, 10)),
        ("1.2", (1, 2, 0)),
        ("nightly", None),
        ("", None),
        (46, None),
        (None, None),
        (["0.4.6"], None),
    ],
)
def test_parse_version(text: object, version: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == version


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
INFO = st.fixed_dictionaries(
    {},
    optional={
        "version": st.one_of(st.text(max_size=12), st.sampled_from(["0.4.2", "0.4.6", "0.5.1"]), JSON),
        "tp_size": st.one_of(st.integers(-5, 10**9), JSON),
        "dp_size": JSON,
        "pp_size": JSON,
        "enable_dp_attention": JSON,
    },
)
ANSWER = st.one_of(
    INFO.map(lambda d: (200, json.dumps(d).encode())),
    JSON.map(lambda d: (200, json.dumps(d).encode())),
    st.tuples(st.sampled_from([200, 204, 301, 400, 404, 500, 503]), st.binary(max_size=300)),
)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Any:
    s = SglangStandIn(tmp_path_factory.mktemp("hostile"))
    yield s
    s.close()


@pytest.mark.slow
@given(answer=ANSWER)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_server_info_answer_is_handled(answer: tuple[int, bytes], hostile: SglangStandIn) -> None:
    """Whatever /get_server_info answers: capture returns (never raises), and a start is sent
    only to a version read as 0.4.4+ (or 0.4.7+: by stage)."""
    status, body = answer
    hostile.requests.clear()
    hostile.in_progress = False

    def handle_get(rec: Recorded) -> tuple[int, str, bytes]:
        return status, "application/json", body

    hostile.handle_get = handle_get  # type: ignore[method-assign]
    src = sglang_source(hostile.url, hostile.trace_dir, **FAST)
    windows = src.capture(0.01, 0.3)
    assert isinstance(windows, list)
    doc: Any = None
    with contextlib.suppress(ValueError):
        doc = json.loads(body)
    version = parse_version(doc.get("version")) if isinstance(doc, dict) and status == 200 else None
    sent = [json.loads(r.body) if r.body else None for r in hostile.requests if r.path == "/start_profile"]
    if version is None or version < (0, 4, 4):
        assert sent == []
        assert any(w.outcome == "failed" for w in windows)
    elif version >= (0, 4, 7):
        # By stage only, and only where the ranks are known (the session's end is then known).
        assert all(b["profile_by_stage"] is True and "start_step" not in b for b in sent)
        assert bool(sent) == (SglangDialect.ranks(doc) is not None)
        assert "/stop_profile" not in [r.path for r in hostile.requests]


# -- spec options and metrics ----------------------------------------------------------------------


def test_sglang_spec_options(tmp_path: Path) -> None:
    config = Config(trace_dir=tmp_path)
    s = build_source(f"sglang:http://h:1,dir={tmp_path},profiler_dir_env=1,num_steps=3", config)
    assert isinstance(s, ProfilingServerSource) and isinstance(s.dialect, SglangDialect)
    assert s.dialect.profiler_dir_env is True and s.dialect.num_steps == 3
    s = build_source(f"sglang:http://h:1,dir={tmp_path}", config)
    assert isinstance(s, ProfilingServerSource) and isinstance(s.dialect, SglangDialect)
    assert s.dialect.profiler_dir_env is False and s.dialect.num_steps == 10
    with pytest.raises(ConfigError, match="profiler_dir_env must be 1 or 0, got 'maybe'"):
        build_source("sglang:http://h:1,profiler_dir_env=maybe", config)
    with pytest.raises(ConfigError, match="num_steps must be between 1 and 10000"):
        build_source("sglang:http://h:1,num_steps=0", config)


@pytest.mark.parametrize(
    ("info", "ranks"),
    [
        ({"tp_size": 2}, 2),
        ({"tp_size": 2, "dp_size": 2, "pp_size": 2}, 8),
        ({"tp_size": 4, "dp_size": 4, "enable_dp_attention": True}, 4),  # DP attention: DP ranks are TP ranks
        ({}, None),
        ({"tp_size": 10**9}, None),
        ({"tp_size": 64, "dp_size": 64}, None),
        ({"tp_size": True}, None),
        ({"tp_size": 2, "pp_size": "2"}, None),
    ],
)
def test_ranks_from_server_info(info: dict[str, object], ranks: int | None) -> None:
    assert SglangDialect.ranks(info) == ranks


def test_sglang_capture_overhead_counts_the_version_requests() -> None:
    s = sglang_source("http://h:1", "/tmp/t", request_timeout_s=10.0, max_retries=2, retry_pause_s=1.0)
    one = 3 * 10.0 + 1.0 + 2.0  # three attempts, pauses of 1 s and 2 s
    # two GETs for the version, then the start; the wait for a stop that ends a session left open;
    # three reads of /metrics (the span before the first window, the window's start and end) and that span
    assert s.capture_overhead_s == 3 * one + 10.0 + 3 * 10.0 + 5.0


def test_server_options_are_checked_once_and_kept_frozen() -> None:
    o = vllm_source(" http://h:1/ ", "/tmp/unused", request_timeout_s=3).options
    assert (o.kind, o.url, o.name, o.request_timeout_s) == ("vllm", "http://h:1", "vllm:http://h:1", 3.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.url = "http://other:1"  # type: ignore[misc]
    with pytest.raises(ConfigError, match="sglang source: max_retries: -1 must be a whole number, 0 or more"):
        sglang_source("http://h:1", "/tmp/unused", max_retries=-1)


def test_a_dialect_states_all_an_engine_differs_in() -> None:
    """`Dialect` is abstract (no default to inherit by accident); each engine's source is the one
    server source with that engine's dialect, whose histograms its served latency reads."""
    with pytest.raises(TypeError, match="abstract"):
        Dialect()  # type: ignore[abstract]
    for src, dialect, engine in ((V, VllmDialect, "vllm"), (S, SglangDialect, "sglang")):
        assert type(src) is ProfilingServerSource and type(src.dialect) is dialect
        assert src.options.kind == dialect.kind == engine
        assert dialect.inter_token_histograms[0] == f"{engine}:inter_token_latency_seconds"
        assert dialect.first_token_histograms == (f"{engine}:time_to_first_token_seconds",)
    assert V.dialect.max_steps == DEFAULT_MAX_STEPS and S.dialect.num_steps == DEFAULT_NUM_STEPS
