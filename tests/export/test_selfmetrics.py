"""The agent's own metrics from the sources' `stats()`: one `SourceStats` shape for every source."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from warpwatch.capture import CapturedWindow, Source
from warpwatch.export import metricdefs as md
from warpwatch.export.selfmetrics import AgentCollector
from warpwatch.sourcestats import FILE_KINDS, SKIP_REASONS, SourceStats


class Counted(Source):
    def __init__(self, name: str, stats: SourceStats | None = None) -> None:
        self.name = name
        self._stats = stats

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        return []

    def stats(self) -> SourceStats:
        return self._stats if self._stats is not None else super().stats()


def scrape(*sources: Source) -> tuple[CollectorRegistry, str]:
    registry = CollectorRegistry()
    registry.register(AgentCollector(sources=sources))
    return registry, generate_latest(registry).decode()


def test_a_source_that_counts_nothing_exports_no_source_family() -> None:
    _, text = scrape(Counted("dir:/t"))
    for m in (md.DAEMON_CLIENTS, md.DAEMON_CLIENTS_SEEN, md.SERVER_WINDOWS_SKIPPED, md.SERVER_TRACE_FILES):
        assert m.name not in text


def test_server_counters_are_exported_with_every_reason() -> None:
    registry, text = scrape(
        Counted("vllm:a", SourceStats(skipped={"unsafe_request": 2}, files={"cpu_only": 1})), Counted("dir:/t")
    )
    skipped = md.exposed_name(md.SERVER_WINDOWS_SKIPPED)
    files = md.exposed_name(md.SERVER_TRACE_FILES)
    assert registry.get_sample_value(skipped, {"source": "vllm:a", "reason": "unsafe_request"}) == 2
    assert registry.get_sample_value(files, {"source": "vllm:a", "kind": "cpu_only"}) == 1
    for reason in SKIP_REASONS:
        assert f'{skipped}{{reason="{reason}",source="vllm:a"}}' in text
    for kind in FILE_KINDS:
        assert f'{files}{{kind="{kind}",source="vllm:a"}}' in text
    assert 'source="dir:/t"' not in text
    assert md.DAEMON_CLIENTS.name not in text


def test_peer_counters_are_exported_for_sources_with_peers() -> None:
    stats = SourceStats(
        clients=3, clients_seen=5, dropped={"malformed": 1}, replies_dropped={"stale": 2}, evicted={"registry_full": 4}
    )
    registry, text = scrape(Counted("kineto-daemon", stats))
    assert registry.get_sample_value(md.DAEMON_CLIENTS.name, {"source": "kineto-daemon"}) == 3
    assert registry.get_sample_value(md.exposed_name(md.DAEMON_CLIENTS_SEEN), {"source": "kineto-daemon"}) == 5
    for m, reason, n in (
        (md.DAEMON_DATAGRAMS_DROPPED, "malformed", 1),
        (md.DAEMON_REPLIES_DROPPED, "stale", 2),
        (md.DAEMON_CLIENTS_EVICTED, "registry_full", 4),
    ):
        assert registry.get_sample_value(md.exposed_name(m), {"source": "kineto-daemon", "reason": reason}) == n
    assert md.SERVER_WINDOWS_SKIPPED.name not in text


def test_a_source_declares_every_member_the_service_uses_with_defaults() -> None:
    src = Counted("stub")
    src.start()
    src.close()
    assert src.capture_overhead_s == 0.0
    assert src.stats() == SourceStats()
    assert not src.stats().has_peers and not src.stats().skips


def test_a_window_without_a_file_says_its_kind_of_failure() -> None:
    assert CapturedWindow("s", None, error="x", outcome="failed").failure_kind == "failed"
    assert CapturedWindow("s", None, error="x", outcome="timed_out").failure_kind == "timed_out"
    assert CapturedWindow("s", None, error="x", outcome="failed", failure="raised").failure_kind == "raised"
