"""`/evidence/ID` for an id handed out before its trace is written (it rides as an exemplar at once):
503 with `Retry-After` while the copy runs, the trace once written, 404 once the keep failed."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from support.gate import WAIT_S, Gate
from warpwatch.evidence.store import EvidenceError, EvidenceStore
from warpwatch.serving import Endpoints, HttpServer

T0 = 1_764_921_600.0  # 2025-12-05T08:00:00Z


def fetch(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_a_pending_id_is_503_until_written_and_a_failed_one_404(tmp_path: Path) -> None:
    gate = Gate()
    store = EvidenceStore(tmp_path / "ev", 10_000, 10, lambda: T0, opener=gate)
    server = HttpServer(
        Endpoints(lambda _: (b"", "text/plain"), lambda: (True, "ready"), evidence=store), "127.0.0.1", 0
    )
    server.start()
    try:
        trace = tmp_path / "w.json"
        trace.write_bytes(b'{"traceEvents": []}')
        kid = store.reserve()
        copy = threading.Thread(target=store.keep, args=(trace, {}, kid))
        copy.start()
        assert gate.entered.wait(WAIT_S)
        status, headers, body = fetch(server.port, f"/evidence/{kid}")
        assert (status, headers["Retry-After"]) == (503, "1") and b"still being written" in body
        gate.open.set()
        copy.join(WAIT_S)
        assert fetch(server.port, f"/evidence/{kid}")[0] == 200

        failed = store.reserve()
        assert fetch(server.port, f"/evidence/{failed}")[0] == 503
        with pytest.raises(EvidenceError):
            store.keep(tmp_path / "gone.json", {}, failed)  # no such trace: io_error
        assert fetch(server.port, f"/evidence/{failed}")[0] == 404
    finally:
        server.stop()
