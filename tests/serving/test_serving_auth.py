"""Basic auth and TLS through the agent's HTTP server (the web-config format; test_webconfig covers
loading it): guessers queue fairly, the dummy hash is no oracle, client certificates, SANs,
certificate rotation and plain HTTP on the TLS port."""

from __future__ import annotations

import base64
import shutil
import socket
import threading
from pathlib import Path

import bcrypt
import pytest

from support.httpserving import BODY, get, serving
from support.patience import hang_guard, wait_for
from support.pki import HASH, PASSWORD, USER, Pki, basic, client_context, refused
from support.pki import get as webget
from support.pki import make_leaf as _make_leaf
from warpwatch.serving.webconfig import dummy_hash

# ---------------------------------------------------------------------------------------------
# Basic auth


def test_the_dummy_hash_has_the_configured_cost() -> None:
    """Issue: the dummy hash had cost 10 whatever the users' (htpasswd -B uses 5): an oracle."""
    assert dummy_hash([5])[:7] == b"$2b$05$"
    assert dummy_hash([5, 12, 12])[:7] == b"$2b$12$"
    assert dummy_hash([5, 12])[:7] == b"$2b$12$"  # a tie: the higher
    assert bcrypt.checkpw(b"anything", dummy_hash([4])) is False  # a well-formed hash: a full bcrypt


def test_guessers_queue_fairly_and_beyond_the_bound_get_429(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue: one global bcrypt lock made a legitimate first scrape wait behind every attacker.
    Here 12 wrong guesses from 127.0.0.2 (4 may wait, the rest get 429) and then a first scrape
    from 127.0.0.1: its turn comes after one more guess (round-robin), not after the whole queue."""
    order: list[bytes] = []
    started = threading.Event()
    release = threading.Event()
    real = bcrypt.checkpw

    def slow(password: bytes, hashed: bytes) -> bool:
        order.append(password)
        started.set()
        release.wait(hang_guard())
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", slow)
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  prom: '{bcrypt.hashpw(b'right', bcrypt.gensalt(4)).decode()}'\n")
    results: dict[str, list[int]] = {"guess": [], "scrape": []}

    def attempt(kind: str, password: bytes, source: str) -> None:
        auth = "Basic " + base64.b64encode(b"prom:" + password).decode()
        results[kind].append(get(port, headers={"Authorization": auth}, source=source)[0])

    with serving(web_config=cfg) as (server, _):
        assert server.endpoints.auth is not None
        server.endpoints.auth.workers = 1
        port = server.port
        guesses = [threading.Thread(target=attempt, args=("guess", b"wrong%d" % i, "127.0.0.2")) for i in range(12)]
        guesses[0].start()
        assert started.wait(hang_guard())
        for t in guesses[1:]:
            t.start()
        wait_for(
            lambda: len(results["guess"]) == 7, 1.0, "7 guesses answered"
        )  # 1 in progress, 4 waiting, 7 refused at once
        assert results["guess"] == [429] * 7
        scrape = threading.Thread(target=attempt, args=("scrape", b"right", "127.0.0.1"))
        scrape.start()
        wait_for(lambda: server.endpoints.auth is not None and server.endpoints.auth.queued == 5, 1.0, "5 queued")
        release.set()
        scrape.join(hang_guard())
        for t in guesses:
            t.join(hang_guard())
    assert results["scrape"] == [200]
    assert sorted(results["guess"]) == [401] * 5 + [429] * 7
    # Round-robin: after the guess in progress and at most one more of the other client's 4,
    # never behind all of them.
    assert order.index(b"right") == 2, order
    assert server.rejected["auth_busy"] == 7


# ---------------------------------------------------------------------------------------------
# TLS through the agent's server (the web-config format; test_webconfig covers loading it)


@pytest.mark.slow
def test_tls_client_certificates_sans_rotation_and_plain_http_on_the_agents_server(pki: Pki, tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(pki.server_crt, cert)
    shutil.copy(pki.server_key, key)
    cfg = tmp_path / "web.yml"
    cfg.write_text(
        f"tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n"
        "  client_allowed_sans: [prometheus.test]\n"
        f"basic_auth_users:\n  {USER}: {HASH}\n"
        "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
    )
    client = (pki.client_crt, pki.client_key)
    with serving(web_config=cfg) as (server, _):
        url = f"https://127.0.0.1:{server.port}/metrics"
        ok = webget(url, client_context(pki, client), basic(USER, PASSWORD))
        assert (ok.status, ok.body, ok.headers["X-Content-Type-Options"]) == (200, BODY, "nosniff")
        denied = webget(url, client_context(pki, client), basic(USER, "wrong"))
        assert denied.status == 401 and denied.headers["WWW-Authenticate"].startswith('Basic realm="warpwatch"')
        refused(url, client_context(pki), basic(USER, PASSWORD))  # no client certificate
        refused(url, client_context(pki, (pki.foreign_crt, pki.foreign_key)), basic(USER, PASSWORD))
        plain = webget(f"http://127.0.0.1:{server.port}/metrics")
        assert plain.status == 400 and b"Client sent an HTTP request to an HTTPS server" in plain.body

        def serial() -> int:
            with (
                socket.create_connection(("127.0.0.1", server.port), timeout=hang_guard()) as raw,
                client_context(pki, client).wrap_socket(raw, server_hostname="localhost") as conn,
            ):
                return int(conn.getpeercert()["serialNumber"], 16)  # type: ignore[index, arg-type]

        assert serial() == 2
        _make_leaf(pki.dir, "rotated15", "ca", "serverAuth", "DNS:localhost,IP:127.0.0.1", 15)
        shutil.copy(pki.dir / "rotated15.key", key)
        shutil.copy(pki.dir / "rotated15.crt", cert)
        assert serial() == 15
        assert server.rejected["tls_failed"] >= 3


def test_a_client_certificate_without_an_allowed_san_is_refused_before_any_http(pki: Pki, tmp_path: Path) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text(
        f"tls_server_config:\n  cert_file: {pki.server_crt}\n  key_file: {pki.server_key}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n"
        "  client_allowed_sans: [grafana.test]\n"
    )
    with serving(web_config=cfg) as (server, renders):
        refused(f"https://127.0.0.1:{server.port}/metrics", client_context(pki, (pki.client_crt, pki.client_key)))
        assert renders.count == 0
