"""A real Prometheus's HTTP API, as the tests query it."""

from __future__ import annotations

import json
import shutil
import time
import urllib.parse
import urllib.request
from typing import Any

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def query(url: str, promql: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}",
                                timeout=5) as resp:
        doc = json.load(resp)
    assert doc["status"] == "success", doc
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def wait_query(url: str, promql: str, timeout: float = 20.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        result = query(url, promql)
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.3)
