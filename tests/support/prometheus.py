"""A real Prometheus: started on a folder, and its HTTP API as the tests query it."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .agent import free_port
from .patience import hang_guard

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def query(url: str, promql: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}", timeout=5) as resp:
        doc = json.load(resp)
    assert doc["status"] == "success", doc
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def wait_query(url: str, promql: str, timeout: float = 20.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + hang_guard(timeout)  # how long it usually takes (`patience`)
    while True:
        result = query(url, promql)
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.3)


@contextmanager
def prometheus(
    data: Path,
    config: str = "",
    rule_files: Sequence[Path] = (),
    flags: Sequence[str] = (),
    evaluation_interval: str = "5s",
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A Prometheus on `data` (no scrapes unless `config` has some), ready; yields (url, process).
    Its log is `prometheus-PORT.log` beside `data`, its tail in the error when it does not start."""
    work = data.parent
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    rules = "".join(f"  - {p}\n" for p in rule_files)
    cfg = work / f"prometheus-{port}.yml"
    # `config` may go on with global settings (indented) before its own sections
    cfg.write_text(
        f"global:\n  evaluation_interval: {evaluation_interval}\n" + config + (f"rule_files:\n{rules}" if rules else "")
    )
    log = (work / f"prometheus-{port}.log").open("w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=10y",
            *flags,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(url + "/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (work / f"prometheus-{port}.log").read_text()[-3000:]
                raise AssertionError("prometheus did not start:\n" + tail)
            time.sleep(0.3)
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()
