"""TLS and basic auth of the web config over real connections: urllib, curl and a real Prometheus as
clients, the basic-auth cache (loading the file: test_webconfig.py)."""

from __future__ import annotations

import base64
import http.client
import logging
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import bcrypt
import pytest

from support.patience import hang_guard
from support.pki import CURL, HASH, PASSWORD, USER, Pki, basic, client_context, get, refused
from support.pki import make_leaf as _make_leaf
from support.reachable import reachable
from support.webconfigkit import METRICS, _logged, serve, tls_config, write_config
from warpwatch.serving.basicauth import BasicAuth
from warpwatch.serving.webfile import load_web_config

# TLS and basic auth over real connections


@pytest.mark.slow
def test_https_with_basic_auth(pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    cfg = load_web_config(
        tls_config(pki, tmp_path, rest="http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n")
    )
    ctx = client_context(pki)
    with serve(cfg) as port:
        url = f"https://127.0.0.1:{port}/metrics"
        ok = get(url, ctx, basic(USER, PASSWORD))
        assert (ok.status, ok.body) == (200, METRICS)
        assert ok.headers["X-Content-Type-Options"] == "nosniff"
        assert "WWW-Authenticate" not in ok.headers
        assert get(f"https://localhost:{port}/metrics", ctx, basic(USER, PASSWORD)).status == 200  # DNS SAN

        for auth in (
            basic(USER, "wrong"),
            None,
            basic("nobody", PASSWORD),
            "Basic !!notbase64!!",
            "Bearer " + PASSWORD,
            basic(USER, PASSWORD + "x" * 80),
            "Basic " + base64.b64encode(PASSWORD.encode()).decode(),
        ):
            denied = get(url, ctx, auth)
            assert denied.status == 401, auth
            assert denied.headers["WWW-Authenticate"].startswith('Basic realm="warpwatch"')
            assert denied.headers["X-Content-Type-Options"] == "nosniff"
            assert METRICS not in denied.body
        assert get(f"https://127.0.0.1:{port}/other", ctx).status == 401  # every path is protected

        plain = get(f"http://127.0.0.1:{port}/metrics", auth=basic(USER, PASSWORD))
        assert plain.status == 400
        assert b"Client sent an HTTP request to an HTTPS server" in plain.body

        untrusting = ssl.create_default_context()  # the system CAs do not know the test CA
        err = refused(url, untrusting, basic(USER, PASSWORD))
        assert "CERTIFICATE_VERIFY_FAILED" in str(err)
    logged = _logged(caplog)
    assert "tls_enabled" in logged and str(cfg.path) in logged and "basic_auth_users=1" in logged
    for secret in (PASSWORD, HASH, *pki.private_keys()):
        assert secret not in logged


@pytest.mark.slow
def test_client_certificate_required(pki: Pki, tmp_path: Path) -> None:
    cfg = load_web_config(
        tls_config(pki, tmp_path, f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n")
    )
    with serve(cfg) as port:
        url = f"https://127.0.0.1:{port}/metrics"
        assert get(url, client_context(pki, (pki.client_crt, pki.client_key)), basic(USER, PASSWORD)).status == 200
        assert get(url, client_context(pki, (pki.client_crt, pki.client_key)), basic(USER, "no")).status == 401
        refused(url, client_context(pki), basic(USER, PASSWORD))
        refused(url, client_context(pki, (pki.foreign_crt, pki.foreign_key)), basic(USER, PASSWORD))
        # TLS 1.2 reports the refusal inside the handshake itself
        err = refused(url, client_context(pki, max_version=ssl.TLSVersion.TLSv1_2), basic(USER, PASSWORD))
        assert "CERTIFICATE" in str(err).upper() or "HANDSHAKE" in str(err).upper()


@pytest.mark.slow
def test_client_certificate_optional(pki: Pki, tmp_path: Path) -> None:
    cfg = load_web_config(
        tls_config(pki, tmp_path, f"  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: {pki.ca}\n")
    )
    with serve(cfg) as port:
        url = f"https://127.0.0.1:{port}/metrics"
        assert get(url, client_context(pki), basic(USER, PASSWORD)).status == 200
        assert get(url, client_context(pki, (pki.client_crt, pki.client_key)), basic(USER, PASSWORD)).status == 200
        refused(url, client_context(pki, (pki.foreign_crt, pki.foreign_key)), basic(USER, PASSWORD))


@pytest.mark.slow
def test_client_allowed_sans(pki: Pki, tmp_path: Path) -> None:
    base = f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n"
    client = (pki.client_crt, pki.client_key)
    for sans, accepted in (
        ("[spiffe://test/prometheus]", True),
        ("[other.test, prometheus.test]", True),
        ("[grafana.test]", False),
    ):
        cfg = load_web_config(tls_config(pki, tmp_path, base + f"  client_allowed_sans: {sans}\n", users=False))
        with serve(cfg) as port:
            url = f"https://127.0.0.1:{port}/metrics"
            if accepted:
                assert get(url, client_context(pki, client)).status == 200
            else:
                refused(url, client_context(pki, client))


@pytest.mark.slow
def test_min_version_tls13_refuses_a_tls12_client(pki: Pki, tmp_path: Path) -> None:
    cfg = load_web_config(tls_config(pki, tmp_path, "  min_version: TLS13\n"))
    with serve(cfg) as port:
        url = f"https://127.0.0.1:{port}/metrics"
        err = refused(url, client_context(pki, max_version=ssl.TLSVersion.TLSv1_2), basic(USER, PASSWORD))
        assert "VERSION" in str(err).upper()
        assert get(url, client_context(pki), basic(USER, PASSWORD)).status == 200


@pytest.mark.slow
def test_max_version_and_cipher_suites_are_applied(pki: Pki, tmp_path: Path) -> None:
    cfg = load_web_config(
        tls_config(
            pki, tmp_path, "  max_version: TLS12\n  cipher_suites:\n    - TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384\n"
        )
    )
    with (
        serve(cfg) as port,
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        client_context(pki).wrap_socket(raw, server_hostname="localhost") as conn,
    ):
        assert conn.version() == "TLSv1.2"
        cipher = conn.cipher()
        assert cipher is not None and cipher[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"


@pytest.mark.slow
def test_a_silent_client_does_not_block_others_and_times_out(
    pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Three clients that send nothing and one that stops inside its ClientHello: a good client is
    served while all four are still open (their handshakes have a deadline no test reaches: the
    scrape cannot have waited for it), and with a short deadline the server closes all four."""
    caplog.set_level(logging.DEBUG, logger="warpwatch.webconfig")
    cfg = load_web_config(tls_config(pki, tmp_path))

    def stalled(port: int) -> list[socket.socket]:
        clients = [socket.create_connection(("127.0.0.1", port), timeout=hang_guard()) for _ in range(4)]
        clients[-1].sendall(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
        return clients

    def still_open(s: socket.socket) -> bool:
        s.setblocking(False)
        try:
            s.recv(1)  # nothing to read and not closed: BlockingIOError
        except BlockingIOError:
            return True
        finally:
            s.settimeout(hang_guard())
        return False

    with serve(cfg, handshake_timeout=3600.0) as port:
        clients = stalled(port)
        try:
            assert get(f"https://127.0.0.1:{port}/metrics", client_context(pki), basic(USER, PASSWORD)).status == 200
            assert all(still_open(s) for s in clients)
        finally:
            for s in clients:
                s.close()
    with serve(cfg, handshake_timeout=0.5) as port:
        for s in stalled(port):
            with s:  # waits (the hang guard) for the close
                assert s.recv(1) == b"", "the server should close a connection that never finishes its handshake"
    logged = _logged(caplog).splitlines()
    timed_out = [line for line in logged if "tls_handshake_failed" in line and "timed out" in line]
    assert len(timed_out) == 4, timed_out  # logged before each close


@pytest.mark.slow
def test_a_rotated_certificate_is_picked_up(pki: Pki, tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(pki.server_crt, cert)
    shutil.copy(pki.server_key, key)
    cfg = load_web_config(write_config(tmp_path, "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"))

    def serial(port: int) -> int:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            client_context(pki).wrap_socket(raw, server_hostname="localhost") as conn,
        ):
            return int(conn.getpeercert()["serialNumber"], 16)  # type: ignore[index, arg-type]

    with serve(cfg) as port:
        assert serial(port) == 2
        _make_leaf(pki.dir, "rotated", "ca", "serverAuth", "DNS:localhost,IP:127.0.0.1", 9)
        key.write_bytes(b"")  # half-written rotation: the old certificate keeps serving
        assert serial(port) == 2
        shutil.copy(pki.dir / "rotated.key", key)
        shutil.copy(pki.dir / "rotated.crt", cert)
        assert serial(port) == 9


@pytest.mark.slow
@pytest.mark.skipif(CURL is None, reason="curl is not installed")
def test_curl(pki: Pki, tmp_path: Path) -> None:
    assert CURL is not None
    cfg = load_web_config(
        tls_config(pki, tmp_path, f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n")
    )

    def curl(*args: str) -> tuple[int, str, str]:
        """(curl's exit status, HTTP status code, body or error)."""
        proc = subprocess.run(
            [CURL, "-sS", "--max-time", "10", "--cacert", str(pki.ca), "-o", "-", "-w", "\n%{http_code}", *args],
            capture_output=True,
            text=True,
            check=False,
        )
        body, _, code = proc.stdout.rpartition("\n")
        return proc.returncode, code, body if proc.returncode == 0 else proc.stderr

    with serve(cfg) as port:
        url = f"https://127.0.0.1:{port}/metrics"
        cert = ("--cert", str(pki.client_crt), "--key", str(pki.client_key))
        assert curl(*cert, "-u", f"{USER}:{PASSWORD}", url) == (0, "200", METRICS.decode())
        assert curl(*cert, "--tls-max", "1.2", "-u", f"{USER}:{PASSWORD}", url) == (0, "200", METRICS.decode())
        assert curl(*cert, "-u", f"{USER}:wrong", url)[:2] == (0, "401")
        assert curl(*cert, url)[:2] == (0, "401")
        rc, _, err = curl("-u", f"{USER}:{PASSWORD}", url)  # no client certificate
        assert rc != 0, err
        rc, code, body = curl(*cert, "-u", f"{USER}:{PASSWORD}", url.replace("https:", "http:"))
        assert (rc, code) == (0, "400") and "Client sent an HTTP request to an HTTPS server" in body


# ---------------------------------------------------------------------------------------------
# Basic auth cache


def test_successful_checks_are_cached_failed_ones_are_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    users = "".join(f"  u{i}: {HASH}\n" for i in range(5))
    cfg = load_web_config(write_config(tmp_path, f"basic_auth_users:\n{users}"))
    auth = BasicAuth(cfg, cache_size=3)

    assert auth.check(basic("u0", PASSWORD))
    assert auth.check(basic("u0", PASSWORD))
    assert len(calls) == 1, "a successful check is cached"
    assert not auth.check(basic("u0", "wrong"))
    assert not auth.check(basic("u0", "wrong"))
    assert len(calls) == 3, "failed checks are not cached"
    assert not auth.check(basic("ghost", PASSWORD))
    assert len(calls) == 4 and calls[-1] == cfg.dummy_hash, "an unknown user costs a bcrypt too"
    assert calls[-1][:7] == HASH.encode()[:7] == b"$2b$04$", "at the configured cost, not a fixed one"
    for i in range(1, 5):
        assert auth.check(basic(f"u{i}", PASSWORD))
    assert len(auth) == 3, "the cache is bounded"
    n = len(calls)
    assert auth.check(basic("u0", PASSWORD))
    assert len(calls) == n + 1, "u0 was evicted"
    assert all(PASSWORD.encode() not in held for held in reachable(auth, bytes))  # the cache keeps no password


def test_authorize_accepts_the_handlers_header_object(tmp_path: Path) -> None:
    cfg = load_web_config(write_config(tmp_path, f"basic_auth_users:\n  {USER}: {HASH}\n"))
    msg = http.client.HTTPMessage()
    msg["authorization"] = basic(USER, PASSWORD)  # header names are case-insensitive
    auth = BasicAuth(cfg)
    assert auth.authorize(msg) == (True, {})
    allowed, extra = auth.authorize({"Authorization": basic(USER, "nope")})
    assert not allowed and extra == {"WWW-Authenticate": 'Basic realm="warpwatch", charset="UTF-8"'}


def test_http2_is_noted_as_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="warpwatch.webconfig")
    load_web_config(write_config(tmp_path, "http_server_config:\n  http2: true\n"))
    assert "web_config_http2_ignored" in _logged(caplog)
