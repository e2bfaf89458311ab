"""/evidence on the real agent's port: behind the same basic auth as /metrics, and refusing whatever
is not a kept window's id, counted like any other refused request."""

from __future__ import annotations

import base64
import gzip
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.agent import Agent, parse, sample
from support.patience import hang_guard
from support.pki import HASH, PASSWORD, USER
from support.tracebuild import kernel, span, trace_doc, write
from warpwatch.export import metricdefs as md

AUTH = {"Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}
REJECTED = md.exposed_name(md.HTTP_REJECTED)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Agent, Path]]:
    tmp = tmp_path_factory.mktemp("evidence")
    (tmp / "traces").mkdir()
    (tmp / "web.yml").write_text(f"basic_auth_users:\n  {USER}: {HASH}\n")
    trace = write(tmp / "traces" / "w.pt.trace.json", trace_doc([span(0, 1000), kernel("k", ts=10, dur=50)]))
    agent = Agent(
        "--source",
        f"dir:{tmp / 'traces'}",
        "--evidence-dir",
        str(tmp / "ev"),
        "--web-config",
        str(tmp / "web.yml"),
        "--period",
        "300ms",
        "--window",
        "20ms",
        "--jitter",
        "0",
        "--allow-high-duty",
    )
    try:
        yield agent, trace
    finally:
        agent.stop()


def kept_list(agent: Agent) -> list[dict[str, object]]:
    """/evidence once it lists a kept window (the hang guard: then fail)."""
    deadline = time.monotonic() + hang_guard()
    while True:
        status, headers, body = agent.get("/evidence", AUTH)
        assert status == 200 and headers["Content-Type"] == "application/json", body
        listed: list[dict[str, object]] = json.loads(body)
        if listed:
            return listed
        assert time.monotonic() < deadline, "no kept window listed on /evidence"
        time.sleep(0.1)


def rejected(agent: Agent, reason: str) -> float:
    status, _, body = agent.get("/metrics", AUTH)
    assert status == 200
    return sample(parse(body.decode()), REJECTED, reason=reason) or 0.0


def test_a_kept_window_is_listed_and_served_as_the_engine_wrote_it(agent: tuple[Agent, Path]) -> None:
    proc, trace = agent
    (entry,) = kept_list(proc)
    assert entry["reason"] == "baseline" and entry["file"] == trace.name and entry["gpus"] == [0]
    status, headers, body = proc.get(f"/evidence/{entry['id']}", AUTH)
    assert status == 200 and headers["Content-Type"] == "application/gzip"
    assert gzip.decompress(body) == trace.read_bytes()


def test_evidence_needs_the_same_credentials_as_metrics(agent: tuple[Agent, Path]) -> None:
    proc, _ = agent
    (entry,) = kept_list(proc)
    for path in ("/metrics", "/evidence", f"/evidence/{entry['id']}"):
        status, headers, _ = proc.get(path)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic"), path


@pytest.mark.parametrize(
    "path",
    [
        "/evidence/20251205T080000Z-999999",  # an id, not kept
        "/evidence/..%2f..%2fetc%2fpasswd",
        "/evidence/%2e%2e/%2e%2e/web.yml",
        "/evidence/20251205T080000Z-000001.meta.json",
        "/evidence//etc/passwd",
    ],
)
def test_anything_but_a_kept_id_is_refused_and_counted(agent: tuple[Agent, Path], path: str) -> None:
    proc, _ = agent
    kept_list(proc)
    before = rejected(proc, "not_found")
    status, _, body = proc.get(path, AUTH)
    assert status == 404, body
    assert b"root:" not in body and b"basic_auth_users" not in body
    assert rejected(proc, "not_found") == before + 1


def test_an_oversized_request_for_evidence_is_refused_and_counted(agent: tuple[Agent, Path]) -> None:
    proc, _ = agent
    before = rejected(proc, "headers_too_large")
    status, _, _ = proc.get("/evidence", {**AUTH, "X-Padding": "x" * 40_000})
    assert status == 431
    assert rejected(proc, "headers_too_large") == before + 1


@pytest.mark.slow  # waits out the 10 s header deadline
def test_a_slow_request_for_evidence_is_closed_and_counted(agent: tuple[Agent, Path]) -> None:
    proc, _ = agent
    before = rejected(proc, "header_timeout")
    with socket.create_connection(("127.0.0.1", proc.port), timeout=hang_guard()) as sock:
        sock.sendall(b"GET /evidence HTTP/1.1\r\nHost: x\r\n")  # the headers never end
        assert sock.recv(1024) == b""  # closed, no answer
    assert rejected(proc, "header_timeout") == before + 1


def test_the_list_is_bounded_by_since_and_until_in_unix_seconds(agent: tuple[Agent, Path]) -> None:
    proc, _ = agent
    (entry,) = kept_list(proc)
    kept_at = float(entry["time"])  # type: ignore[arg-type]
    for query, expected in (
        (f"since={kept_at - 1}&until={kept_at + 1}", [entry["id"]]),
        (f"since={kept_at + 1}", []),
        (f"until={kept_at - 1}", []),
    ):
        status, _, body = proc.get(f"/evidence?{query}", AUTH)
        assert status == 200 and [m["id"] for m in json.loads(body)] == expected, query
    status, _, _ = proc.get("/evidence?since=yesterday", AUTH)
    assert status == 400
