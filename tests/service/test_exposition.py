"""/metrics bodies (`Exposition`): the snapshot's part rendered once per snapshot and format, the
agent's own part at each scrape, one OpenMetrics `# EOF` at the very end."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from warpwatch.export import metricdefs as md
from warpwatch.export.snapshot import Snapshot
from warpwatch.service.exposition import Exposition

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


class Counting:
    """An own collector whose value changes at every scrape."""

    def __init__(self) -> None:
        self.scrapes = 0

    def collect(self) -> list[GaugeMetricFamily]:
        self.scrapes += 1
        return [GaugeMetricFamily("own_scrapes", "scrapes seen", value=self.scrapes)]


def test_the_snapshot_part_is_rendered_once_per_snapshot_and_format() -> None:
    exposition = Exposition()
    exposition.render("text/plain")
    exposition.render("text/plain")
    exposition.render(OPENMETRICS)
    assert exposition.renders == 2
    exposition.publish(Snapshot({md.BUILD_INFO: ((("other",), 1.0),)}))
    body, _ = exposition.render("text/plain")
    assert exposition.renders == 3
    assert b'warpwatch_build_info{version="other"} 1.0' in body


def test_the_agents_own_part_is_rendered_at_each_scrape() -> None:
    exposition = Exposition()
    own = Counting()
    exposition.add_own(own)
    first, _ = exposition.render("text/plain")
    second, _ = exposition.render("text/plain")
    assert b"own_scrapes 1.0" in first and b"own_scrapes 2.0" in second
    assert exposition.renders == 1


def test_openmetrics_ends_with_one_eof_after_both_parts() -> None:
    exposition = Exposition()
    exposition.add_own(Counting())
    body, content_type = exposition.render(OPENMETRICS)
    assert content_type.startswith("application/openmetrics-text")
    assert body.count(b"# EOF") == 1 and body.endswith(b"own_scrapes 1.0\n# EOF\n")
    assert body.index(b"warpwatch_build_info") < body.index(b"own_scrapes")
